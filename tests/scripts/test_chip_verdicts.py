"""scripts/chip_verdicts.py: bad input ends in one line, exit 2; on a host without a TPU the
same flow runs with the cpu-smoke preset: real records through tools/benchmark_step.py, one
stopped by SIGTERM in the middle and continued, then every ordered pair through dew compare."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dew.bench.analysis.judge import EXIT_CODES
from dew.bench.common.files import REPO_ROOT
from dew.bench.record.capture import code_identity
from dew.bench.record.validate import load

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "chip_verdicts.py"
PROG = "scripts/chip_verdicts.py"
CPU = {"JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
NAMES = ("aa1", "aa2", "aa3", "f32", "small1", "small2")
# The CPU stand-in for both sets of records: the preset's two cheapest cases to compile and
# trace, both of one architecture (the decoder and its MoE), so each record holds two rows.
TWO = ("causal_transformer",)
FLOW = ("--preset", "cpu-smoke", "--architectures", *TWO, "--wide-architectures", *TWO,
        "--repeats", "2", "--steps", "3")  # fmt: skip
PAIRS = {
    *((a, b) for a in ("aa1", "aa2", "aa3") for b in ("aa1", "aa2", "aa3") if a != b),
    *(("f32", a) for a in ("aa1", "aa2", "aa3")),
    *((a, "f32") for a in ("aa1", "aa2", "aa3")),
    ("small1", "small2"),
    ("small2", "small1"),
}


def env() -> dict[str, str]:
    return {**os.environ, **CPU, "PYTHONPATH": str(ROOT / "src")}


def argv(*args: str) -> list[str]:
    return [sys.executable, str(SCRIPT), *args]


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(argv(*args), capture_output=True, text=True, timeout=timeout, env=env())


def one_error_line(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2, done.stderr
    (line,) = [x for x in done.stderr.splitlines() if x.strip()]
    assert line.startswith(f"{PROG}: error: ")
    return line.removeprefix(f"{PROG}: error: ")


def short_commit() -> str:
    """The commit as the script names it in a folder (the records' own)."""
    code = code_identity(REPO_ROOT, os.environ)
    return (code.commit or "nocommit")[:7] + ("-dirty" if code.dirty else "")


def test_bad_inputs_are_one_line_each(tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    out = ["--out", str(tmp_path / "runs")]
    assert one_error_line(run(*out, "--only", "aa4")) == (
        "--only: no record named aa4; the records: aa1 aa2 aa3 f32 small1 small2"
    )
    assert one_error_line(run("--out", str(a_file))) == f"--out {a_file} is not a directory"
    assert one_error_line(run(*out, "--cache", str(a_file))) == (
        f"--cache {a_file} is not a directory"
    )
    assert "--only makes records and --compare-only makes none" in one_error_line(
        run(*out, "--only", "aa1", "--compare-only")
    )
    assert one_error_line(run(*out, "--architectures", "no_such_model")).startswith(
        "unknown architecture 'no_such_model' for preset 'small'"
    )
    assert one_error_line(run(*out, "--repeats", "0")) == "--repeats must be at least 1 (got 0)"
    assert one_error_line(run(*out, "--preset", "large")).startswith("--preset 'large'")
    # Two folders of one record at this commit: which to continue is not guessed.
    commit = short_commit()
    for stamp in ("20270101T000000Z", "20270101T000001Z"):
        (tmp_path / "runs" / f"{stamp}-small-aa2-tpu-v5e-{commit}").mkdir(parents=True)
    assert one_error_line(run(*out, "--compare-only")).startswith(
        f"--out {tmp_path / 'runs'} holds 2 records of aa2 at {commit}"
    )


def test_compare_only_names_the_missing_pairs(tmp_path):
    done = run("--out", str(tmp_path), "--compare-only")
    assert done.returncode == 1, done.stderr
    assert f"{PROG}: missing pairs (no record of aa1, aa2, aa3, f32, small1, small2)" in done.stderr
    rows = table(done.stdout)
    assert {(r[0], r[1]) for r in rows} == PAIRS
    assert all(r[3] == "missing" and r[5] == "**not met**" for r in rows)
    assert (tmp_path / "verdicts.md").read_text() == done.stdout


def table(text: str) -> list[list[str]]:
    """The verdict table's rows: run, reference, expected, outcome, exit, met, headline."""
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    assert lines[0] == "| run | reference | expected | outcome | exit | met | headline |"
    return [line.strip("| ").split(" | ") for line in lines[1:]]


def folder(out: Path, name: str) -> Path:
    """Record `name`'s one folder, in the run-folder style: stamp, preset, name, device and
    the commit the script ran at."""
    pattern = rf"\d{{8}}T\d{{6}}Z-cpu-smoke-{name}-cpu-[0-9a-f]{{7}}(-dirty)?"
    (found,) = [p for p in out.iterdir() if re.fullmatch(pattern, p.name)]
    return found


@pytest.mark.slow
def test_the_flow_is_stopped_continued_and_compared(tmp_path):
    out, cache = tmp_path / "runs", tmp_path / "cache"
    flags = ("--out", str(out), "--cache", str(cache), *FLOW)
    # Stopped by SIGTERM once aa2 holds a row: aa1 is complete by then.
    started = subprocess.Popen(argv(*flags), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=env())  # fmt: skip
    deadline = time.monotonic() + 400
    kept = None
    while kept is None and started.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
        records = list(out.glob("*-aa2-*/step.json")) if out.is_dir() else []
        if records and load(records[0]).rows:
            kept = load(records[0])
    started.send_signal(signal.SIGTERM)
    stdout, stderr = started.communicate(timeout=120)
    assert kept is not None, stderr[-3000:]
    assert started.returncode == 128 + signal.SIGTERM, stderr[-3000:]
    assert "Traceback" not in stderr
    last = [line for line in stderr.splitlines() if line.strip()][-1]
    aa2 = folder(out, "aa2")
    assert re.fullmatch(
        rf"{PROG}: error: interrupted \(SIGTERM\) while making aa2: {aa2}/step.json keeps "
        r"\d+ rows, \d+ repeats \(tools/benchmark_step.py exited 143\); run the same command "
        "again to continue",
        last,
    )
    assert stdout == ""  # no table before every record is made
    assert (folder(out, "aa1") / "step.done").is_file()
    stopped = load(aa2 / "step.json")
    assert not (aa2 / "step.done").exists()
    assert stopped.rows and len(stopped.rows) >= len(kept.rows)

    # The same command again: aa1 kept, aa2 continued with --resume, the rest made, compared.
    done = subprocess.run(argv(*flags), capture_output=True, text=True, timeout=600, env=env())
    assert done.returncode in (0, 1), done.stderr[-3000:]
    assert f"{PROG}: aa1: {folder(out, 'aa1')}/step.json is complete, kept" in done.stderr
    assert "--json-out " + str(aa2 / "step.json") + " --resume" in done.stderr
    resumed = {row.key(): row for row in load(aa2 / "step.json").rows}
    for row in stopped.rows:  # every repeat measured before the stop is still there, first
        if row.status == "ok":
            after = resumed[row.key()].repeats
            assert after[: len(row.repeats)] == row.repeats
    for name in NAMES:
        record = load(folder(out, name) / "step.json")
        assert len(record.rows) == 2 and all(len(row.repeats) == 2 for row in record.rows)
        assert (folder(out, name) / "step.done").is_file()
    assert load(folder(out, "f32") / "step.json").settings.dtype == "float32"

    rows = table(done.stdout)
    assert len(rows) == 14 and {(r[0], r[1]) for r in rows} == PAIRS
    for run_name, ref, expected, outcome, status, met, headline in rows:
        assert EXIT_CODES[outcome] == int(status), (run_name, ref, outcome, status)
        f32 = "f32" in (run_name, ref)
        assert expected == ("NOT REPRODUCED (exit 1)" if f32 else
                            "never exit 1" if run_name.startswith("small") else
                            "REPRODUCED or INCONCLUSIVE (never exit 1)")  # fmt: skip
        assert met == ("met" if (status == "1") == f32 else "**not met**")
        assert headline
    held = sum(r[5] == "met" for r in rows)
    assert f"{held} of 14 expectations met." in done.stdout
    assert done.returncode == (0 if held == 14 else 1)
    assert f"Made by `python {PROG} " + " ".join(flags) + "`" in done.stdout
    assert (out / "verdicts.md").read_text() == done.stdout
