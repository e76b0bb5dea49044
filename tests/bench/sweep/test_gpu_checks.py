"""The checks around a measurement that issue 19 added, on recorded readings and real
processes: the GPU gate (--gpu-check error|warn|off) on a window's clocks-event reasons,
the row's GPU figures, the custom calls a row's FLOP count left out (in the row and as a
warning in the table), and the loader benchmark's idle-host check."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dew.bench.analysis import tables as report
from dew.bench.loader.data_command import main as benchmark_data
from dew.bench.record.schema import GpuTelemetry, StepRow, read_run
from dew.bench.sweep import case_run
from dew.bench.sweep.presets import Case
from dew.bench.sweep.program_labels import flop_figures
from dew.telemetry.instrumentation import hlo_flops
from dew.telemetry.nvml import EnergyReading, Sample, energy_joules, summarize

CASE = Case(architecture="simple_dit", batch=16)
FIXTURES = Path(__file__).parents[2] / "telemetry" / "fixtures"
TIMED = {"ms_per_step": 7.9, "p10_ms": 7.8, "p50_ms": 7.9, "p90_ms": 8.1}


def recorded_window(*masks: int, joules: float | None = 672.0) -> dict:
    """One card's summary from readings with these clocks-event reason masks."""
    samples = [
        Sample(t=0.05 * i, sm_mhz=1980 - 60 * bool(m & 0x60), memory_mhz=3201, temperature_c=60 + i,
               power_w=690.0, reasons=m)
        for i, m in enumerate(masks)
    ]  # fmt: skip
    if joules is None:
        energy = energy_joules(EnergyReading(None, "NVMLError_NotSupported: Not Supported"),
                               EnergyReading(None, "x"), 1.05)  # fmt: skip
    else:
        energy = energy_joules(EnergyReading(0), EnergyReading(int(joules * 1e3)), 1.05)
    return summarize(samples, energy, window_s=1.05, steps=140, batch=16)


def telemetry(mode: str, *windows: dict, steps: int = 100, synced: int = 140) -> GpuTelemetry:
    indices = list(range(len(windows)))
    uuids = [f"GPU-{i}" for i in indices]
    return case_run.gpu_telemetry(
        mode, indices, uuids, list(windows), [7.9] * synced, steps, batch=16, window_s=1.05
    )


def row_after_gate(gpu: GpuTelemetry) -> StepRow:
    """What run_case makes of a measured case with these readings."""
    figures = {**TIMED, "gpu": gpu}
    refused = case_run.gpu_verdict(gpu)
    if refused:
        return case_run.make_row(CASE, figures, status="failed", error=refused)
    return case_run.make_row(CASE, figures, status="ok")


# --- the gate ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "mask, reason",
    [
        (0x8, "HwSlowdown"),
        (0x20, "SwThermalSlowdown"),
        (0x40, "HwThermalSlowdown"),
        (0x80, "HwPowerBrakeSlowdown"),
    ],
)
def test_a_slowdown_fails_the_row_under_error(mask, reason):
    row = row_after_gate(telemetry("error", recorded_window(0x4, mask | 0x4, 0x0)))
    assert row.status == "failed"
    assert f"GPU 0: {reason}" in row.error and "--gpu-check warn" in row.error
    assert "\n" not in row.error
    assert row.p50_ms == 7.9 and row.gpu.slowdowns == [f"GPU 0: {reason}"]  # figures kept


def test_power_cap_and_idle_are_normal_under_error():
    row = row_after_gate(telemetry("error", recorded_window(0x1, 0x4, 0x4, 0x0)))
    assert row.status == "ok" and row.gpu.slowdowns == []
    assert row.gpu.gpus[0].clocks_event_reasons == ["GpuIdle", "SwPowerCap"]
    assert report.row_warnings(row) == []


