"""The idle-host check against real processes: a CPU burner and a sleeper; and its GPU
readings with NVML replaying a busy card.

The machine running the tests may be shared, so "quiet" is judged on watched processes
(a sleeping child) rather than the whole host; "busy" holds host-wide, because a burner
makes any host busy, however loaded it already is.
"""

import subprocess
import sys

import pytest

from dew.bench.record.schema import IdleCheck
from dew.bench.runtime import idle

BURN = "import sys; print('ready', flush=True)\nwhile True: pass"
SLEEP = "import sys, time; print('ready', flush=True); time.sleep(120)"


def _child(code):
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"  # past interpreter start-up
    return proc


@pytest.fixture
def burner():
    proc = _child(BURN)
    yield proc
    proc.kill()
    proc.wait()
    proc.stdout.close()


@pytest.fixture
def sleeper():
    proc = _child(SLEEP)
    yield proc
    proc.kill()
    proc.wait()
    proc.stdout.close()


def test_cpu_burner_makes_the_host_busy(burner):
    check = idle.sample(window_s=1.0, top=1000)
    assert check.idle is False
    reading = next(r for r in check.busiest if r.pid == burner.pid)
    assert reading.cpu_percent >= idle.Thresholds().process_cpu_percent
    assert any(f"pid {burner.pid} " in reason for reason in check.reasons)
    assert check.others_cpu_percent >= reading.cpu_percent
    assert check.logical_cores >= 1 and check.load_avg_1m is not None


def test_quiet_process_is_idle_and_burner_is_not(sleeper, burner):
    quiet = idle.sample(window_s=1.0, watch=[sleeper.pid])
    assert quiet.idle is True, quiet.reasons
    assert quiet.reasons == []
    assert [r.pid for r in quiet.busiest] == [sleeper.pid]
    assert quiet.busiest[0].cpu_percent < idle.Thresholds().process_cpu_percent

    busy = idle.sample(window_s=1.0, watch=[burner.pid])
    assert busy.idle is False
    assert busy.busiest[0].pid == burner.pid


def test_error_mode_refuses_with_one_line_and_keeps_the_readings(burner):
    with pytest.raises(idle.HostNotIdle) as caught:
        idle.guard("error", window_s=1.0, watch=[burner.pid])
    message = str(caught.value)
    assert "\n" not in message and message.startswith("error: host is not idle")
    assert f"pid {burner.pid} " in message
    assert isinstance(caught.value, SystemExit) and caught.value.code  # non-zero exit
    assert caught.value.check.idle is False and caught.value.check.mode == "error"


def test_warn_mode_measures_anyway_and_says_so(burner, capsys):
    check = idle.guard("warn", window_s=1.0, watch=[burner.pid])
    assert check.idle is False and check.mode == "warn"
    err = capsys.readouterr().err
    assert err.startswith("warning: host is not idle") and err.count("\n") == 1
    assert f"pid {burner.pid} " in err


@pytest.fixture
def busy_card(monkeypatch):
    """pynvml answering as one card 80% busy, running a compute process of another host's
    container (a pid no process here has); `calls` lists NVML's init and shutdown."""
    import pynvml

    calls = []
    process = type("Process", (), {"pid": 2**22 + 7})
    answers = {
        "nvmlInit": lambda: calls.append("init"),
        "nvmlShutdown": lambda: calls.append("shutdown"),
        "nvmlDeviceGetCount": lambda: 1,
        "nvmlDeviceGetHandleByIndex": lambda index: f"card {index}",
        "nvmlDeviceGetUtilizationRates": lambda handle: type("Rates", (), {"gpu": 80}),
        "nvmlDeviceGetMemoryInfo": lambda handle: type("Memory", (), {"used": 3 * 2**30}),
        "nvmlDeviceGetComputeRunningProcesses": lambda handle: [process],
    }
    for name, answer in answers.items():
        monkeypatch.setattr(pynvml, name, answer)
    return calls


def test_a_busy_gpu_makes_the_host_busy_and_nvml_is_shut_down(busy_card):
    check = idle.sample(window_s=0.3, watch=[])
    (card,) = check.gpus
    assert (card.index, card.util_percent, card.memory_used_gib) == (0, 80.0, 3.0)
    assert [p.pid for p in card.foreign_processes] == [2**22 + 7]
    assert check.idle is False and check.reasons == [
        "GPU 0 was 80% busy",
        f"GPU 0 runs compute process pid {2**22 + 7} (?)",
    ]
    assert busy_card == ["init", "shutdown"]


def test_cards_nvml_cannot_list_leave_no_gpu_readings_and_nvml_shut_down(busy_card, monkeypatch):
    import pynvml

    def lost():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)

    monkeypatch.setattr(pynvml, "nvmlDeviceGetCount", lost)
    check = idle.sample(window_s=0.2, watch=[])
    assert check.gpus is None and check.idle is True
    assert busy_card == ["init", "shutdown"]  # it was left open before


def test_off_mode_records_that_no_check_ran():
    check = idle.guard("off")
    assert check.mode == "off" and check.idle is None and check.window_s is None


def test_unknown_mode_names_the_valid_ones():
    with pytest.raises(ValueError, match="'strict'.*error, warn, off"):
        idle.guard("strict")


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--window", "0"], "--window 0 is not a positive number of seconds"),
        (["--window", "-2"], "--window -2 is not a positive number of seconds"),
        (["--window", "nan"], "--window nan is not a positive number of seconds"),
        (["--window", "soon"], "--window"),
        (["--mode", "off"], "'off' is not valid; valid: warn, error"),
        (["--quiet"], "unrecognized argument --quiet"),
    ],
)
def test_cli_bad_flags_are_one_line_and_exit_2(capsys, argv, expected):
    assert idle.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"{idle.PROG}: error: ") and expected in err


def test_cli_prints_the_readings_and_warn_mode_exits_0(capsys):
    assert idle.main(["--window", "0.2"]) == 0  # warn: busy or not, the exit is 0
    check = IdleCheck.model_validate_json(capsys.readouterr().out)
    assert check.mode == "warn" and check.window_s > 0
