"""`nox -s bundle -- --out DIR [--python 3.11]`: what a host with no network needs to run dew
beside its own JAX, in one folder to carry there: every wheel of locks/tpu-host.txt for
the host's Python on manylinux x86_64 (hash checked), dew's own wheel, the install script
(dew.host.bundle_install, as install.py) and bundle.json, which says what the script
checks and installs.

`session` is a nox.Session; nothing here imports nox.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tempfile
from pathlib import Path

from dew.bench.common.arguments import OneLineParser  # standard library only
from dew.bench.common.errors import UsageError
from dew.host import bundle_install, tpu_host
from dew.host.benchmarks import usage
from dew.host.engine import ROOT, EngineError, git_commit, git_diff_sha256, sha256_file
from dew.host.venvs import LOCKS, install_locked
from dew.host.wheelhouse import wheelhouse

LOCK = "tpu-host"
# What the lead carries to a host with the rest of the tree (the device tool's 64 MiB in all).
SIZE_GOAL_MIB = 60
OLDEST_PYTHON = (3, 11)  # pyproject's requires-python


def parse(name: str, argv, declare):
    """A session's flags, all of them its own (`declare(parser)` adds them): bad input one
    line, exit 2; `--help` lists them."""
    parser = OneLineParser(prog=f"nox -s {name} --")
    declare(parser)
    try:
        return parser.parse(list(argv))
    except UsageError as error:
        usage(name, str(error))


def own_flags(parser) -> None:
    parser.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        help="the bundle's folder (new, or an earlier bundle's: replaced)",
    )
    parser.add_argument("--python", default=tpu_host.HOST_PYTHON, metavar="X.Y",
                        help=f"the host's Python (default {tpu_host.HOST_PYTHON})")  # fmt: skip


def checked_arguments(argv) -> tuple[Path, str]:
    """(out, python) from the session's arguments; bad input one line, exit 2."""
    own = parse("bundle", argv, own_flags)
    match = re.fullmatch(r"3\.(\d+)", own.python)
    if not match or (3, int(match.group(1))) < OLDEST_PYTHON:
        usage("bundle", f"--python {own.python}: give the host's CPython as 3.Y, 3.11 or newer")
    out = Path(own.out).resolve()
    if out.exists() and any(out.iterdir()) and not (out / "bundle.json").is_file():
        usage("bundle", f"--out {out} is a folder that holds something other than a bundle")
    if out.is_relative_to(ROOT / "src"):
        usage("bundle", f"--out {out} is inside src/: the bundle would become part of dew's wheel")
    return out, own.python


def manifest(python: str, wheels: list[Path]) -> dict:
    """bundle.json: the host's Python, the lock and the commit the bundle was made from, the
    host packages the install script requires (name -> the lowest version; present only),
    and every wheel's sha256."""
    commit, dirty = git_commit()
    lock = LOCKS / f"{LOCK}.txt"
    return {
        "python": python,
        "lock": f"locks/{lock.name}",
        "lock_sha256": sha256_file(lock),
        "commit": commit,
        "dirty": dirty,
        "diff_sha256": git_diff_sha256() if dirty else None,
        "host_packages": dict(tpu_host.HOST_PACKAGES),
        "host_present": list(tpu_host.HOST_JAX_REQUIREMENTS),
        "wheels": {wheel.name: hashlib.sha256(wheel.read_bytes()).hexdigest() for wheel in wheels},
    }


def bundle(session) -> None:
    make(session, *checked_arguments(session.posargs))


def make(session, out: Path, python: str) -> Path:
    """The bundle for CPython `python` written to `out` (replaced whole): its install.py."""
    try:
        locked = wheelhouse(LOCK, python, log=session.log)
    except EngineError as error:
        session.error(str(error))
    install_locked(session)  # the dev venv: its setuptools builds dew's wheel offline
    with tempfile.TemporaryDirectory() as scratch:
        session.run(
            "python", "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
            "--wheel-dir", scratch, str(ROOT),
        )  # fmt: skip
        (own,) = Path(scratch).glob("dew-*.whl")
        staging = out.with_name(f".{out.name}.writing")
        shutil.rmtree(staging, ignore_errors=True)
        (staging / "wheels").mkdir(parents=True)
        for wheel in [*sorted(locked.glob("*.whl")), own]:
            shutil.copy2(wheel, staging / "wheels" / wheel.name)
        shutil.copyfile(bundle_install.__file__, staging / "install.py")
        wheels = sorted((staging / "wheels").glob("*.whl"))
        text = json.dumps(manifest(python, wheels), indent=2, sort_keys=True) + "\n"
        (staging / "bundle.json").write_text(text)
    if out.exists():
        shutil.rmtree(out)
    staging.rename(out)
    size = sum(path.stat().st_size for path in out.rglob("*") if path.is_file()) / 2**20
    over = f", over the {SIZE_GOAL_MIB} MiB a device copy allows" if size > SIZE_GOAL_MIB else ""
    session.log(
        f"bundle: {out} ({len(wheels)} wheels, {size:.1f} MiB{over}); "
        f"on the host: python{python} {out / 'install.py'}"
    )
    return out / "install.py"
