"""`python -m dew.bench.record.schema --export DIR`: write the JSON Schema files.

The command line lives here, apart from the schema: the schema package imports pydantic
and the standard library only, and the command line's parser (tyro) is neither.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from dew.bench.common import cli
from dew.bench.common.files import check_output_dir
from dew.bench.record.schema import export


@dataclasses.dataclass(frozen=True)
class ExportArgs:
    """Write the JSON Schema files of the results schema."""

    export: Path
    """the directory to write the *.schema.json files into"""


PROG = "python -m dew.bench.record.schema"


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    """`prog` is the command as typed, in its usage and error lines (`dew schema`)."""

    def body() -> int:
        argv_ = sys.argv[1:] if argv is None else argv
        args = cli.parse(ExportArgs, argv_, prog=prog)
        check_output_dir(args.export, flag="--export")
        for path in export(args.export):
            print(path)
        return 0

    return cli.run(prog, body)


if __name__ == "__main__":
    sys.exit(main())
