"""fastgnn.bench: the benchmark harness behind ``scripts/bench.py``.

graphs (real and synthetic graphs, degree statistics), workloads (the registry of op- and
layer-level workloads and their implementations), measure (checks, timing, memory, failure
statuses), suite (running graphs x workloads into rows), report (JSON lines, tables, plots,
README section).
"""
