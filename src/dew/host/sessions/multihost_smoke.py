"""`nox -s multihost-smoke`: cpu-smoke as N processes on loopback (JAX's distributed
runtime, gloo) through dew.bench.multihost.launch, in the session's venv."""

from __future__ import annotations

from dew.host.benchmarks import pop_option
from dew.host.engine import ROOT
from dew.host.runner import new_run_dir
from dew.host.venvs import install_locked


def multihost_smoke(session) -> None:
    """The session: `-- [--processes N] [benchmark_step.py flags]` (N default 2)."""
    install_locked(session)
    args = list(session.posargs)
    processes = pop_option(args, "--processes", "2")
    run_dir = new_run_dir("multihost-smoke", "cpu")
    session.run(
        "python", "-m", "dew.bench.multihost.launch", "--processes", processes,
        "--json-out", str(run_dir / "step.json"), "--log-dir", str(run_dir / "logs"),
        "--", "--preset", "cpu-smoke", "--steps", "2", "--idle-check", "warn", *args,
    )  # fmt: skip
    session.log(f"record: {(run_dir / 'step.json').relative_to(ROOT)}")
