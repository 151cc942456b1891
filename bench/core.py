"""Speed and memory benchmarks (same as ``workbench bench``): see :mod:`workbench.tools.bench.benchmark`.

    python bench/core.py [--quick] [--suite NAME ...] [--json bench.json] [--print-json] [--device auto]
"""

import logging
import sys

from workbench.tools.bench.benchmark import build_parser, main

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s: %(message)s")
    args = build_parser().parse_args()
    sys.exit(main(args.suite, args.quick, args.json or None, args.device, args.print_json, args.presets))
