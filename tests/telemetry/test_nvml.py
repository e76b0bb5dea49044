"""dew.telemetry.nvml on recorded readings: the clocks-event reasons named from their bits
(NVML's documented values), energy from a counter that wraps or resets or is missing, a
card's window summarized, the CUDA-to-NVML index map, a card's settings, the sampler's
thread, and the session (NVML opened, its cards listed, always shut down). No GPU needed:
the NVML calls are replayed from what a card answered (a recorded library, never a stand-in
for the code under test)."""

from __future__ import annotations

import time

import pynvml
import pytest

from dew.bench.record.schema import GpuInfo, GpuWindow
from dew.telemetry import nvml
from dew.telemetry.nvml import EnergyReading, Sample

# nvml.h: nvmlClocksEventReason* (the numbers themselves, not pynvml's constants)
DOCUMENTED = [
    ("GpuIdle", 0x1),
    ("ApplicationsClocksSetting", 0x2),
    ("SwPowerCap", 0x4),
    ("HwSlowdown", 0x8),
    ("SyncBoost", 0x10),
    ("SwThermalSlowdown", 0x20),
    ("HwThermalSlowdown", 0x40),
    ("HwPowerBrakeSlowdown", 0x80),
    ("DisplayClockSetting", 0x100),
]
NOT_SUPPORTED = pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)  # what a pre-Volta card raises


# --- clocks-event reasons -----------------------------------------------------------------


@pytest.mark.parametrize("name, bit", DOCUMENTED, ids=[name for name, _ in DOCUMENTED])
def test_each_reason_is_named_from_its_documented_bit(name, bit):
    assert nvml.decode_reasons(bit) == [name]
    assert nvml.REASON_BITS[name] == bit  # pynvml's constant agrees with nvml.h


def test_a_mask_names_every_reason_set_in_bit_order_and_keeps_unknown_bits():
    assert nvml.decode_reasons(0) == []
    assert nvml.decode_reasons(0x40 | 0x4 | 0x1) == ["GpuIdle", "SwPowerCap", "HwThermalSlowdown"]
    assert nvml.decode_reasons(0x1000 | 0x8) == ["HwSlowdown", "0x1000"]  # never dropped


def test_only_the_cards_own_slowdowns_count_against_a_row():
    every = [name for name, _ in DOCUMENTED]
    assert nvml.slowdowns(every) == [
        "HwSlowdown",
        "SwThermalSlowdown",
        "HwThermalSlowdown",
        "HwPowerBrakeSlowdown",
    ]
    assert nvml.slowdowns(["GpuIdle", "SwPowerCap", "SyncBoost"]) == []  # a busy card's life


# --- energy --------------------------------------------------------------------------------


def test_energy_is_the_counters_difference_in_joules():
    joules, why = nvml.energy_joules(EnergyReading(7_250_000), EnergyReading(7_700_500), 1.2)
    assert (joules, why) == (450.5, None)


@pytest.mark.parametrize("bits", [64, 32])
def test_a_counter_that_wraps_still_gives_the_energy(bits):
    start, end = EnergyReading(2**bits - 100_000), EnergyReading(350_000)
    joules, why = nvml.energy_joules(start, end, 1.0, counter_bits=bits)
    assert joules == pytest.approx(450.0) and why is None


def test_a_counter_that_was_reset_gives_null_with_the_reason():
    # The driver reloaded mid-window: the counter restarted near zero.
    joules, why = nvml.energy_joules(EnergyReading(912_345_678), EnergyReading(1_200), 1.5)
    assert joules is None
    assert "went back from 912345678 to 1200 mJ" in why and "driver reset" in why


def test_a_card_without_an_energy_counter_gives_null_with_the_reason():
    def not_supported():
        raise NOT_SUPPORTED

    reading = nvml.read_energy(not_supported)
    assert reading == EnergyReading(None, "NVMLError_NotSupported: Not Supported")
    energy = nvml.energy_joules(reading, reading, 1.0)
    assert energy == (None, "no energy counter: NVMLError_NotSupported: Not Supported")
    summary = nvml.summarize(RECORDED, energy, window_s=1.05, steps=140, batch=16)
    assert summary["energy_j"] is None and summary["joules_per_step"] is None
    assert summary["samples_per_kj"] is None and summary["energy_watts"] is None
    assert summary["energy_note"] == "no energy counter: NVMLError_NotSupported: Not Supported"
    assert summary["sm_clock_mhz_median"] == 1980  # the rest of the window stands


# --- one card's window -----------------------------------------------------------------------

