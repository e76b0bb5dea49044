"""Time one compiled training step per architecture: `--help` lists the flags.

    python tools/benchmark_step.py --preset small --architectures unet --json-out bench.json

The tool is a thin front over dew.bench.sweep.step_command (docs/architecture.md: how a case
flows).
"""

import sys

from dew_entry import entry

main = entry("dew.bench.sweep.step_command")

if __name__ == "__main__":
    sys.exit(main())
