import sys

from dew.bench.site.build import main

sys.exit(main())
