"""The chip's executor (dew.bench.sweep.chip): cases compiled in processes of their own that
never open a device, saved, then timed in one fresh process per round. On a host without a
TPU the same path runs on the CPU (topology "cpu"): real compiles, real executables saved
and loaded, a real holder process."""

from __future__ import annotations

import dataclasses
import os
import sys

import pytest

from dew.bench.common.units import GIB
from dew.bench.runtime.progress import SilentProgress
from dew.bench.sweep.chip.holder import _beside, own_peak
from dew.bench.sweep.chip.messages import Compiled, Readings
from dew.bench.sweep.chip.rounds import Compiling, HeldChip
from dew.bench.sweep.presets import get
from dew.bench.sweep.settings import Options
from dew.bench.sweep.waves import Waiting


def test_a_rows_peak_is_its_own_only_where_it_raised_the_process_peak():
    assert own_peak(Readings(peak_bytes=2 * GIB), highest=GIB) == (2.0, None)
    peak, note = own_peak(Readings(peak_bytes=GIB), highest=2 * GIB)
    assert peak is None and "earlier case in its process peaked at 2.00 GiB" in note
    assert own_peak(Readings(), highest=0) == (None, None)  # a CPU: no allocator readings


def test_a_rows_peak_says_when_later_cases_programs_were_loaded_beside_it():
    assert "2 programs loaded for later cases (1.00 GiB in use" in _beside(2, GIB, 1.5)
    assert _beside(2, 0, 1.5) is None  # an allocator that does not count programs (a v5e's)
    assert _beside(0, GIB, 1.5) is None  # the round's last case: its program alone
    assert _beside(2, None, None) is None  # a CPU: no allocator readings


def test_the_holder_takes_the_lowest_peak_first(tmp_path):
    chip = HeldChip(Options(preset="cpu-smoke"), SilentProgress(), "cpu")
    case = get("cpu-smoke").cases[0]
    estimates = [Compiled({"compiler_peak_gib": gib}) for gib in (3, 1, 2)]
    ready = [Waiting(i, case, compiled, 0.0) for i, compiled in enumerate(estimates)]
    assert [w.position for w in chip._ordered(ready)] == [1, 2, 0]  # the compiler's estimate
    chip.peaks = {0: 1, 1: 5, 2: 3}  # what the last round read wins
    assert [w.position for w in chip._ordered(ready)] == [0, 2, 1]
    chip.stop()


# A compile process that speaks another shape of Compiled: a figure the row does not have,
# and tokens that are not a count.
MALFORMED = """
import dataclasses
from dew.bench.runtime.protocol import Message, ToParent

@dataclasses.dataclass(frozen=True)
class Compiled(Message):
    figures: dict
    tokens: str

ToParent.from_environment().send(Compiled(FIGURES, TOKENS))
"""


@pytest.mark.parametrize(
    "figures, tokens, named",
    [
        ({"no_such_figure": 1}, None, "Compiled.figures: got an unexpected keyword argument "
                                      "'no_such_figure'"),
        ({"params": 5}, "many", "Compiled.tokens: Input should be a valid integer"),
    ],
)  # fmt: skip
def test_a_malformed_answer_fails_its_case_in_one_line_naming_the_field(figures, tokens, named):
    """The chip's messages are typed and validated where the run receives them: a malformed
    answer is the case's failed row, one line naming the field (not a KeyError)."""
    chip = HeldChip(Options(preset="cpu-smoke"), SilentProgress(), "cpu")
    case = get("cpu-smoke").cases[0]
    script = MALFORMED.replace("FIGURES", repr(figures)).replace("TOKENS", repr(tokens))
    try:
        child = chip._spawn(
            "the case's compile process", [sys.executable, "-c", script], dict(os.environ)
        )
        compiling = Compiling(child, deadline=120)
        row = chip.after_compile(0, case, compiling, compiling.wait())
    finally:
        chip.stop()
    assert row.status == "failed" and "\n" not in row.error
    assert row.error.startswith("the case's compile process sent a malformed 'Compiled' message")
    assert named in row.error, row.error


@pytest.mark.slow
def test_cases_compile_once_elsewhere_and_every_round_times_them_in_a_fresh_holder(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    cases = [c for c in get("cpu-smoke").cases if c.architecture in ("simple_dit", "uvit")]
    options = Options(preset="cpu-smoke", steps=3, mesh={"fsdp": 8, "min_shard_size": 256},
                      compile_jobs=2, compilation_cache_dir="off")  # fmt: skip
    chip = HeldChip(options, SilentProgress(), "cpu")
    try:
        rounds = [list(chip.round(list(enumerate(cases)), r, lambda: None)) for r in range(2)]
    finally:
        chip.stop()
    for results in rounds:
        assert sorted(r.row.architecture for r in results) == ["simple_dit", "uvit"]
        assert all(r.row.status == "ok" and r.row.ms_per_step > 0 for r in results)
    first, second = (
        [[p.name for p in r.row.repeats[0].phases] for r in results] for results in rounds
    )
    assert all("compile" in names and "save" in names for names in first)  # compiled once
    assert not any("compile" in names for names in second)  # the same executables again
    assert sum("open" in names for names in first) == 1  # one holder, opened once a round
    assert all("deserialize" in names for names in first + second)  # loaded in every holder
    assert sum("open" in names for names in second) == 1
    gflop = {r.row.architecture: r.row.gflop_per_step for r in rounds[0]}
    assert {r.row.architecture: r.row.gflop_per_step for r in rounds[1]} == gflop


@pytest.mark.slow
def test_a_later_run_loads_the_programs_an_earlier_one_kept(monkeypatch, tmp_path):
    """JAX's persistent cache cannot be read back without the chip: the chip's runs keep
    their programs whole in the compilation cache directory, and a later run of the same
    case, code and stack loads them; another dtype is another program."""
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    case = next(c for c in get("cpu-smoke").cases if c.architecture == "simple_dit")
    options = Options(preset="cpu-smoke", steps=3, mesh={"fsdp": 8, "min_shard_size": 256},
                      repeats=3, compile_jobs=1, compilation_cache_dir=str(tmp_path))  # fmt: skip

    def one_run(options):
        chip = HeldChip(options, SilentProgress(), "cpu")
        try:
            (result,) = chip.round([(0, case)], 0, lambda: None)
        finally:
            chip.stop()
        assert result.row.status == "ok", result.row.error
        return result.row, [p.name for p in result.row.repeats[0].phases]

    first, first_phases = one_run(options)
    assert "compile" in first_phases and "load" not in first_phases
    assert len(list((tmp_path / "dew-tpu-programs").iterdir())) == 1
    again, again_phases = one_run(options)
    assert "load" in again_phases and "compile" not in again_phases
    assert (again.compile_s, again.gflop_per_step) == (first.compile_s, first.gflop_per_step)
    assert again.load_s is not None
    other, other_phases = one_run(dataclasses.replace(options, dtype="float32"))
    assert "compile" in other_phases
    assert len(list((tmp_path / "dew-tpu-programs").iterdir())) == 2
