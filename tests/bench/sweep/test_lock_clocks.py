"""--lock-clocks base|max|off (dew.bench.sweep.locked_clocks): the refusals, one line and
exit 2, from the real command line on this CPU host; the lock in the record's environment
and `restored` rewritten once the locks are reset; --resume under another lock refused;
and a real process stopped by SIGTERM while its cards are locked. NVML is replaced at the
boundary (tests/infra/fake_nvml.py: an H200's recorded answers, every set and reset kept),
nothing else."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from infra.fake_nvml import NO_PERMISSION, FakeNvml, opener, set_and_reset

from dew.bench.common.cli import UsageError
from dew.bench.common.errors import WriteFailed
from dew.bench.record.schema import read_run, write_run
from dew.bench.sweep import locked_clocks
from dew.bench.sweep import run as step
from dew.bench.sweep.presets import Case
from dew.bench.sweep.settings import Options
from dew.telemetry import clocks

ROOT = Path(__file__).parents[3]
TESTS = ROOT / "tests"
PUBLISHED = ROOT / "results" / "published" / "2026-09-02-rtx4080-6b0f119-small.json"


@pytest.fixture(autouse=True)
def no_settling(monkeypatch):
    monkeypatch.setattr(clocks, "SETTLE_S", 0.0)


def held(nv: FakeNvml, mode: str = "max", platform: str | None = "gpu", json_out=None):
    lines: list[str] = []
    context = locked_clocks.held(
        mode, platform, json_out=json_out, log=lines.append, open_session=opener(nv)
    )
    return context, lines


def write_locked_record(path: Path, lock) -> None:
    """A record as the run writes it before its first case: the lock in its environment."""
    record = read_run(PUBLISHED)
    environment = record.environment.model_copy(update={"locked_clocks": lock})
    write_run(path, record.model_copy(update={"environment": environment}))


# --- the command line, for real ------------------------------------------------------------


def step_tool(*flags: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "tools/benchmark_step.py", "--preset", "cpu-smoke"]
    command += ["--architectures", "simple_dit", "--steps", "2", *flags]
    environment = {**os.environ, "JAX_PLATFORMS": "cpu"}
    return subprocess.run(
        command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=300
    )


def test_lock_clocks_fast_is_one_line_naming_the_choices_and_exit_2():
    done = step_tool("--lock-clocks", "fast")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "tools/benchmark_step.py: error: --lock-clocks 'fast' is not valid; valid: base, max, off"
    ]


def test_lock_clocks_max_on_this_cpu_host_is_one_line_and_exit_2_before_any_case():
    done = step_tool("--lock-clocks", "max")
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()  # refused before the device probe
    assert line.startswith(
        "tools/benchmark_step.py: error: --lock-clocks max locks NVIDIA GPU clocks; no NVIDIA "
        "GPU here: "
        "NVML unavailable ("
    )
    assert line.endswith("); use --lock-clocks off") and done.stdout == ""


# --- refusals before any lock --------------------------------------------------------------


def test_off_locks_nothing_and_opens_no_nvml():
    nv = FakeNvml()
    context, lines = held(nv, mode="off")
    with context as lock:
        assert lock is None
    assert lines == [] and nv.calls == []


def test_a_multi_process_run_is_refused():
    nv = FakeNvml()
    with pytest.raises(UsageError, match="in a multi-process run: .* or use --lock-clocks off"):
        locked_clocks.check("max", in_cluster=True, open_session=opener(nv))
    with pytest.raises(UsageError, match="in a multi-process run"):
        with held(nv, platform=None)[0]:
            pass
    assert set_and_reset(nv.calls) == []


def test_a_gpu_host_whose_cases_run_on_cpu_is_refused_before_any_lock():
    nv = FakeNvml()
    locked_clocks.check("base", in_cluster=False, open_session=opener(nv))  # a card: goes on
    with pytest.raises(UsageError) as refused:
        with held(nv, mode="base", platform="cpu")[0]:
            pass
    assert str(refused.value) == (
        "--lock-clocks base locks NVIDIA GPU clocks; the cases here run on cpu: "
        "use --lock-clocks off"
    )
    assert set_and_reset(nv.calls) == []


def test_no_permission_is_one_line_run_as_root_or_off_and_nothing_stays_locked():
    nv = FakeNvml(cards=2, fail={("nvmlDeviceSetGpuLockedClocks", 1): NO_PERMISSION})
    with pytest.raises(UsageError) as refused:
        with held(nv)[0]:
            pytest.fail("no case may run")
    assert str(refused.value) == (
        "--lock-clocks max: NVML has no permission to lock card 1's SM clock "
        "(NVMLError_NoPermission: Insufficient Permissions); run as root, or use "
        "--lock-clocks off"
    )
    assert not nv.locked


# --- the record ----------------------------------------------------------------------------


def test_the_record_holds_the_lock_and_says_restored_once_the_locks_are_reset(tmp_path):
    path, nv = tmp_path / "step.json", FakeNvml()
    context, lines = held(nv, json_out=str(path))
    with context as lock:
        write_locked_record(path, lock)
        during = read_run(path).environment.locked_clocks
    after = read_run(path).environment.locked_clocks
    assert (during.restored, after.restored) == (False, True)
    assert (after.mode, after.cards[0].sm_clock_mhz, after.cards[0].memory_clock_mhz) == (
        "max",
        1980,
        3201,
    )
    assert lines == [
        "clocks locked (max): card 0 SM 1980 MHz, reads 1980 MHz, memory 3201 MHz; reset when "
        "the run ends",
        "clocks restored: card 0",
    ]
    assert not nv.locked


def test_a_failed_run_resets_the_locks_and_its_record_says_so(tmp_path):
    path, nv = tmp_path / "step.json", FakeNvml()
    context, _ = held(nv, mode="base", json_out=str(path))
    with pytest.raises(RuntimeError):
        with context as lock:
            write_locked_record(path, lock)
            raise RuntimeError("the run failed")
    assert read_run(path).environment.locked_clocks.restored and not nv.locked


def test_after_a_failed_write_the_locks_are_reset_and_the_record_is_left_alone(tmp_path):
    path, nv = tmp_path / "step.json", FakeNvml()
    context, lines = held(nv, json_out=str(path))
    with pytest.raises(WriteFailed):
        with context as lock:
            write_locked_record(path, lock)
            raise WriteFailed(path, OSError(28, "No space left on device"))
    assert not nv.locked and lines[-1] == "clocks restored: card 0"
    assert read_run(path).environment.locked_clocks.restored is False  # no second write


def test_resume_under_another_lock_is_refused(tmp_path):
    path = tmp_path / "step.json"
    with held(FakeNvml(), json_out=str(path))[0] as lock:
        write_locked_record(path, lock)
    locked = read_run(path).environment
    unlocked = read_run(PUBLISHED).environment
    locked_clocks.check_resume(locked, locked, str(path))  # the same lock: goes on
    with pytest.raises(
        UsageError, match="^--resume: --lock-clocks differs: max in the record, off in this run"
    ):
        locked_clocks.check_resume(locked, unlocked, str(path))


# --- the run itself (cases that fail fast: a model field no config has) ---------------------

FAILING = Case(architecture="simple_dit", batch=8, model={"no_such_field": 1})
OPTIONS = Options(preset="cpu-smoke", steps=1, warmup=0, isolate=False,
                  mesh={"fsdp": 8, "min_shard_size": 256})  # fmt: skip


def test_a_run_whose_case_fails_carries_the_lock_and_ends_with_it_reset(tmp_path):
    path, nv = tmp_path / "step.json", FakeNvml()
    context, _ = held(nv, json_out=str(path))
    with context as lock:
        record = step.run(OPTIONS, [FAILING], json_out=str(path), log=lambda _: None,
                          locked_clocks=lock)  # fmt: skip
        assert nv.locked  # the case ran under the lock
    assert record.rows[0].status == "failed"
    assert record.environment.locked_clocks.cards[0].sm_clock_mhz == 1980
    assert read_run(path).environment.locked_clocks.restored and not nv.locked


def test_resume_of_an_unlocked_record_under_a_lock_is_refused(tmp_path):
    path = tmp_path / "step.json"
    step.run(OPTIONS, [FAILING], json_out=str(path), log=lambda _: None)
    before = path.read_bytes()
    with held(FakeNvml(), json_out=str(path))[0] as lock:
        with pytest.raises(
            UsageError, match="^--resume: --lock-clocks differs: off in the record, max in this run"
        ):
            step.run(OPTIONS, [FAILING], json_out=str(path), resume=True, locked_clocks=lock)
    assert path.read_bytes() == before


def test_a_resume_refused_before_its_first_write_leaves_the_earlier_lock_as_it_was(tmp_path):
    path = tmp_path / "step.json"
    with held(FakeNvml(), json_out=str(path))[0] as lock:
        step.run(OPTIONS, [FAILING], json_out=str(path), log=lambda _: None, locked_clocks=lock)
    killed = read_run(path)  # as a run killed with kill -9 leaves it: still locked
    environment = killed.environment.model_copy(
        update={"locked_clocks": lock.model_copy(update={"restored": False})}
    )
    write_run(path, killed.model_copy(update={"environment": environment}))
    before = path.read_bytes()
    steps = Options(**{**OPTIONS.__dict__, "steps": 3})
    with pytest.raises(UsageError, match="steps differs: 1 in the record, 3 in this run"):
        with held(FakeNvml(), json_out=str(path))[0] as lock:
            step.run(steps, [FAILING], json_out=str(path), resume=True, locked_clocks=lock)
    assert path.read_bytes() == before  # the earlier run's lock is not this run's to restore


# --- SIGTERM and SIGINT, in a real process ---------------------------------------------

# The step tool's way out of a stop signal (common.errors.faults, sweep.run.stopping) around
# the lock, in a process of its own; only NVML is the fake, its calls kept in a file.
STOPPED_RUN = """
import sys, time
from pathlib import Path
sys.path.insert(0, {tests!r})
from infra.fake_nvml import FakeNvml, opener
from dew.bench.common.errors import faults
from dew.bench.record.schema import read_run, write_run
from dew.bench.sweep import locked_clocks
from dew.bench.sweep import run as step
from dew.bench.sweep.presets import Case
from dew.bench.sweep.settings import Options
from dew.bench.sweep.run import stopping

