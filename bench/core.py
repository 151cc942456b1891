"""Core speed figures (train step vs nn.Transformer, capture overhead, cached decoding): see workbench.benchmark.

    python bench/core.py [--quick] [--json out.json]      (same as: workbench bench)
"""

import argparse
import sys

from workbench.benchmark import main

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    sys.exit(main(quick=args.quick, out_json=args.json))
