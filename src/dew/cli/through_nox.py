"""The commands that are nox sessions (reproduce, ab): they build images and venvs from the
checkout's locks, so they run as `nox -f <checkout>/noxfile.py -s NAME -- ARGS`; their
`--help` is the session body's USAGE, printed without nox."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys

from dew.bench.common.errors import EXIT_USAGE, say
from dew.host.engine import ROOT


def nox_argv() -> list[str] | None:
    """nox in this interpreter, else on PATH; None without either."""
    if importlib.util.find_spec("nox") is not None:
        return [sys.executable, "-m", "nox"]
    found = shutil.which("nox")
    return [found] if found else None


def run_session(name: str, usage: str, argv: list[str]) -> int:
    if {"-h", "--help"} & set(argv):
        print(f"usage: dew {usage}")
        return 0
    prog = f"dew {name}"
    noxfile = ROOT / "noxfile.py"
    if not noxfile.is_file():
        say(prog, f"runs in a checkout of dew (its noxfile.py); {ROOT} has none")
        return EXIT_USAGE
    nox = nox_argv()
    if nox is None:
        say(prog, "needs nox: python3.12 -m pip install nox")
        return EXIT_USAGE
    return subprocess.run([*nox, "-f", str(noxfile), "-s", name, "--", *argv]).returncode
