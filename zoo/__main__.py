"""``python -m fastgnn.zoo ...`` is ``fastgnn-zoo ...``."""
from fastgnn.zoo.cli import main

main()
