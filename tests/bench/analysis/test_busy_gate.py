"""A busy host judged by what it can do to the row (dew.bench.analysis.host_gates): the other
work's share of the host, times the share of the step that is the host's, bounds how much
slower a busy side may have read; the judge widens the row's and the shift's intervals by
it. A lease's agent at 16% of one of 13 cores is recorded and barely counts; a process
eating a core of a 2-core VM still holds back what it could have made."""

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dew.bench.analysis import comparison, host_gates, judge
from dew.bench.record.schema import StepRepeat, read_run

REPO = Path(__file__).resolve().parents[3]
RUNS = REPO / "results" / "runs"
F32 = RUNS / "20261206T132422Z-small-f32-tpu-v5e-4a3ac6a" / "step.json"
AA1 = RUNS / "20261206T161309Z-small-aa1-tpu-v5e-04f0382" / "step.json"
AA2 = RUNS / "20261206T161750Z-small-aa2-tpu-v5e-04f0382" / "step.json"
CPU_A = RUNS / "20261202-cpu-smoke-stats-aa2-a" / "step.json"
AGENT = "pid 1 (process_api) used 16% of a core"  # the v5e lease's own agent, every record


def repeat(ms=5.0, busy=None, load=None, host_ms=None, cores=None):
    return StepRepeat(ms_per_step=ms, synced_ms=[ms], host_busy=busy, host_load_cores=load,
                      host_ms=host_ms, host_cores=cores)  # fmt: skip


def test_the_bound_weighs_the_load_by_the_hosts_size_and_the_rows_share():
    # the v5e: 0.16 of 13 cores beside a process using 1.5 of them, 70% of whose step is
    # the host's: they fit, so at most the agent's share of the host, under 1%
    tpu = host_gates.repeat_bias(repeat(busy=AGENT, load=0.16, host_ms=3.5, cores=1.5), 13,
                                 False)  # fmt: skip
    assert tpu == pytest.approx(math.log1p(0.7 * 0.16 / 13))
    assert math.expm1(tpu) < 0.01
    # a core eaten on a 2-core VM whose device is the host (XLA's threads on both cores):
    # a thread shares its core with the burner and may run at half speed: up to 2x
    burner = repeat(busy="pid 9 (burn) used 100% of a core", load=1.0)
    assert host_gates.repeat_bias(burner, 2, True) == pytest.approx(math.log(2.0))
    # however little of the host the row's process got beside the burner (what it measured
    # is what it got, not what its threads wanted): CI's run measured half a core
    crowded_out = repeat(busy="pid 9 (burn) used 100% of a core", load=1.0, cores=0.5)
    assert host_gates.repeat_bias(crowded_out, 2, True) == pytest.approx(math.log(2.0))
    # 16% of a core there: the overflow is the 16%
    small = repeat(busy="pid 9 (x) used 16% of a core", load=0.16)
    assert host_gates.repeat_bias(small, 2, True) == pytest.approx(math.log1p(0.16))
    # a process that used 12.9 of the 13 cores itself is crowded by the agent's 16%
    crowded = repeat(busy=AGENT, load=0.16, host_ms=5.0, cores=12.9)
    assert host_gates.repeat_bias(crowded, 13, False) == pytest.approx(math.log1p(0.06))
    # a record made before the load was kept: the idle check's own words give it
    assert host_gates.repeat_load(repeat(busy=AGENT)) == pytest.approx(0.16)
    # what the reading cannot bound is unbounded: a busy card, processes left unnamed
    assert (
        host_gates.repeat_bias(repeat(busy="GPU 0 was 80% busy", load=0.0), 13, False) == math.inf
    )
    unnamed = repeat(busy="pid 2 (a) used 20% of a core; 3 more busy processes")
    assert host_gates.repeat_bias(unnamed, 13, False) == math.inf
    assert host_gates.repeat_bias(repeat(load=5.0), 2, True) == 0.0  # the check found it quiet
    assert host_gates.repeat_bias(repeat(busy=AGENT, load=0.16), None, False) == math.inf


