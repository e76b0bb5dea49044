"""Time one compiled training step per architecture: `--help` lists the flags.

    python tools/benchmark_step.py --preset small --architectures unet --json-out bench.json

The tool is a thin front over dew.bench.step (the one timing loop) and dew.bench.presets.
"""

import sys

from dew.bench.step import main

if __name__ == "__main__":
    sys.exit(main())
