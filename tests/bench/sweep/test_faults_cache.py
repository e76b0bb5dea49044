"""A damaged compilation cache (issue 32), for real: tools/benchmark_step.py fills a
--compilation-cache-dir, its entries are then truncated or replaced with garbage; the next
run's case recompiles, its row is ok and says which entries were unreadable (its note, and
a warning line on stderr), and JAX writes them anew: a third run reads the case from the
cache. dew.train.cache_damage does it; tests/train/test_cache_damage.py tries every kind
of damage."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dew.bench.record.schema import read_run

REPO = Path(__file__).resolve().parents[3]
STEP = [sys.executable, str(REPO / "tools" / "benchmark_step.py")]
SMOKE = ["--preset", "cpu-smoke", "--architectures", "simple_dit", "--compile-jobs", "1"]
SMOKE += ["--steps", "2", "--warmup", "1", "--idle-check", "off", "--overwrite"]


def _sweep(cache: Path, out: Path) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [*STEP, *SMOKE, "--compilation-cache-dir", str(cache), "--json-out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    return done


@pytest.mark.slow  # three cpu-smoke runs, two of them compiling: ~40 s
def test_a_damaged_cache_is_recompiled_with_a_warning_and_written_anew(tmp_path):
    cache, out = tmp_path / "cache", tmp_path / "run.json"
    _sweep(cache, out)
    entries = sorted(cache.glob("*-cache"))
    assert entries
    for index, entry in enumerate(entries):  # half cut short, half garbage
        data = entry.read_bytes()
        entry.write_bytes(data[: len(data) // 2] if index % 2 else os.urandom(len(data)))

    done = _sweep(cache, out)
    (row,) = read_run(out).rows
    assert row.status == "ok" and row.load_s is None  # compiled, not read from the cache
    assert row.note.startswith("compilation cache entr") and "unreadable (" in row.note
    assert "_train_step-" in row.note and "recompiled, written anew" in row.note
    warning = next(line for line in done.stderr.splitlines() if "unreadable" in line)
    print(f"\n{warning}")
    assert warning.startswith("warning: simple_dit") and row.note in warning
    assert "Error reading persistent compilation cache" not in done.stderr

    _sweep(cache, out)  # every entry whole again: the case is read from the cache
    (row,) = read_run(out).rows
    assert row.status == "ok" and row.load_s is not None and row.note is None
