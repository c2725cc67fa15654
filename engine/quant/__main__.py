"""`python -m engine.quant MODEL --method awq --out DIR` (what `llmbench quantize` runs)."""

import os

from engine import PROG_NAME_ENV
from engine.quant.quantize import quantize_command

if __name__ == "__main__":
    quantize_command.main(prog_name=os.environ.get(PROG_NAME_ENV, "python -m engine.quant"))
