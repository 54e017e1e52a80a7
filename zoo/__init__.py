"""fastgnn model zoo: Lightning modules built from stock PyG layers, data modules on the real
dataset loaders, and a LightningCLI (``fastgnn-zoo``) whose ``--model.backend`` picks stock PyG,
fastgnn's kernels or fastgnn's pure-PyTorch reference. Installed as ``fastgnn.zoo`` (the
top-level ``zoo/`` folder of the repository); never import it as ``zoo``."""
