"""Time input loading on its own, e.g.

    python tools/benchmark_data.py data:oxford-flowers --batch 8 --data.image-size 64 \
        --steps 100 --warmup 5 --data.loading.workers 0 --data.path <prepared version dir>

Options: benchmark_data.py --help (logic in dew.bench.data).
"""

import sys

from dew.bench.data import main

# grain starts workers with spawn, which re-imports this file: start nothing on import.
if __name__ == "__main__":
    sys.exit(main())
