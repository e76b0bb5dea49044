"""The compile stage's order (dew.bench.sweep.chip.compile_order): the longest compiles first, by
the compile times of the records of the same topology, preset and dtype."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from dew.bench.runtime.progress import SilentProgress
from dew.bench.sweep import waves
from dew.bench.sweep.chip import compile_order
from dew.bench.sweep.chip.rounds import HeldChip
from dew.bench.sweep.presets import get
from dew.bench.sweep.settings import Options

REPO = Path(__file__).resolve().parents[3]
CHIP = REPO / "results/runs/20261207T120807Z-small-small1-tpu-v5e-a1819e0/step.json"


def _results(tmp_path: Path) -> Path:
    """A results folder holding the chip's cold 18-case record, the same record as another
    topology's and in float32 (neither may count), and a file that is no record."""
    runs = tmp_path / "runs"
    (runs / "chip").mkdir(parents=True)
    shutil.copy(CHIP, runs / "chip" / "step.json")
    record = json.loads(CHIP.read_text())
    for name in ("other-chip", "f32"):
        other = json.loads(json.dumps(record))
        if name == "f32":
            other["settings"]["dtype"] = "float32"
        else:
            other["environment"]["devices"]["topology"] = "v5e:2x2"
        for row in other["rows"]:
            row["compile_s"] = 1.0
        (runs / name).mkdir()
        (runs / name / "step.json").write_text(json.dumps(other))
    (runs / "broken").mkdir()
    (runs / "broken" / "step.json").write_text("{not json")
    return tmp_path


def test_the_measured_lengths_are_the_same_compile_s_and_nothing_else(tmp_path):
    seconds = compile_order.measured("v5e:1x1", "small", "bfloat16", _results(tmp_path))
    rows = {row["architecture"]: row["compile_s"] for row in json.loads(CHIP.read_text())["rows"]}
    assert len(seconds) == 18
    longest = seconds[("hierarchical_mmdit", 16)]
    assert longest == rows["hierarchical_mmdit"] == max(seconds.values())  # 325.6 s
    assert seconds[("causal_transformer (moe)", 16)] != seconds[("causal_transformer", 16)]
    assert compile_order.measured("v5e:1x1", "small", "float32", tmp_path) == {
        key: 1.0 for key in seconds
    }
    assert compile_order.measured("v4:2x2x1", "small", "bfloat16", tmp_path) == {}


def test_the_longest_start_first_and_a_case_no_record_holds_before_them(tmp_path):
    seconds = compile_order.measured("v5e:1x1", "small", "bfloat16", _results(tmp_path))
    cases = list(get("small").cases)
    unknown = cases[0].__class__(architecture="unet", batch=3)  # no record has batch 3
    pending = list(enumerate([*cases, unknown]))
    ordered = [(c.label(), c.batch) for _, c in compile_order.longest_first(pending, seconds)]
    assert ordered[:2] == [("unet", 3), ("hierarchical_mmdit", 16)]
    lengths = [seconds[key] for key in ordered[1:]]
    assert lengths == sorted(lengths, reverse=True)
    assert compile_order.longest_first(pending, {}) == pending  # nothing measured: as given


def test_a_chip_round_hands_its_compile_stage_the_longest_first(tmp_path, monkeypatch):
    monkeypatch.setattr(compile_order, "RESULTS_ROOT", tmp_path)  # a checkout: its results/
    _results(tmp_path / "results")
    started = []

    def compile_stage(pending, strategy, jobs, limit, progress):
        started.extend(case.architecture for _, case in pending)
        return []
        yield  # a generator, as the stage is

    monkeypatch.setattr(waves, "compile_stage", compile_stage)
    cases = [c for c in get("small").cases if c.architecture in ("unet", "uvit", "hybrid_dit")]
    chip = HeldChip(Options(preset="small", compile_jobs=2), SilentProgress(), "v5e:1x1")
    try:
        assert list(chip.round(list(enumerate(cases)), 0, lambda: None)) == []
    finally:
        chip.stop()
    assert started == ["hybrid_dit", "unet", "uvit"]  # 269.6, 187.0, 91.7 s; preset: unet first


def test_by_default_the_lengths_are_the_checkout_s_own_records():
    seconds = compile_order.measured("v5e:1x1", "small", "bfloat16")
    assert len(seconds) == 18 and max(seconds.values()) == seconds[("hierarchical_mmdit", 16)]