# An H200 over a 1.05 s window read every 50 ms (abridged): boost clocks, at its power cap
# for a while, idle between two steps once.
RECORDED = [
    Sample(t=0.00, sm_mhz=1980, memory_mhz=3201, temperature_c=41, power_w=121.0, reasons=0x1),
    Sample(t=0.05, sm_mhz=1980, memory_mhz=3201, temperature_c=44, power_w=512.5, reasons=0x0),
    Sample(t=0.10, sm_mhz=1905, memory_mhz=3201, temperature_c=47, power_w=698.0, reasons=0x4),
    Sample(t=0.15, sm_mhz=1860, memory_mhz=3201, temperature_c=49, power_w=700.0, reasons=0x4),
    Sample(t=0.20, sm_mhz=1980, memory_mhz=3201, temperature_c=48, power_w=640.5, reasons=0x0),
]


def test_a_window_gives_clocks_temperature_power_reasons_and_energy():
    energy = nvml.energy_joules(EnergyReading(1_000_000), EnergyReading(1_672_000), 1.05)
    summary = nvml.summarize(RECORDED, energy, window_s=1.05, steps=140, batch=16)
    assert summary["readings"] == 5
    assert (summary["sm_clock_mhz_min"], summary["sm_clock_mhz_median"]) == (1860, 1980)
    assert (summary["memory_clock_mhz_min"], summary["memory_clock_mhz_median"]) == (3201, 3201)
    assert summary["temperature_c_max"] == 49
    assert summary["power_w_mean"] == pytest.approx((121 + 512.5 + 698 + 700 + 640.5) / 5)
    assert summary["clocks_event_reasons"] == ["GpuIdle", "SwPowerCap"]
    assert summary["energy_j"] == 672.0
    assert summary["joules_per_step"] == pytest.approx(672.0 / 140)
    assert summary["samples_per_kj"] == pytest.approx(16 / (672.0 / 140) * 1e3)
    assert summary["energy_watts"] == pytest.approx(640.0)
    GpuWindow(index=0, uuid="GPU-1", **summary)  # the schema takes it as it is


def test_a_card_that_answers_nothing_gives_nulls_not_zeros():
    summary = nvml.summarize([Sample(t=0.0), Sample(t=0.05)], (None, "x"), 1.0, 10, 8)
    assert summary["readings"] == 2
    figures = {k: v for k, v in summary.items() if k not in ("readings", "energy_note")}
    assert set(figures.values()) == {None}


# --- which card is which -------------------------------------------------------------------

UUIDS = ["GPU-6a1c2f00-aaaa", "GPU-9f3e7d11-bbbb", "GPU-0c5b8e22-cccc"]


@pytest.mark.parametrize(
    "value, expected",
    [
        (None, [0, 1, 2]),
        ("2,0", [2, 0]),
        ("GPU-9f3e", [1]),  # a UUID prefix, as CUDA accepts it
        ("1,7,0", [1]),  # CUDA stops at the first entry it cannot use
        ("", []),
    ],
)
def test_cuda_visible_devices_maps_each_ordinal_to_its_card(value, expected):
    assert nvml.visible_indices(value, UUIDS) == (expected, "")


def test_a_mig_instance_cannot_be_mapped_to_a_card():
    indices, why = nvml.visible_indices("MIG-4f1a", UUIDS)
    assert indices is None and "MIG instance" in why


# --- a card's settings, from a recorded NVML -------------------------------------------------


