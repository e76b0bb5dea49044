"""`nox -s tpu-host-smoke` end to end, as CI runs it: the TPU host reproduced on CPU (Python
3.11, jax/jaxlib 0.10.2 in a folder on PYTHONPATH), the bundle built and installed there
by its install.py, cpu-smoke on simple_dit and unet, the record validated and checked by
the session. The session's venv is this test's (from locks/dev.txt, as the session's would
be), not built again. The slow tier: a fresh machine downloads both wheel sets (about
130 MiB) first. Without python3.11 (or nox) it is skipped, unless DEW_REQUIRE_ENGINE=1
(.ci/run), which makes that a failure.
"""

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from container_support import nox_command, reused_venv, unavailable

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_tpu_host_twin_runs_cpu_smoke_on_the_bundle(tmp_path):
    if shutil.which("python3.11") is None:
        unavailable("no python3.11 on PATH (the TPU host's Python)")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    argv = [*nox_command(), "-s", "tpu-host-smoke", *reused_venv("tpu-host-smoke", tmp_path)]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=1500, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = [line for line in done.stderr.splitlines() if "nox > tpu-host-smoke: " in line]
    assert summary, done.stderr[-3000:]
    assert "the host's Python 3.11." in summary[0] and "and jax 0.10.2" in summary[0]
    assert "2 rows ok" in summary[0]
