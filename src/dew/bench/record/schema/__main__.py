"""`python -m dew.bench.record.schema --export DIR`: write the JSON Schema files."""

import sys

from dew.bench.record.schema import main

sys.exit(main())