def test_a_slowdown_is_a_warning_in_the_table_under_warn():
    row = row_after_gate(telemetry("warn", recorded_window(0x4, 0x44, 0x4)))
    assert row.status == "ok"
    (warning,) = report.row_warnings(row)
    assert warning == "the GPU slowed itself down: GPU 0: HwThermalSlowdown"
    header, line = report.step_table([row]).strip().splitlines()
    assert header.split("\t")[-1] == "warnings" and line.split("\t")[-1] == warning
    # The merge of repeats rebuilds `warnings`; the table reads the row's gpu fields.
    again = StepRow.model_validate_json(row.model_dump_json())
    assert report.row_warnings(again) == [warning]


def test_off_judges_nothing():
    row = row_after_gate(telemetry("off", recorded_window(0x40)))
    assert row.status == "ok" and report.row_warnings(row) == []


# --- the row's GPU figures -------------------------------------------------------------------


def test_two_cards_add_up_and_a_lengthened_window_says_so():
    gpu = telemetry("warn", recorded_window(0x4), recorded_window(0x4, joules=560.0), synced=140)
    assert [card.index for card in gpu.gpus] == [0, 1]
    assert gpu.joules_per_step == pytest.approx((672.0 + 560.0) / 140)
    assert gpu.samples_per_kj == pytest.approx(16 / gpu.joules_per_step * 1e3)
    assert gpu.mean_watts == pytest.approx((672.0 + 560.0) / 1.05, abs=0.02)
    assert gpu.window_steps == 140 and gpu.p50_ms == 7.9
    assert (
        gpu.note
        == "window lengthened from 100 to 140 synced steps to span 1 s for the energy counter"
    )


def test_a_card_without_energy_leaves_the_totals_null_with_its_reason():
    gpu = telemetry("warn", recorded_window(0x4), recorded_window(0x4, joules=None))
    assert gpu.joules_per_step is None and gpu.samples_per_kj is None and gpu.mean_watts is None
    assert gpu.gpus[1].energy_note == "no energy counter: NVMLError_NotSupported: Not Supported"
    assert gpu.gpus[0].joules_per_step == pytest.approx(672.0 / 140)


@pytest.mark.parametrize(
    "mode, platform, note",
    [
        ("warn", "cpu", "no NVIDIA GPU: platform cpu"),
        ("error", "cpu", "no NVIDIA GPU: platform cpu"),
        ("off", "gpu", "GPU readings turned off (--gpu-check off)"),
    ],
)
def test_no_gpu_window_gives_null_figures_with_the_reason(mode, platform, note):
    class Device:  # a jax device as gpu_window reads it
        def __init__(self, platform):
            self.platform = platform

    options = case_run.Options(preset="cpu-smoke", gpu_check=mode)
    state, gpu = case_run.gpu_window(None, "state", options, [Device(platform)])
    assert state == "state"  # no step ran
    assert gpu.note == note and gpu.check == mode and gpu.slowdowns == []
    figures = gpu.model_dump(exclude={"note", "check", "slowdowns"})
    assert set(figures.values()) == {None}
    assert case_run.gpu_verdict(gpu) is None


def test_without_nvml_the_environment_has_no_gpus():
    from dew.bench.record.capture import capture

    assert capture().gpus is None  # no NVIDIA library here: null, not an error


# --- custom calls the FLOP count could not count -------------------------------------------------


def test_a_row_shows_the_custom_calls_it_could_not_count_with_their_number():
    count = hlo_flops((FIXTURES / "ragged_dot_and_unknown.hlo").read_text())
    row = case_run.make_row(CASE, {**flop_figures(count), **TIMED}, status="ok")
    assert row.uncounted_custom_calls == {"__gpu$xla.gpu.triton": 1}
    assert row.gflop_per_step == pytest.approx(count.total / 1e9)
    for compile_only in (False, True):
        header, line = report.step_table([row], compile_only=compile_only).strip().splitlines()
        assert header.split("\t")[-1] == "warnings"
        assert line.split("\t")[-1] == (
            "GFLOP/step counts 0 for custom calls it does not know: __gpu$xla.gpu.triton x1"
        )