def _busy(record, load: float, reason: str = AGENT, rows=None, scale: float = 1.0):
    """The record with every repeat of `rows` (all by default) taken beside other work of
    `load` cores, its figures `scale` times as long."""
    out = []
    for row in record.rows:
        if row.repeats and (rows is None or row.architecture in rows):
            repeats = [r.model_copy(update={"host_busy": reason, "host_load_cores": load,
                                            "ms_per_step": r.ms_per_step * scale})
                       for r in row.repeats]  # fmt: skip
            row = row.model_copy(update={"repeats": repeats,
                                         "ms_per_step": row.ms_per_step * scale})  # fmt: skip
        out.append(row)
    return record.model_copy(update={"rows": out})


def test_a_float32_run_beside_the_leases_agent_reads_not_reproduced():
    # The fresh records: the agent busy in every repeat of both sides. Before, any
    # busy run repeat held back every `slower`: INCONCLUSIVE, every row undecided.
    run, reference = _busy(read_run(F32), 0.16), _busy(read_run(AA1), 0.16)
    for one, other in ((run, reference), (reference, run)):
        cmp = comparison.compare(one, other)
        assert cmp.outcome == judge.NOT_REPRODUCED, [r.why for r in cmp.counted]
        assert cmp.shift.word in ("slower", "faster")
    unet = next(r for r in comparison.compare(run, reference).counted if r.label == "unet")
    assert unet.difference.ratio == pytest.approx(1.358, abs=0.005)


def test_an_aa_pair_beside_the_agent_still_reads_reproduced():
    cmp = comparison.compare(_busy(read_run(AA2), 0.16), _busy(read_run(AA1), 0.16))
    assert cmp.outcome == judge.REPRODUCED


def _steady(record, seed: int, spread: float = 0.003):
    """The record with every timed row given 3 repeats around its ms/step, `spread` apart."""
    from dew.bench.analysis.repeats import step_repeat, summarize_step

    rng = np.random.default_rng(seed)
    rows = []
    for row in record.rows:
        if row.repeats:
            runs = [step_repeat(row.ms_per_step * math.exp(rng.normal(0, spread)), [1.0], None)
                    for _ in range(3)]  # fmt: skip
            row = summarize_step(row, runs)
        rows.append(row)
    return record.model_copy(update={"rows": rows})


def test_a_busy_reference_never_turns_a_real_slowdown_into_same():
    # A real 30% slowdown of every row, against a reference slowed as much by a burner on
    # one of two cores: the ratios read 1.0, which before read `same` on every row
    # (REPRODUCED). At levels where the figures decide, the burner's bound holds it back.
    run = _busy(_steady(read_run(CPU_A), 1), 0.0, reason="", scale=1.3)  # quiet, truly slower
    reference = _busy(_steady(read_run(CPU_A), 2), 1.0, reason="pid 9 (burn) used 100% of a core",
                      scale=1.3)  # fmt: skip
    cmp = comparison.compare(run, reference, band=5.0, noise=_quiet())
    assert cmp.outcome == judge.INCONCLUSIVE
    assert all(r.verdict == "undecided" for r in cmp.counted)
    assert all("same while the host was busy for" in r.why for r in cmp.counted)
    quiet = comparison.compare(run, _busy(_steady(read_run(CPU_A), 2), 0.0, reason="",
                                          scale=1.3), band=5.0, noise=_quiet())  # fmt: skip
    assert quiet.outcome == judge.REPRODUCED  # the gate, not the figures, held it back


def test_a_busy_side_on_other_rows_never_makes_a_clean_row_faster_or_slower(pinned_noise):
    # Every row but one of the run measured beside a burner eating both cores, and 60%
    # slower for it; the clean row is as it was. Against the median, which the busy rows
    # moved, the clean row read 37% faster: NOT REPRODUCED, before.
    record = _steady(read_run(CPU_A), 3)
    names = [r.architecture for r in record.rows if r.repeats]
    clean, busy = names[0], names[1:]
    run = _busy(_steady(read_run(CPU_A), 4), 2.0, reason="pid 9 (burn) used 200% of a core",
                rows=set(busy), scale=1.6)  # fmt: skip
    cmp = comparison.compare(run, record, band=5.0, noise=_quiet())
    row = next(r for r in cmp.counted if r.label.startswith(clean))
    assert row.verdict not in ("faster", "slower"), row.why
    assert cmp.outcome != judge.NOT_REPRODUCED


