"""`nox -s multihost-smoke`: cpu-smoke as N processes on loopback (JAX's distributed
runtime, gloo) through dew.bench.multihost.launch, in the session's venv."""

from __future__ import annotations

from dew.host.benchmarks import session_flags
from dew.host.engine import ROOT
from dew.host.runner import new_run_dir
from dew.host.venvs import install_locked


def multihost_smoke(session) -> None:
    """The session: `-- [--processes N] [benchmark_step.py flags]` (N default 2)."""
    own, args = session_flags("multihost-smoke", session.posargs, processes_flag)
    install_locked(session)
    run_dir = new_run_dir("multihost-smoke", "cpu")
    session.run(
        "python", "-m", "dew.bench.multihost.launch", "--processes", str(own.processes),
        "--json-out", str(run_dir / "step.json"), "--log-dir", str(run_dir / "logs"),
        "--", "--preset", "cpu-smoke", "--steps", "2", "--idle-check", "warn", *args,
    )  # fmt: skip
    session.log(f"record: {(run_dir / 'step.json').relative_to(ROOT)}")


def processes_flag(parser) -> None:
    parser.add_argument("--processes", type=int, default=2, help="processes on loopback")
