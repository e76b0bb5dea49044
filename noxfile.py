"""dew's front door. Needs nothing but nox and the standard library: it runs before any
environment exists, and builds every environment it uses from the hash locks."""

from __future__ import annotations

import filecmp
import pathlib
import shutil
import sys
import tempfile

import nox

ROOT = pathlib.Path(__file__).parent
LOCKS = ROOT / "locks"
PYTHON = "3.12"
UV = "uv==0.13.9"  # the lock tool is pinned like everything else

nox.options.default_venv_backend = "venv"
nox.options.sessions = ["tests"]

# What each lock installs: the runtime stack plus the dev tools, per variant.
LOCK_EXTRAS = {"cpu": ["dev"], "cuda12": ["cuda12"], "cuda13": ["cuda13"]}
# CPython on x86_64 Linux with manylinux wheels. uv writes the hashes of every wheel of
# each pinned version, so the cpu lock also installs on Debian trixie's Python 3.13.
LOCK_TARGET = ["--python-version", PYTHON, "--python-platform", "x86_64-manylinux_2_28"]


def install_locked(session: nox.Session, variant: str = "cpu") -> None:
    """The venv from `locks/<variant>.txt` with --require-hashes, then dew without deps."""
    session.install("--require-hashes", "--no-deps", "-r", str(LOCKS / f"{variant}.txt"))
    session.install("--no-deps", "--no-build-isolation", "-e", str(ROOT))


def compile_lock(session: nox.Session, variant: str, output: pathlib.Path) -> None:
    extras = [arg for extra in LOCK_EXTRAS[variant] for arg in ("--extra", extra)]
    session.run(
        "uv", "pip", "compile", "pyproject.toml", *extras, *LOCK_TARGET,
        "--generate-hashes", "--no-header", "--no-annotate", "--quiet",
        "--output-file", str(output),
        env={"UV_CUSTOM_COMPILE_COMMAND": "nox -s lock"},
    )  # fmt: skip


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """The test suite on CPU (8 simulated devices), in a venv built from locks/cpu.txt."""
    install_locked(session)
    session.run("pytest", *session.posargs)


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff over the package, tools, tests and this file."""
    install_locked(session)
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(python=PYTHON)
def lock(session: nox.Session) -> None:
    """Regenerate locks/{cpu,cuda12,cuda13}.txt; `-- --check` fails on a stale lock."""
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