nv = FakeNvml(cards=2, log=Path({calls!r}))
log = lambda line: print(line, file=sys.stderr, flush=True)

def body():
    with locked_clocks.held("max", "gpu", json_out={record!r}, log=log,
                            open_session=opener(nv)) as lock:
        published = read_run({published!r})
        environment = published.environment.model_copy(update={{"locked_clocks": lock}})
        write_run({record!r}, published.model_copy(update={{"environment": environment}}))
        with stopping(lambda name: "interrupted: 0 of 1 cases finished"):
            print("locked", flush=True)
            time.sleep(120)
    return 0

sys.exit(faults("tools/benchmark_step.py", body))
"""


@pytest.mark.parametrize(
    "signum, exit_code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["SIGTERM", "SIGINT"]
)
def test_a_stop_signal_resets_every_lock_and_the_record_says_restored(tmp_path, signum, exit_code):
    calls, record = tmp_path / "calls.jsonl", tmp_path / "step.json"
    code = STOPPED_RUN.format(
        tests=str(TESTS), calls=str(calls), record=str(record), published=str(PUBLISHED)
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout.readline().strip() == "locked"
        assert read_run(record).environment.locked_clocks.restored is False
        child.send_signal(signum)
        _, stderr = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == exit_code, stderr
    assert stderr.strip().splitlines()[-1] == (
        "tools/benchmark_step.py: error: interrupted: 0 of 1 cases finished"
    )
    made = [tuple(json.loads(line)) for line in calls.read_text().splitlines()]
    assert set_and_reset(made) == [
        ("nvmlDeviceSetGpuLockedClocks", 0, 1980, 1980),
        ("nvmlDeviceSetMemoryLockedClocks", 0, 3201, 3201),
        ("nvmlDeviceSetGpuLockedClocks", 1, 1980, 1980),
        ("nvmlDeviceSetMemoryLockedClocks", 1, 3201, 3201),
        ("nvmlDeviceResetMemoryLockedClocks", 1),
        ("nvmlDeviceResetGpuLockedClocks", 1),
        ("nvmlDeviceResetMemoryLockedClocks", 0),
        ("nvmlDeviceResetGpuLockedClocks", 0),
    ]
    assert "clocks restored: card 0, card 1" in stderr
    assert read_run(record).environment.locked_clocks.restored is True
