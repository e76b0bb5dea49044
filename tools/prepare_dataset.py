"""Make a TFDS-layout ArrayRecord version directory, without TensorFlow:

    python tools/prepare_dataset.py --source <102flowers folder> --out DIR
        (the original distribution: jpg/, imagelabels.mat, setid.mat -> oxford_flowers102)
    python tools/prepare_dataset.py --synthetic 2000 --out DIR
        (generated JPEG records around 500 px, for tests and demos)

Then: tools/benchmark_data.py data:oxford-flowers --data.path DIR ...
"""

import argparse
import sys

from dew.data.oxford_flowers import prepare_from_original
from dew.data.synthetic import prepare_synthetic


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="prepare_dataset.py", description=__doc__.split("\n")[0])
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--source", help="folder of the original Oxford Flowers 102 files")
    what.add_argument("--synthetic", type=int, metavar="N", help="N generated records")
    parser.add_argument("--out", required=True, help="the version directory to write")
    parser.add_argument("--seed", type=int, default=0, help="seed of --synthetic")
    args = parser.parse_args(argv)
    if args.synthetic is not None and args.synthetic < 1:
        parser.error(f"--synthetic must be >= 1, got {args.synthetic}")
    try:
        if args.synthetic is not None:
            path = prepare_synthetic(args.synthetic, args.out, seed=args.seed)
        else:
            path = prepare_from_original(args.source, args.out)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
