from fastgnn.zoo.data.synthetic import CSBM  # noqa: F401
