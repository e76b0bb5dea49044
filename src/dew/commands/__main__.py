"""`python -m dew.commands`: the `dew` command without its console script."""

import sys

from dew.commands.main import main

# The benchmarks' children (spawn, forkserver) import this module again: start nothing then.
if __name__ == "__main__":
    sys.exit(main())
