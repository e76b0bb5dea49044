"""scripts/tpu_gflop.py: bad input and a host that cannot compile for a TPU end in one line,
exit 2 (its counting rule is tested on the TPU's own HLO in tests/telemetry)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(*argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "tpu_gflop.py"), *argv],
                          capture_output=True, text=True, timeout=120, env=env)  # fmt: skip


def test_an_unknown_architecture_is_one_line():
    done = run("--architectures", "nope")
    assert done.returncode == 2
    (line,) = [x for x in done.stderr.splitlines() if x.strip()]
    assert line.startswith("scripts/tpu_gflop.py: error: --architectures: unknown architecture")


def test_a_host_without_libtpu_says_so_in_one_line():
    import importlib.util

    if importlib.util.find_spec("libtpu") is not None:
        pytest.skip("libtpu is installed here: the compile would run")
    done = run("--architectures", "unet")
    assert done.returncode == 2
    (line,) = [x for x in done.stderr.splitlines() if x.strip()]
    assert line.startswith("scripts/tpu_gflop.py: error: unet: cannot compile for v5e:1x1 here")
