"""`python -m dew.cli`: the `dew` command without its console script."""

import sys

from dew.cli.main import main

# The benchmarks' children (spawn, forkserver) import this module again: start nothing then.
if __name__ == "__main__":
    sys.exit(main())
