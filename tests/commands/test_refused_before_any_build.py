"""Issue 60: `dew reproduce` and `dew ab` check every argument and the record before nox
builds a venv or an image, as compare does: one line, exit 2, and nothing made. A TPU
record's stack is named as a TPU host's own, never as the cpu image's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dew.bench.record import stack

REPO = Path(__file__).resolve().parents[2]
TPU = REPO / "results/runs/20261206T234512Z-small-aa1-tpu-v5e-0a1e23b/step.json"
TPU_F32 = REPO / "results/runs/20261206T235828Z-small-f32-tpu-v5e-0a1e23b/step.json"
CPU = REPO / "results/runs/20261203T085226Z-cpu-smoke-aa1-cpu-8c7e84d/step.json"


def dew(*argv: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "JAX_PLATFORMS": "cpu"}
    return subprocess.run([sys.executable, "-m", "dew.commands", *argv], capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=300)  # fmt: skip


def refused(done: subprocess.CompletedProcess, prog: str) -> str:
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"dew {prog}: error: "), done.stderr
    assert "nox >" not in done.stdout + done.stderr  # nox never started
    return lines[0]


def test_a_tpu_record_names_a_tpu_hosts_stack():
    record = json.loads(TPU.read_text())
    assert stack.recorded_variant(record) == stack.TPU_HOST  # at ec83e06: "cpu"
    assert stack.host_stack(record) == {
        "platform": "tpu", "device": "TPU v5 lite", "python": "3.11.7", "jax": "0.10.2",
        "jaxlib": "0.10.2", "libtpu": "0.0.42.1",
        "bundle lock": "locks/tpu-host.txt sha256:d484d55e62260659",
        "commit": "0a1e23b6505c74f9879f92f4573c1d13caf73552",
    }  # fmt: skip
    matched, unmatched = stack.stack_parts(record, lambda commit: True)
    assert any(line.startswith("stack: a TPU host's own stack: device TPU v5 lite")
               for line in matched)  # fmt: skip
    assert not any("container" in line for line in unmatched)
    other = json.loads(TPU_F32.read_text())
    other["environment"]["backend"]["libtpu"] = "0.0.46.3"
    differences, _ = stack.stack_differences(other, record)
    assert ("libtpu", "0.0.46.3", "0.0.42.1") in [(d.what, d.run, d.reference)
                                                   for d in differences]  # fmt: skip


@pytest.fixture
def nothing_made():
    """No venv of the sessions is made by a refused command."""
    before = {p.name for p in (REPO / ".nox").glob("*")} if (REPO / ".nox").exists() else set()
    yield
    after = {p.name for p in (REPO / ".nox").glob("*")} if (REPO / ".nox").exists() else set()
    assert not {"reproduce", "ab"} & (after - before)


def test_reproduce_refuses_a_tpu_record_here_saying_how_to_rerun_it(nothing_made):
    line = refused(dew("reproduce", str(TPU)), "reproduce")
    assert "ran on a TPU host's own stack: device TPU v5 lite, python 3.11.7" in line
    assert "tools/benchmark_step.py --preset small" in line
    assert "this host has no TPU" in line and f"`dew reproduce {TPU}` there" in line


def test_reproduce_refuses_a_record_this_dew_cannot_read_or_with_no_rows(tmp_path, nothing_made):
    record = json.loads(CPU.read_text())
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps({**record, "schema_version": 99}))
    assert "schema_version 99 is newer than this dew reads" in refused(
        dew("reproduce", str(newer)), "reproduce")  # fmt: skip
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({**record, "rows": []}))
    assert "the record has no rows" in refused(dew("reproduce", str(empty)), "reproduce")


def test_ab_refuses_a_missing_commit_a_tpu_record_and_bad_xla_flags(nothing_made):
    line = refused(dew("ab", "deadbeef1", "HEAD", "--architectures", "uvit"), "ab")
    assert "A deadbeef1 is not a commit of this clone" in line
    line = refused(dew("ab", "HEAD", str(TPU), "--architectures", "uvit"), "ab")
    assert "ran on a TPU host's own stack" in line
    line = refused(dew("ab", "HEAD", "HEAD", "--architectures", "uvit", "--a-xla-flags",
                       "garbage"), "ab")  # fmt: skip
    assert "--a-xla-flags 'garbage': 'garbage' is no XLA flag" in line, line
    line = refused(dew("ab", "HEAD", "HEAD", "--architectures", "uvit",
                       "--b-xla-flags=--xla_no_such_flag=1"), "ab")  # fmt: skip
    assert line.startswith("dew ab: error: --b-xla-flags: JAX cannot start"), line
    assert "Unknown flag in XLA_FLAGS: --xla_no_such_flag=1" in line


def test_a_tpu_hosts_flags_and_an_out_the_image_cannot_write_are_refused(tmp_path, nothing_made):
    line = refused(dew("reproduce", str(CPU), "--dew", str(tmp_path)), "reproduce")
    assert "--dew: only for a TPU record rerun on a TPU host" in line
    line = refused(dew("reproduce", str(CPU), "--out", str(tmp_path / "run")), "reproduce")
    assert f"--out {tmp_path / 'run'}: a run in an image writes under {REPO / 'results'}" in line
    line = refused(dew("ab", "HEAD", "HEAD", "--architectures", "uvit", "--out",
                       str(tmp_path / "ab")), "ab")  # fmt: skip
    assert "a run in an image writes under" in line
    assert not (tmp_path / "run").exists() and not (tmp_path / "ab").exists()
