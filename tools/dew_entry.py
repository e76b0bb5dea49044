"""The tools' one way in: their `main` from dew, or, in a Python that lacks dew or what it
needs (the README's `python3.12 tools/benchmark_step.py --help` on a fresh shell), one line
naming that Python and what to do, exit 2 — never a ModuleNotFoundError traceback."""

import importlib
import sys


def entry(module: str):
    """`module`'s main, or exit 2 with one line."""
    try:
        return importlib.import_module(module).main
    except ModuleNotFoundError as missing:
        what = "dew" if (missing.name or "").split(".")[0] == "dew" else f"{missing.name}"
        tool = sys.argv[0] if sys.argv and sys.argv[0] else "tools"
        print(
            f"{tool}: error: this Python ({sys.executable}) cannot import {what}: run the "
            "tool with a Python where dew is installed (`pip install -e .` in a Python 3.12 "
            "venv; README.md), or use its nox sessions",
            file=sys.stderr,
        )
        sys.exit(2)
