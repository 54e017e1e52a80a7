"""fastgnn model zoo: Lightning modules (GCN, GATv2, GraphTransformer, MaxK-SAGE) driven by
LightningCLI YAML configs, with the kernel backend as a config flag. Models land here as
their kernels do; the package exists so the layout and installation are fixed now."""
