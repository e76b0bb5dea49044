"""`nox -s lock`: locks/{cpu,cuda12,cuda13,dev}.txt compiled from pyproject.toml by uv;
`-- --check` compiles each afresh beside the old one and fails on a difference."""

from __future__ import annotations

import filecmp
import pathlib
import shutil
import sys
import tempfile

from dew.host.engine import ROOT
from dew.host.venvs import LOCK_EXTRAS, LOCKS, PYTHON

UV = "uv==0.13.9"  # the lock tool is pinned like everything else
# CPython on x86_64 Linux with manylinux wheels. uv writes the hashes of every wheel of
# each pinned version, so the cpu lock also installs on Debian trixie's Python 3.13.
LOCK_TARGET = ["--python-version", PYTHON, "--python-platform", "x86_64-manylinux_2_28"]


def compile_lock(session, variant: str, output: pathlib.Path) -> None:
    extras = [arg for extra in LOCK_EXTRAS[variant] for arg in ("--extra", extra)]
    session.run(
        "uv", "pip", "compile", "pyproject.toml", *extras, *LOCK_TARGET,
        "--generate-hashes", "--no-header", "--no-annotate", "--quiet",
        "--output-file", str(output),
        env={"UV_CUSTOM_COMPILE_COMMAND": "nox -s lock"},
    )  # fmt: skip


def lock(session) -> None:
    session.install(UV)
    check = "--check" in session.posargs
    LOCKS.mkdir(exist_ok=True)
    stale = []
    for variant in LOCK_EXTRAS:
        target = LOCKS / f"{variant}.txt"
        if not check:
            compile_lock(session, variant, target)
            continue
        with tempfile.TemporaryDirectory() as tmp:
            fresh = pathlib.Path(tmp) / target.name
            if target.exists():  # uv keeps the pins it finds: only a pyproject change moves them
                shutil.copyfile(target, fresh)
            compile_lock(session, variant, fresh)
            if not target.exists() or not filecmp.cmp(fresh, target, shallow=False):
                stale.append(target.relative_to(ROOT))
    if stale:
        names = ", ".join(str(path) for path in stale)
        session.error(f"stale lock: {names} no longer matches pyproject.toml; run `nox -s lock`")
    if check:
        print("locks match pyproject.toml", file=sys.stderr)