def test_a_row_whose_calls_were_all_counted_has_no_warning():
    count = hlo_flops((FIXTURES / "cublas_gemm.hlo").read_text())
    row = case_run.make_row(CASE, {**flop_figures(count), **TIMED}, status="ok")
    assert row.uncounted_custom_calls == {}
    assert "warnings" not in report.step_table([row])


# --- the loader benchmark's idle check ------------------------------------------------------------

LOADER = [
    "data:synthetic-images", "--batch", "2", "--steps", "2", "--warmup", "1",
    "--data.num-records", "8", "--data.loading.workers", "0", "--data.loading.threads", "0",
]  # fmt: skip
BURN = "import sys; print('ready', flush=True)\nwhile True: pass"


@pytest.fixture
def burner():
    process = subprocess.Popen([sys.executable, "-c", BURN], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "ready"
    yield process
    process.kill()
    process.wait()
    process.stdout.close()


def test_the_loader_refuses_a_busy_host_in_one_line(burner, tmp_path, capsys):
    out = tmp_path / "data.json"
    assert benchmark_data([*LOADER, "--idle-check", "error", "--json-out", str(out)]) == 1
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    assert line.startswith(
        "tools/benchmark_data.py: error: host is not idle, refusing to measure: "
    )
    assert f"pid {burner.pid} " in line and "--idle-check warn" in line
    assert captured.out == "" and not out.exists()  # nothing measured, nothing written


def test_the_loaders_record_holds_the_idle_readings(tmp_path, capsys):
    out = tmp_path / "data.json"
    assert benchmark_data([*LOADER, "--idle-check", "off", "--json-out", str(out)]) == 0
    check = read_run(out).idle_check
    assert check.mode == "off" and check.idle is None and "turned off" in check.note


def test_a_bad_idle_check_mode_is_one_line(capsys):
    assert benchmark_data([*LOADER, "--idle-check", "sometimes"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("tools/benchmark_data.py: error: --idle-check 'sometimes' is not valid")
    assert "error, warn, off" in line


# --- the whole GPU window, on a CPU step, with NVML replaying a card ---------------------------


class CudaDevice:  # what gpu_window reads of a jax GPU device (its kind names the vendor)
    platform, device_kind, local_hardware_id, id = "gpu", "NVIDIA H200", 0, 0


@pytest.fixture
def recorded_h200(monkeypatch):
    """pynvml answering as one H200 at its power cap and hot: 650 W on the energy counter."""
    import time

    import pynvml

    began = time.perf_counter()
    answers = {
        "nvmlInit": lambda: None,
        "nvmlShutdown": lambda: None,
        "nvmlDeviceGetCount": lambda: 1,
        "nvmlDeviceGetHandleByIndex": lambda index: f"card {index}",
        "nvmlDeviceGetUUID": lambda handle: "GPU-6a1c2f00-aaaa",
        "nvmlDeviceGetClockInfo": lambda handle, clock: {pynvml.NVML_CLOCK_SM: 1830}.get(
            clock, 3201
        ),
        "nvmlDeviceGetTemperature": lambda handle, sensor: 87,
        "nvmlDeviceGetPowerUsage": lambda handle: 650_000,
        "nvmlDeviceGetCurrentClocksEventReasons": lambda handle: 0x44,
        "nvmlDeviceGetTotalEnergyConsumption": lambda handle: int(
            9_000_000 + 650_000 * (time.perf_counter() - began)
        ),
    }
    for name, answer in answers.items():
        monkeypatch.setattr(pynvml, name, answer)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


@pytest.mark.parametrize("mode", ["error", "warn"])
def test_a_short_step_gets_a_window_of_a_second_and_the_gate_reads_it(recorded_h200, mode):
    from types import SimpleNamespace

    import jax
    import jax.numpy as jnp

    @jax.jit
    def step(state, batch):
        return state + batch, {"train/loss": state.sum()}

    prepared = case_run.Prepared(CASE, SimpleNamespace(step=step), None, jnp.ones(4), {}, None)
    options = case_run.Options(preset="cpu-smoke", steps=3, gpu_check=mode)
    state, gpu = case_run.gpu_window(prepared, jnp.zeros(4), options, [CudaDevice()])
    assert float(state[0]) == gpu.window_steps  # every step of the window ran on the state
    assert gpu.window_steps > 3 and gpu.window_s >= case_run.MIN_ENERGY_WINDOW_S
    assert gpu.note.startswith(f"window lengthened from 3 to {gpu.window_steps} synced steps")
    (card,) = gpu.gpus
    assert (card.index, card.uuid) == (0, "GPU-6a1c2f00-aaaa")
    assert card.readings >= 10 and card.sm_clock_mhz_median == 1830
    assert card.temperature_c_max == 87 and card.power_w_mean == 650.0
    assert card.clocks_event_reasons == ["SwPowerCap", "HwThermalSlowdown"]
    assert card.energy_watts == pytest.approx(650.0, rel=0.05)
    assert gpu.joules_per_step == pytest.approx(card.energy_j / gpu.window_steps)
    assert gpu.slowdowns == ["GPU 0: HwThermalSlowdown"]
    row = row_after_gate(gpu)
    if mode == "error":
        assert row.status == "failed" and "GPU 0: HwThermalSlowdown" in row.error
    else:
        assert row.status == "ok" and report.row_warnings(row) == [
            "the GPU slowed itself down: GPU 0: HwThermalSlowdown"
        ]


def test_the_environment_describes_every_card(monkeypatch):
    import pynvml

    from dew.bench.record.capture import capture

    not_supported = pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def refuse(*args):
        raise not_supported

    answers = {
        "nvmlInit": lambda: None,
        "nvmlShutdown": lambda: None,
        "nvmlSystemGetDriverVersion": lambda: "580.65.06",
        "nvmlDeviceGetCount": lambda: 2,
        "nvmlDeviceGetHandleByIndex": lambda index: index,
        "nvmlDeviceGetMemoryInfo": lambda handle: type("Memory", (), {"total": 141 * 2**30}),
        "nvmlDeviceGetName": lambda handle: "NVIDIA H200",
        "nvmlDeviceGetUUID": lambda handle: f"GPU-{handle}",
        "nvmlDeviceGetVbiosVersion": lambda handle: "96.00.A5.00.01",
        "nvmlDeviceGetPersistenceMode": lambda handle: 1,
        "nvmlDeviceGetEccMode": lambda handle: [1, 1],
        "nvmlDeviceGetTotalEccErrors": lambda handle, kind, counter: 2 * handle,
        "nvmlDeviceGetEnforcedPowerLimit": lambda handle: 600_000,
        "nvmlDeviceGetPowerManagementDefaultLimit": lambda handle: 700_000,
        "nvmlDeviceGetApplicationsClock": refuse,
        "nvmlDeviceGetMaxClockInfo": lambda handle, clock: 1980,
        "nvmlDeviceGetCurrPcieLinkGeneration": lambda handle: 5,
        "nvmlDeviceGetCurrPcieLinkWidth": lambda handle: 16,
        "nvmlDeviceGetMaxPcieLinkGeneration": lambda handle: 5,
        "nvmlDeviceGetMaxPcieLinkWidth": lambda handle: 16,
        "nvmlDeviceGetMigMode": lambda handle: [0, 0],
        "nvmlDeviceGetComputeMode": lambda handle: 3,
    }
    for name, answer in answers.items():
        monkeypatch.setattr(pynvml, name, answer)
    environment = capture()
    assert environment.driver_version == "580.65.06"
    assert [card.uuid for card in environment.gpus] == ["GPU-0", "GPU-1"]
    second = environment.gpus[1]
    assert (second.index, second.name, second.ecc_volatile_uncorrected) == (1, "NVIDIA H200", 2)
    assert (second.power_limit_w, second.default_power_limit_w) == (600.0, 700.0)
    assert second.mig_mode is False and second.compute_mode == "ExclusiveProcess"
    assert second.application_sm_clock_mhz is None
    assert second.unreadable == {
        "application_sm_clock_mhz": "NVMLError_NotSupported: Not Supported",
        "application_memory_clock_mhz": "NVMLError_NotSupported: Not Supported",
    }
