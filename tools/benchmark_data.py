"""Time input loading on its own, e.g.

    python tools/benchmark_data.py data:oxford-flowers --batch 8 --data.image-size 64 \
        --steps 100 --warmup 5 --data.loading.workers 0 --data.path <prepared version dir>

--repeats N measures the one configuration in N fresh processes, one after another (the
step tool's interleaved rounds, with a single case), and reports the median with its 95%
interval. Options: benchmark_data.py --help (logic in dew.bench.loader.data_command).
"""

import sys

from dew_entry import entry

main = entry("dew.bench.loader.data_command")

# grain starts workers with spawn, which re-imports this file: start nothing on import.
if __name__ == "__main__":
    sys.exit(main())