def _quiet():
    """Levels small enough that the figures, not the noise, decide: what the gate holds back
    is then the gate's doing."""
    from dew.bench.analysis.levels import noise

    n = noise.Noise(0.005, 20.0, 0.002, 20.0, 0.002, 20.0, "quiet")
    return noise.NoiseModel(n, {}, "quiet")


def test_a_burner_on_other_rows_would_have_called_the_clean_row_faster_without_the_gate():
    # the same comparison judged with no bias: the clean row reads faster (what the gate stops)
    record = _steady(read_run(CPU_A), 3)
    names = [r.architecture for r in record.rows if r.repeats]
    run = _busy(_steady(read_run(CPU_A), 4), 2.0, reason="pid 9 (burn) used 200% of a core",
                rows=set(names[1:]), scale=1.6)  # fmt: skip
    cmp = comparison.compare(run, record, band=5.0, noise=_quiet())
    rows = [r for r in cmp.counted if r.sides is not None]
    d = np.array([[r.sides[0].mean - r.sides[1].mean for r in rows]])
    out = judge.judge_arrays(d, 0.005**2, 20.0, 0.002**2, 20.0, 0.002**2, 20.0,
                             np.array([r.sides[0].n for r in rows]),
                             np.array([r.sides[1].n for r in rows]), band=0.05,
                             alpha=0.05)  # fmt: skip
    clean = next(k for k, r in enumerate(rows) if r.label.startswith(names[0]))
    assert judge.WORDS[int(out["word"][0, clean])] == "faster"


def _step(out: Path) -> Path:
    """A real cpu-smoke run of two cases, three fresh processes each, its record at `out`.
    The runs share a compilation cache beside their records: each case compiles once (the
    test holds the host alone, so its compiles are its whole cost), the steps it times are
    the same programs."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(REPO / "src"),
           "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}  # fmt: skip
    subprocess.run([sys.executable, str(REPO / "tools" / "benchmark_step.py"), "--preset",
                    "cpu-smoke", "--architectures", "simple_dit", "uvit", "--repeats", "3",
                    "--steps", "20", "--compilation-cache-dir", str(out.parent / "xla"),
                    "--json-out", str(out)], env=env, check=True,
                   capture_output=True, timeout=900)  # fmt: skip
    return out


@pytest.mark.slow
@pytest.mark.alone  # its reference run is the quiet host's
def test_a_real_burner_on_this_vm_still_holds_back_the_runs_verdicts(tmp_path):
    # Issue 59: on a 2-core VM, a process eating a core during a run can make every row read
    # slower; the gate's bound for it (a thread sharing the burner's core: up to 2x) keeps
    # the run's `slower` back, where judged without it the change reads slower.
    reference = read_run(_step(tmp_path / "quiet.json"))
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        run = read_run(_step(tmp_path / "busy.json"))
    finally:
        burner.kill()
        burner.wait()
    cores = run.environment.host.logical_cores
    for row in run.rows:
        assert all(r.host_busy and r.host_load_cores >= 0.8 for r in row.repeats), row.repeats
        assert all(r.host_cores is not None and r.host_ms is not None for r in row.repeats)
        assert host_gates.side_bias(row, run) >= math.log1p(min(1.0, 0.8 + 2 - cores)), cores
    cmp = comparison.compare(run, reference, band=5.0, noise=_quiet())
    assert all(r.verdict != "slower" for r in cmp.counted), [r.why for r in cmp.counted]
    # the same figures with the busy readings taken away: where a row then reads slower, the
    # gate is what held it back, and says so (where the burner's noise alone keeps a row
    # undecided, there is nothing for the gate to hold: seen in CI, a row at 1.45x over
    # [0.89, 2.34])
    ungated = run.model_copy(deep=True)
    for row in ungated.rows:
        for repeat in row.repeats or []:
            repeat.host_busy = None
    plain = comparison.compare(ungated, reference, band=5.0, noise=_quiet())
    slower = {r.label for r in plain.counted if r.verdict == "slower"}
    for r in cmp.counted:
        if r.label in slower:
            assert r.why and "slower while the host was busy for 3 of 3 run" in r.why, r.why
    assert slower or all(r.verdict == "undecided" for r in cmp.counted), [
        (r.verdict, r.why) for r in cmp.counted]  # fmt: skip
