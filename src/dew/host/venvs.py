"""The session's own venv, built from a hash lock: what each lock installs, and the
runner that reads records in the dev venv (the report libraries are not in the measured
images)."""

from __future__ import annotations

from dew.host.engine import ROOT
from dew.host.runner import Runner

PYTHON = "3.12"
LOCKS = ROOT / "locks"
# What each lock installs (pyproject's extras; `published` is the published stack, pinned).
# cpu, cuda12, cuda13 and tpu are the measured stacks: what a measurement imports, nothing
# more. dev is the host's: the same runtime plus the report libraries and the test tools.
# tpu-host is what a bundle brings beside a TPU host's own JAX (dew.host.tpu_host).
LOCK_EXTRAS = {
    "cpu": ["published"],
    "cuda12": ["published", "cuda12"],
    "cuda13": ["published", "cuda13"],
    "dev": ["published", "dev", "report"],
    "tpu": ["published", "tpu"],
    "tpu-host": ["published"],
}


def install_locked(session, variant: str = "dev") -> None:
    """The venv from `locks/<variant>.txt` with --require-hashes, then dew without deps."""
    session.install("--require-hashes", "--no-deps", "-r", str(LOCKS / f"{variant}.txt"))
    session.install("--no-deps", "--no-build-isolation", "-e", str(ROOT))


def today_runner(session) -> Runner:
    """The checkout's own record readers (validate, compare, the A/B table and chart) in the
    session's venv from locks/dev.txt: the report libraries are not in the measured images.
    Its setuptools also builds the wheels of code from outside dew (outside_sources)."""
    install_locked(session)
    return Runner(session)
