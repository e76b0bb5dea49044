"""`dew report`: every record as a static site (dew.bench.site), in this environment; it
needs the report extra (matplotlib, jinja2, ruptures), which `nox -s report` installs from
locks/dev.txt for you."""

from __future__ import annotations

from dew.bench.common.errors import EXIT_USAGE, say

SUMMARY = "every record under results/ as a static site (needs the report extra)"
REPORT_LIBRARIES = ("matplotlib", "jinja2", "ruptures")


def main(argv: list[str]) -> int:
    try:
        from dew.bench.site.build import main as build
    except ModuleNotFoundError as error:
        if error.name not in REPORT_LIBRARIES:
            raise
        say("dew report", f"needs {error.name}, of the report extra: pip install 'dew[report]', "
                          "or run `nox -s report`, which builds its own venv")  # fmt: skip
        return EXIT_USAGE
    return build(argv, prog="dew report")
