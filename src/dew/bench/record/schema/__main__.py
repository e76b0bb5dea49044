"""`python -m dew.bench.record.schema --export DIR`: write the JSON Schema files.

The command line lives here, apart from the schema: the schema package imports pydantic
and the standard library only, and the command line's parser (tyro) is neither.
"""

from __future__ import annotations

import dataclasses
import sys

from dew.bench.common import cli
from dew.bench.common.files import check_output_dir
from dew.bench.record.schema import export, foreign_files


@dataclasses.dataclass(frozen=True)
class ExportArgs:
    """Write the JSON Schema files of the results schema."""

    export: str
    """the directory to write the *.schema.json files into"""
    overwrite: bool = False
    """replace files of the same names that are not an earlier export of the schema"""


PROG = "python -m dew.bench.record.schema"


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    """`prog` is the command as typed, in its usage and error lines (`dew schema`)."""

    def body() -> int:
        argv_ = sys.argv[1:] if argv is None else argv
        args = cli.parse(ExportArgs, argv_, prog=prog)
        folder = check_output_dir(args.export, flag="--export")
        foreign = [] if args.overwrite or not folder.is_dir() else foreign_files(folder)
        if foreign:
            names = ", ".join(path.name for path in foreign)
            raise cli.UsageError(f"--export {folder} holds {names}, not an earlier export of "
                                 "the schema; pass --overwrite to replace it, or give another "
                                 "folder")  # fmt: skip
        for path in export(folder):
            print(path)
        return 0

    return cli.run(prog, body)


if __name__ == "__main__":
    sys.exit(main())
