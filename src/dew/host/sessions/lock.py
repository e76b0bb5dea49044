"""`nox -s lock`: locks/*.txt compiled by uv, one per LOCK_EXTRAS entry from pyproject.toml
and tpu-host-jax (the TPU host's own packages as found); `-- --check` compiles each afresh
beside the old one and fails on a difference."""

from __future__ import annotations

import filecmp
import pathlib
import shutil
import sys
import tempfile

from dew.host import tpu_host
from dew.host.engine import ROOT
from dew.host.venvs import LOCK_EXTRAS, LOCKS, PYTHON

UV = "uv==0.13.9"  # the lock tool is pinned like everything else
# CPython on x86_64 Linux with manylinux wheels. uv writes the hashes of every wheel of
# each pinned version, so the cpu lock also installs on Debian trixie's Python 3.13.
# libtpu's wheels are manylinux_2_31 only.
PLATFORMS = {"tpu": "x86_64-manylinux_2_31"}
DEFAULT_PLATFORM = "x86_64-manylinux_2_28"
# The lock whose pins a new lock starts from (uv keeps the pins it finds in its output
# file): a package the stacks share gets the published version in each.
PUBLISHED_LOCK = "cpu"


# Every lock: pyproject's (LOCK_EXTRAS), then the TPU host's own packages as found.
LOCK_NAMES = [*LOCK_EXTRAS, tpu_host.HOST_LOCK]


def variant_arguments(variant: str, scratch: pathlib.Path) -> list[str]:
    """A lock's input and what it adds to the common arguments: pyproject.toml with its
    extras and its Python (tpu-host: the host's Python and versions, without the host's own
    packages); tpu-host-jax: the host's own packages."""
    if variant == tpu_host.HOST_LOCK:
        return tpu_host.host_lock_arguments(scratch)
    extras = [arg for extra in LOCK_EXTRAS[variant] for arg in ("--extra", extra)]
    if variant == "tpu-host":
        return ["pyproject.toml", *extras, *tpu_host.lock_arguments(scratch)]
    return ["pyproject.toml", *extras, "--python-version", PYTHON]


def compile_lock(session, variant: str, output: pathlib.Path) -> None:
    published = LOCKS / f"{PUBLISHED_LOCK}.txt"
    if not output.exists() and variant != PUBLISHED_LOCK and published.exists():
        shutil.copyfile(published, output)
    with tempfile.TemporaryDirectory() as scratch:
        session.run(
            "uv", "pip", "compile",
            *variant_arguments(variant, pathlib.Path(scratch)),
            "--python-platform", PLATFORMS.get(variant, DEFAULT_PLATFORM),
            "--generate-hashes", "--no-header", "--no-annotate", "--quiet",
            "--output-file", str(output),
            env={"UV_CUSTOM_COMPILE_COMMAND": "nox -s lock"},
        )  # fmt: skip


def lock(session) -> None:
    session.install(UV)
    check = "--check" in session.posargs
    LOCKS.mkdir(exist_ok=True)
    stale = []
    for variant in LOCK_NAMES:
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
