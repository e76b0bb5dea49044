"""`python -m dew.bench.schema --export DIR`: write the JSON Schema files."""

import sys

from dew.bench.schema import main

sys.exit(main())
