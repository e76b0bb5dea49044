"""scripts/held_chip_crowding.py: bad input ends in one line, exit 2; on a host without a
TPU the same path runs on the CPU: programs a held-chip run kept (real compiles, saved and
loaded executables), timed alone and beside the others, one table line per condition."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# a cpu-smoke record whose simple_dit row (params, batch) names the program compiled below
RECORD = ROOT / "results/runs/20261203T092619Z-cpu-smoke-auto20-cpu-a5b393c/step.json"
CPU = {"JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}


def run(*argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, **CPU, "PYTHONPATH": str(ROOT / "src")}
    script = str(ROOT / "scripts" / "held_chip_crowding.py")
    return subprocess.run([sys.executable, script, *argv], capture_output=True, text=True,
                          timeout=300, env=env)  # fmt: skip


def one_error_line(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2
    (line,) = [x for x in done.stderr.splitlines() if x.strip()]
    return line


def test_a_cache_without_kept_programs_is_one_line(tmp_path):
    line = one_error_line(run("--cache", str(tmp_path), "--record", str(RECORD)))
    assert line == (
        f"scripts/held_chip_crowding.py: error: --cache: no kept programs in "
        f"{tmp_path}/dew-tpu-programs (run a TPU case first)"
    )


def test_a_case_the_cache_does_not_hold_is_one_line_naming_it(tmp_path):
    entry = tmp_path / "dew-tpu-programs" / "0123"
    entry.mkdir(parents=True)
    (entry / "figures.json").write_text(json.dumps({"figures": {"params": 1, "batch": 8}}))
    (entry.parent / ".keeping-1").mkdir()  # a copy another run is still keeping: passed over
    line = one_error_line(
        run("--cache", str(tmp_path), "--record", str(RECORD), "--cases", "simple_dit", "unet")
    )
    assert line.endswith("--cases: no kept program for simple_dit, unet in "
                         f"{tmp_path}/dew-tpu-programs")  # fmt: skip


@pytest.mark.slow
def test_a_kept_program_is_timed_alone_and_crowded(tmp_path, monkeypatch):
    from dew.bench.runtime.progress import SilentProgress
    from dew.bench.sweep.chip.rounds import HeldChip
    from dew.bench.sweep.presets import get
    from dew.bench.sweep.settings import Options

    for name, value in CPU.items():
        monkeypatch.setenv(name, value)
    cases = [c for c in get("cpu-smoke").cases if c.architecture in ("simple_dit", "uvit")]
    options = Options(preset="cpu-smoke", steps=2, mesh={"fsdp": 8, "min_shard_size": 256},
                      compile_jobs=2, compilation_cache_dir=str(tmp_path))  # fmt: skip
    chip = HeldChip(options, SilentProgress(), "cpu")
    try:
        assert all(r.row.status == "ok" for r in chip.round(list(enumerate(cases)), 0, lambda: 0))
    finally:
        chip.stop()
    done = run("--cache", str(tmp_path), "--record", str(RECORD), "--cases", "simple_dit",
               "--crowd", "2", "--windows", "2", "--steps", "2", "--objects", "1000")  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = [x for x in done.stdout.splitlines() if x.startswith("| simple_dit |")]
    conditions = [x.split(" | ")[1] for x in lines]
    assert conditions == ["alone", "crowded (2 more loaded)", "crowded, frozen",
                          "alone again", "objects (1,000 more)"]  # fmt: skip
    assert all(float(x.split(" | ")[2]) > 0 for x in lines)
    assert done.stdout.startswith("cpu: 1 other programs to crowd with")
