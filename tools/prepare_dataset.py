"""Make a TFDS-layout ArrayRecord version directory, without TensorFlow, e.g.

    python tools/prepare_dataset.py --source <102flowers folder> --out DIR
    python tools/prepare_dataset.py --synthetic 2000 --out DIR

Options: prepare_dataset.py --help (logic in dew.bench.loader.prepare_dataset).
"""

import sys

from dew_entry import entry

main = entry("dew.bench.loader.prepare_dataset")

if __name__ == "__main__":
    sys.exit(main())
