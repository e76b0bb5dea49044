"""The commands that are nox sessions (reproduce, ab): they build images and venvs from the
checkout's locks, so they run as `nox -f <checkout>/noxfile.py -s NAME -- ARGS`; their
`--help` is the session body's help_text, printed without nox."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from dew.bench.common.errors import EXIT_USAGE, Interrupted, say, stop_signals
from dew.host.benchmarks import TYPED_COMMAND
from dew.host.engine import ROOT
from dew.host.handover import run_tied


def nox_argv() -> list[str] | None:
    """nox in this interpreter, else in the Python this venv was made from (where the
    README installs it: `python3.12 -m pip install nox`), else on PATH; None without."""
    for python in (sys.executable, str(Path(sys.base_prefix) / "bin" / "python3")):
        has_nox = subprocess.run([python, "-c", "import nox"], capture_output=True)
        if has_nox.returncode == 0:
            return [python, "-m", "nox"]
    found = shutil.which("nox")
    return [found] if found else None


def from_here(arg: str) -> str:
    """An argument that names a path from this directory (a record, a folder, a wheel,
    `PATH@REV`), made absolute: nox runs its sessions from the noxfile's directory."""
    path, at, rev = arg.rpartition("@") if "@" in arg else (arg, "", "")
    if arg.startswith("-") or not path or not Path(path).exists():
        return arg
    return str(Path(path).resolve()) + at + rev


def run_session(name: str, help_text: str, argv: list[str], check) -> int:
    """`check(argv, python)`: the session's own checks of every argument, run here first
    (one line naming `dew NAME`, exit 2, before nox starts or any image is built)."""
    if {"-h", "--help"} & set(argv):
        print(help_text, end="")
        return 0
    prog = f"dew {name}"
    noxfile = ROOT / "noxfile.py"
    if not noxfile.is_file():  # the checks need the checkout's tool too
        say(prog, f"runs in a checkout of dew (its noxfile.py); {ROOT} has none")
        return EXIT_USAGE
    os.environ[TYPED_COMMAND] = prog  # nox's session names it too, in its error lines
    try:
        with stop_signals():
            check(argv, sys.executable)
    except SystemExit as stop:  # the sessions' usage(): its line is out
        return stop.code if isinstance(stop.code, int) else EXIT_USAGE
    except Interrupted as stop:
        say(prog, "interrupted while its arguments were checked; nothing was built or run")
        return stop.exit_code
    nox = nox_argv()
    if nox is None:
        say(prog, "needs nox: python3.12 -m pip install nox")
        return EXIT_USAGE
    if not any(arg == "--out" or arg.startswith("--out=") for arg in argv):
        here = Path.cwd().resolve()
        if here != ROOT and ROOT not in here.parents:
            # nox runs from the noxfile's folder: the run's folder is the checkout's, said
            print(f"{prog}: started outside the checkout, the run's folder goes under "
                  f"{ROOT / 'results' / 'runs'} and its environments under {ROOT / '.nox'} "
                  "(nox runs from the checkout; an image writes only under its results/)",
                  file=sys.stderr)  # fmt: skip
    # Ctrl-C reaches nox from the terminal; a SIGTERM or SIGINT sent to this process alone is
    # passed on, and the session's own stop is awaited rather than cut short
    code = run_tied([*nox, "-f", str(noxfile), "-s", name, "--", *map(from_here, argv)])
    if code < 0:  # nox itself ended by the signal
        say(prog, f"interrupted ({signal.Signals(-code).name}): nox stopped")
        return 128 - code
    return code
