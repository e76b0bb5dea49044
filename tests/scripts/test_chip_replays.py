"""scripts/chip_replays.py: bad input is one line, exit 2; on this CPU, with the chip faked at
the device identity only (tests/infra/fake_tpu), the whole flow:
dew reproduce of a TPU record, the two A/Bs, a SIGTERM in the middle passed on and the
flow continued by the same command, then the table with each step's verdict and wall time."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "chip_replays.py"
PROG = "scripts/chip_replays.py"
CHIP = ROOT / "tests" / "infra" / "fake_tpu"  # its sitecustomize: the chip faked
CASES = ["--preset", "cpu-smoke", "--architectures", "simple_dit", "--steps", "3",
         "--warmup", "1"]  # fmt: skip


def env(chip: Path | None = None) -> dict[str, str]:
    path = [str(chip)] if chip else []
    return {**os.environ, "JAX_PLATFORMS": "cpu",
            "PYTHONPATH": os.pathsep.join([*path, str(ROOT / "src")])}  # fmt: skip


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--only", "f32"], "--only takes some of reproduce ab-dtype ab-aa; no step named f32"),
        (["--rounds", "1"], "--rounds"),
        (["--record", "no/such.json"], "--record no/such.json is no file"),
    ],
)
def test_bad_input_is_one_line(args, said, tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path), *args],
                          capture_output=True, text=True, env=env(), timeout=120)  # fmt: skip
    assert done.returncode == 2, done.stderr
    (line,) = [x for x in done.stderr.splitlines() if x.strip()]
    assert line.startswith(f"{PROG}: error: ") and said in line, line
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_the_flow_is_stopped_continued_and_tabled(tmp_path):
    chip = CHIP
    record, cache = tmp_path / "record.json", tmp_path / "cache"
    # The record's program in the flow's cache: reproduce reruns the record with its cache,
    # and the A/Bs' bfloat16 side loads it. No idle check (its 3 s window): the record's
    # figures are not what the test judges.
    made = subprocess.run([sys.executable, "-m", "dew.commands", "step", *CASES, "--idle-check",
                           "off", "--json-out", str(record), "--compilation-cache-dir",
                           str(cache)], capture_output=True, text=True, env=env(chip),
                          timeout=600)  # fmt: skip
    assert made.returncode == 0, made.stderr[-2000:]
    out = tmp_path / "out"
    architectures = CASES[CASES.index("--architectures") + 1]
    argv = [sys.executable, str(SCRIPT), "--out", str(out), "--cache", str(cache),
            "--record", str(record), "--preset", "cpu-smoke", "--architectures",
            architectures, "--steps", "3", "--rounds", "2"]  # fmt: skip
    first = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=env(chip))  # fmt: skip
    deadline = time.monotonic() + 600
    # Stopped once ab-dtype has a run behind it: its plan is written when a run ends (a
    # round's record is there from the run's start, and a run cut off is made again).
    while time.monotonic() < deadline and not list(out.glob("*-ab-dtype-*/ab-plan.json")):
        time.sleep(0.2)
    first.send_signal(signal.SIGTERM)
    _, err = first.communicate(timeout=300)
    assert first.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert "interrupted while running ab-dtype" in err.splitlines()[-1]
    again = subprocess.run(argv, capture_output=True, text=True, env=env(chip), timeout=1200)
    assert again.returncode in (0, 1), again.stderr[-2000:]
    assert "reproduce: " in again.stderr and "is done, kept" in again.stderr
    table = (out / "replays.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    assert [row.split(" | ")[0].strip("| ") for row in rows[1:]] == [
        "reproduce", "ab-dtype", "ab-aa"]  # fmt: skip
    assert "the differences go" not in table  # the rerun's note is in its record, not here
    plans = sorted(out.glob("*-ab-dtype-*/ab-plan.json"))
    assert len(plans[-1].read_text().split('"record"')) == 1 + 4  # 2 rounds x 2 sides