class RecordedNvml:
    """What nvidia-ml-py answered on one card; a value that is an exception is raised."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC = 1, 0

    def __init__(self, answers: dict, energy=(0,)):
        self.answers, self.energy = answers, iter(energy)

    def __getattr__(self, name):
        answer = self.answers[name]

        def call(*args):
            value = answer(*args) if callable(answer) else answer
            if isinstance(value, Exception):
                raise value
            return value

        return call

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):  # noqa: N802 (NVML's name)
        return next(self.energy)


H200 = {
    "nvmlDeviceGetName": b"NVIDIA H200",
    "nvmlDeviceGetUUID": "GPU-6a1c2f00-aaaa",
    "nvmlDeviceGetVbiosVersion": "96.00.A5.00.01",
    "nvmlDeviceGetPersistenceMode": 1,
    "nvmlDeviceGetEccMode": [1, 1],
    "nvmlDeviceGetTotalEccErrors": 0,
    "nvmlDeviceGetEnforcedPowerLimit": 700_000,
    "nvmlDeviceGetPowerManagementDefaultLimit": 700_000,
    "nvmlDeviceGetApplicationsClock": lambda handle, clock: {1: 1980, 2: 3201}[clock],
    "nvmlDeviceGetMaxClockInfo": lambda handle, clock: {1: 1980, 2: 3201}[clock],
    "nvmlDeviceGetCurrPcieLinkGeneration": 5,
    "nvmlDeviceGetCurrPcieLinkWidth": 16,
    "nvmlDeviceGetMaxPcieLinkGeneration": 5,
    "nvmlDeviceGetMaxPcieLinkWidth": 16,
    "nvmlDeviceGetMigMode": NOT_SUPPORTED,  # as on a card without MIG
    "nvmlDeviceGetComputeMode": 0,
}


def test_a_cards_settings_and_the_fields_nvml_refused():
    info = nvml.gpu_info(RecordedNvml(H200), handle=object(), index=0)
    card = GpuInfo(**info)
    assert (card.name, card.uuid, card.vbios) == (
        "NVIDIA H200",
        "GPU-6a1c2f00-aaaa",
        "96.00.A5.00.01",
    )
    assert card.persistence_mode is True and card.ecc_mode is True
    assert card.ecc_volatile_uncorrected == 0
    assert (card.power_limit_w, card.default_power_limit_w) == (700.0, 700.0)
    assert (card.application_sm_clock_mhz, card.max_memory_clock_mhz) == (1980, 3201)
    assert (card.pcie_generation, card.pcie_width) == (5, 16)
    assert card.compute_mode == "Default"
    assert card.mig_mode is None
    assert card.unreadable == {"mig_mode": "NVMLError_NotSupported: Not Supported"}


# --- the sampler's thread ---------------------------------------------------------------------


def test_the_sampler_reads_every_card_through_its_window():
    answers = {
        "nvmlDeviceGetClockInfo": lambda handle, clock: {1: 1980, 2: 3201}[clock],
        "nvmlDeviceGetTemperature": 45,
        "nvmlDeviceGetPowerUsage": 650_000,
        "nvmlDeviceGetCurrentClocksEventReasons": 0x4,
    }
    library = RecordedNvml(answers, energy=(5_000_000, 5_000_000 + 195_000))
    sampler = nvml.WindowSampler(library, ["card 0"], interval_s=0.02)
    sampler.start()
    time.sleep(0.3)
    sampler.stop()
    (window,) = sampler.windows(steps=30, batch=16)
    assert window["readings"] >= 5  # one at each end and the thread's in between
    assert sampler.window_s == pytest.approx(0.3, abs=0.2)
    assert window["clocks_event_reasons"] == ["SwPowerCap"]
    assert window["power_w_mean"] == 650.0 and window["energy_j"] == 195.0
    assert window["joules_per_step"] == pytest.approx(6.5)


# --- the session: NVML opened, its cards listed, always shut down ---------------------------


@pytest.fixture
def library(monkeypatch):
    """pynvml answering as two cards; `calls` lists the init and shutdown calls it got."""
    calls = []
    answers = {
        "nvmlInit": lambda: calls.append("init"),
        "nvmlShutdown": lambda: calls.append("shutdown"),
        "nvmlDeviceGetCount": lambda: 2,
        "nvmlDeviceGetHandleByIndex": lambda index: f"card {index}",
        "nvmlSystemGetDriverVersion": lambda: b"580.65.06",
    }
    for name, answer in answers.items():
        monkeypatch.setattr(pynvml, name, answer)
    return calls


def test_a_session_lists_every_card_and_shuts_nvml_down(library):
    with nvml.session() as gpus:
        assert gpus and gpus.why is None and gpus.nv is pynvml
        assert gpus.handles == ("card 0", "card 1")
        assert gpus.driver_version() == "580.65.06"
        assert library == ["init"]
    assert library == ["init", "shutdown"]


def test_a_session_shuts_nvml_down_when_its_block_fails(library):
    with pytest.raises(RuntimeError, match="a step failed"), nvml.session():
        raise RuntimeError("a step failed")
    assert library == ["init", "shutdown"]


def test_no_nvml_library_is_a_false_session_with_its_reason(monkeypatch):
    def missing():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", missing)
    with nvml.session() as gpus:
        assert not gpus and gpus.handles == () and gpus.nv is None
        why = "NVMLError_LibraryNotFound: NVML Shared Library Not Found"
        assert gpus.why == f"NVML unavailable ({why})"


def test_cards_nvml_cannot_list_are_a_false_session_and_nvml_is_still_shut_down(
    library, monkeypatch
):
    def lost():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)

    monkeypatch.setattr(pynvml, "nvmlDeviceGetCount", lost)
    with nvml.session() as gpus:
        assert not gpus and gpus.handles == ()
        assert gpus.why == "NVML cannot list the cards (NVMLError_GpuIsLost: GPU is lost)"
    assert library == ["init", "shutdown"]


def test_a_reading_nvml_refuses_is_none():
    card = RecordedNvml({"nvmlDeviceGetPowerUsage": NOT_SUPPORTED, "nvmlDeviceGetTemperature": 45})
    assert nvml.reading(lambda: card.nvmlDeviceGetTemperature("card 0", 0)) == 45
    assert nvml.reading(lambda: card.nvmlDeviceGetPowerUsage("card 0")) is None
