"""A step whose loss becomes NaN (dew.bench.sweep.divergence): its row fails, "the loss became
nan at step N of M", the exit code says a case failed and validate counts it; with
--loss-may-diverge the row is kept, noted, and its table line warns. A real step, through
the real tool: its loss is finite for two steps, then NaN."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from dew.bench.record.schema import read_run
from dew.bench.sweep import divergence

REPO = Path(__file__).resolve().parents[3]
STEP = [sys.executable, str(REPO / "tools" / "benchmark_step.py")]
# one warmup step, then 2 + 2 timed: steps 1 to 5, the loss NaN from step 3
SMOKE = ["--preset", "cpu-smoke", "--steps", "2", "--warmup", "1", "--idle-check", "off"]
SMOKE += ["--step", "nan_step:make_step"]
ERROR = "the loss became nan at step 3 of 5"

FACTORY = '''
"""A least-squares step whose loss turns NaN at its third step (the state counts them)."""
import jax
import jax.numpy as jnp
import numpy as np


def make_step(batch=8):
    @jax.jit
    def step(state, batch):
        count = state["count"] + 1
        loss, grad = jax.value_and_grad(lambda w: jnp.mean((batch["x"] @ w) ** 2))(state["w"])
        loss = jnp.where(count >= 3, jnp.nan, loss)
        return {"w": state["w"] - 0.01 * grad, "count": count}, {"loss": loss}

    x = np.random.default_rng(0).normal(size=(batch, 16)).astype(np.float32)
    state = {"w": jnp.ones((16, 1)), "count": jnp.zeros((), jnp.int32)}
    return step, state, {"x": x}
'''


@pytest.fixture(scope="module")
def factories(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("factories")
    (folder / "nan_step.py").write_text(textwrap.dedent(FACTORY))
    return folder


def _tool(factories: Path, *argv: str) -> subprocess.CompletedProcess:
    path = os.pathsep.join(filter(None, [str(factories), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path, "JAX_PLATFORMS": "cpu"}
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    return subprocess.run(
        [*STEP, *SMOKE, *argv], capture_output=True, text=True, env=env, timeout=300
    )


def _validate(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dew.bench.record.validate", str(path)],
        capture_output=True,
        text=True,
    )


def test_the_first_non_finite_loss_and_its_step():
    finite = [np.float32(1.0), np.float32(0.5), None, {"not": "a number"}]
    assert divergence.verdict(finite, may_diverge=False) == (None, None)
    losses = [np.float32(1.0), np.float32(np.inf), np.float32(np.nan)]
    error, note = divergence.verdict(losses, may_diverge=False)
    assert note is None and error.startswith("the loss became inf at step 2 of 3: ")
    assert "--loss-may-diverge" in error
    error, note = divergence.verdict(losses, may_diverge=True)
    assert error is None and note.startswith("the loss became inf at step 2 of 3 (")


def test_a_nan_loss_fails_its_row_and_validate_counts_it(factories, tmp_path):
    out = tmp_path / "run.json"
    done = _tool(factories, "--json-out", str(out))
    print(done.stdout)
    assert done.returncode == 1, done.stderr  # a case failed
    (row,) = read_run(out).rows
    assert row.status == "failed" and row.error.startswith(ERROR + ": ")
    assert row.loss_finite is False and row.ms_per_step > 0  # the times stay in the record
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("nan_step")]
    assert f"failed: {ERROR}" in line
    valid = _validate(out)
    assert valid.returncode == 0 and "1 rows, 1 failed)" in valid.stdout, valid.stdout


def test_a_step_known_to_diverge_keeps_its_row_with_a_warning(factories, tmp_path):
    out = tmp_path / "run.json"
    done = _tool(factories, "--loss-may-diverge", "--no-isolate", "--json-out", str(out))
    print(done.stdout)
    assert done.returncode == 0, done.stderr
    (row,) = read_run(out).rows
    assert row.status == "ok" and ERROR in row.note and row.loss_finite is False
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("nan_step")]
    assert "the loss is not finite" in line
    valid = _validate(out)
    assert "1 failed, 1 ok with a loss that is not finite" not in valid.stdout
    assert "0 failed, 1 ok with a loss that is not finite)" in valid.stdout, valid.stdout
