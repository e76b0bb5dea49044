"""NVIDIA GPUs through NVML (nvidia-ml-py): what each card is, and what it did in a window.

    gpu_info(nv, handle, index)       one card's settings for the record's environment
    gpu_infos(cards, indices)         ... of these cards (Nvml.visible: CUDA's cards)
    decode_reasons(mask)              a clocks-event reasons bitmask -> the reasons' names
    slowdowns(reasons)                the reasons that mean the card slowed itself down
    energy_joules(start, end, s)      joules between two readings of the energy counter
    summarize(...)                    one card's window: clocks, temperature, power, energy
    WindowSampler                     a thread reading every card of a window at ~20 Hz
    visible_indices(value, uuids)     NVML index of each CUDA device (CUDA_VISIBLE_DEVICES)
    Nvml.visible(value)               the cards CUDA sees, or every card and why
    session()                         NVML for a `with`: every card's handle, or why none
    reading(read), text(value)        one call's answer (None where NVML refuses), as text

The decoding, the energy arithmetic and the summary are pure functions of recorded
readings, so they are tested on a machine without a GPU. This is the one module of dew that
imports pynvml (never at module level) and initialises or shuts down NVML: where there is no
library, driver or device, `session()` yields a false Nvml.
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

T = TypeVar("T")  # Python 3.11 has no PEP 695 generics

# The clocks-event ("throttle") reasons, as NVML documents them (nvml.h). The values used
# are pynvml's own constants where the installed version has them (REASON_BITS).
DOCUMENTED_REASON_BITS = {
    "GpuIdle": 0x1,
    "ApplicationsClocksSetting": 0x2,
    "SwPowerCap": 0x4,
    "HwSlowdown": 0x8,
    "SyncBoost": 0x10,
    "SwThermalSlowdown": 0x20,
    "HwThermalSlowdown": 0x40,
    "HwPowerBrakeSlowdown": 0x80,
    "DisplayClockSetting": 0x100,
}
# A card holding its clocks down by itself (heat, a hardware signal, a power brake): the
# step time then measures the card's state, not the step. SwPowerCap (running at the power
# limit) and GpuIdle (between steps) are the normal life of a busy card.
SLOWDOWN_REASONS = ("HwSlowdown", "SwThermalSlowdown", "HwThermalSlowdown", "HwPowerBrakeSlowdown")
# Above this a counter that went back is a reset, not a wrap (no card draws 10 kW).
MAX_PLAUSIBLE_WATTS = 10_000.0
NO_READING = "no reading"


def _reason_bits() -> dict[str, int]:
    """The documented reasons at pynvml's values, then any other single-bit reason the
    installed pynvml names (newer drivers add some, e.g. BoardLimit)."""
    try:
        import pynvml
    except ImportError:
        return dict(DOCUMENTED_REASON_BITS)
    bits = {}
    for name, documented in DOCUMENTED_REASON_BITS.items():
        value = getattr(pynvml, f"nvmlClocksEventReason{name}", None)
        if value is None:  # nvidia-ml-py before 12.535 names them ...ThrottleReason...
            value = getattr(pynvml, f"nvmlClocksThrottleReason{name}", documented)
        bits[name] = int(value)
    for attribute in sorted(dir(pynvml)):
        for prefix in ("nvmlClocksEventReason", "nvmlClocksThrottleReason"):
            name, value = attribute.removeprefix(prefix), getattr(pynvml, attribute)
            single_bit = isinstance(value, int) and value > 0 and value & (value - 1) == 0
            if attribute.startswith(prefix) and single_bit and value not in bits.values():
                bits[name] = value
    return bits


REASON_BITS = _reason_bits()


def decode_reasons(mask: int) -> list[str]:
    """The names of the reasons set in `mask`, in bit order; an unknown bit as `0x...`."""
    names = [name for name, bit in sorted(REASON_BITS.items(), key=lambda kv: kv[1]) if mask & bit]
    known = 0
    for bit in REASON_BITS.values():
        known |= bit
    rest = mask & ~known
    bit = 1
    while rest:
        if rest & bit:
            names.append(f"0x{bit:x}")
            rest &= ~bit
        bit <<= 1
    return names


def slowdowns(reasons: Sequence[str]) -> list[str]:
    """The reasons among `reasons` that fail a row under --gpu-check error."""
    return [reason for reason in reasons if reason in SLOWDOWN_REASONS]


# --- energy -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class EnergyReading:
    """One read of nvmlDeviceGetTotalEnergyConsumption: mJ since the driver loaded."""

    millijoules: int | None
    error: str | None = None  # why there is no value (NVML's own words)


def read_energy(read: Callable[[], int]) -> EnergyReading:
    """Call NVML's counter; a GPU without one (before Volta) raises NVMLError_NotSupported."""
    try:
        return EnergyReading(int(read()))
    except Exception as error:  # NVMLError_NotSupported, _NoPermission, _GpuIsLost, ...
        return EnergyReading(None, said(error))


def energy_joules(
    start: EnergyReading,
    end: EnergyReading,
    window_s: float,
    *,
    counter_bits: int = 64,
    max_watts: float = MAX_PLAUSIBLE_WATTS,
) -> tuple[float | None, str | None]:
    """Joules between two readings, or (None, why).

    A counter that went back either wrapped (its maximum is 2**counter_bits - 1 mJ) or was
    reset (the driver reloaded, e.g. persistence mode off and the last client gone): a wrap
    gives a plausible power over the window, a reset does not, and its energy is unknown.
    """
    for reading in (start, end):
        if reading.millijoules is None:
            return None, f"no energy counter: {reading.error or NO_READING}"
    assert start.millijoules is not None and end.millijoules is not None
    if end.millijoules >= start.millijoules:
        return (end.millijoules - start.millijoules) / 1e3, None
    wrapped = (2**counter_bits - start.millijoules + end.millijoules) / 1e3
    if window_s > 0 and wrapped / window_s <= max_watts:
        return wrapped, None
    return None, (
        f"the energy counter went back from {start.millijoules} to {end.millijoules} mJ "
        "during the window (a driver reset): no energy for this window"
    )


# --- one card over a window ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Sample:
    """One reading of a card; None where NVML gave nothing."""

    t: float  # seconds since the window began
    sm_mhz: float | None = None
    memory_mhz: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    reasons: int | None = None  # the clocks-event reasons bitmask


def summarize(
    samples: Sequence[Sample],
    energy: tuple[float | None, str | None],
    window_s: float,
    steps: int,
    batch: int | None,
) -> dict[str, Any]:
    """A card's window as GpuWindow fields (dew.bench.record.schema), from recorded readings."""

    def values(name: str) -> list[float]:
        return [v for s in samples if (v := getattr(s, name)) is not None]

    sm, memory = values("sm_mhz"), values("memory_mhz")
    temperature, power = values("temperature_c"), values("power_w")
    mask = 0
    for s in samples:
        mask |= s.reasons or 0
    joules, why = energy
    per_step = joules / steps if joules is not None and steps else None
    return {
        "readings": len(samples),
        "sm_clock_mhz_min": min(sm) if sm else None,
        "sm_clock_mhz_median": statistics.median(sm) if sm else None,
        "memory_clock_mhz_min": min(memory) if memory else None,
        "memory_clock_mhz_median": statistics.median(memory) if memory else None,
        "temperature_c_max": max(temperature) if temperature else None,
        "power_w_mean": round(statistics.fmean(power), 2) if power else None,
        "clocks_event_reasons": decode_reasons(mask) if values("reasons") else None,
        "energy_j": round(joules, 3) if joules is not None else None,
        "joules_per_step": per_step,
        "samples_per_kj": batch / per_step * 1e3 if per_step and batch else None,
        "energy_watts": round(joules / window_s, 2) if joules is not None and window_s else None,
        "energy_note": why,
    }


# --- NVML itself ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Nvml:
    """What `session()` yields: NVML initialised (`nv`, the pynvml module) and every card's
    handle in NVML's (PCI) order. False when there is no NVML to read; `why` says why."""

    nv: Any = None
    handles: tuple[Any, ...] = ()
    why: str | None = None

    def __bool__(self) -> bool:
        return self.nv is not None

    def driver_version(self) -> str | None:
        return reading(lambda: text(self.nv.nvmlSystemGetDriverVersion()))

    def uuids(self) -> list[str | None]:
        """Every card's UUID, in the order of `handles`; None where NVML refuses it."""
        return [reading(lambda h=h: text(self.nv.nvmlDeviceGetUUID(h))) for h in self.handles]

    def visible(self, value: str | None) -> tuple[list[int], str | None]:
        """The NVML indices of the cards CUDA sees (`value`: CUDA_VISIBLE_DEVICES), in NVML's
        order, and None; or every card and why, where that cannot be told (a MIG instance).
        A UUID NVML refuses matches no entry."""
        indices, why = visible_indices(value, self.uuids())
        if indices is None:
            return list(range(len(self.handles))), f"{why}: every card read"
        return sorted(set(indices)), None


@contextlib.contextmanager
def session() -> Iterator[Nvml]:
    """NVML for the length of a `with`: nvmlInit on entry, nvmlShutdown on the way out however
    the block ends. No library, driver or device, or cards NVML cannot list, yield a false
    Nvml with its reason, never an error. A call in the block NVML may refuse: `reading`."""
    nv, why = _open()
    if nv is None:
        yield Nvml(why=why)
        return
    try:
        try:
            found = Nvml(nv, tuple(_handles(nv)))
        except Exception as error:  # a card lost between nvmlInit and here
            found = Nvml(why=f"NVML cannot list the cards ({said(error)})")
        yield found
    finally:
        _close(nv)


def _open() -> tuple[Any, str | None]:
    """(the pynvml module, initialised) or (None, why there is no NVIDIA GPU to read)."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as error:
        return None, f"NVML unavailable ({said(error)})"
    return pynvml, None


def _close(nv: Any) -> None:
    with contextlib.suppress(Exception):
        nv.nvmlShutdown()


def reading(read: Callable[[], T]) -> T | None:
    """An NVML call a card may refuse (NotSupported, NoPermission, GpuIsLost), or None."""
    try:
        return read()
    except Exception:
        return None


def said(error: BaseException) -> str:
    """An NVML error as the record writes it: its type, then its words."""
    return f"{type(error).__name__}: {error}"


def text(value: Any) -> str:
    """NVML's strings (bytes in older nvidia-ml-py) as str."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _handles(nv: Any) -> list[Any]:
    return [nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())]


def _call(unreadable: dict[str, str], field: str, read: Callable[[], Any]) -> Any:
    try:
        return read()
    except Exception as error:  # NotSupported on this card, NoPermission, ...
        unreadable[field] = said(error)
        return None


COMPUTE_MODES = {0: "Default", 1: "ExclusiveThread", 2: "Prohibited", 3: "ExclusiveProcess"}


def _mode(value: Any) -> bool | None:  # (current, pending) pairs and plain ints
    current = value[0] if isinstance(value, list | tuple) else value
    return None if current is None else bool(current)


# GpuInfo's fields: (the NVML call, its NVML constants' names, how to convert a value)
GPU_INFO_CALLS: dict[str, tuple[str, tuple[str, ...], Callable[[Any], Any] | None]] = {
    "name": ("nvmlDeviceGetName", (), text),
    "uuid": ("nvmlDeviceGetUUID", (), text),
    "vbios": ("nvmlDeviceGetVbiosVersion", (), text),
    "persistence_mode": ("nvmlDeviceGetPersistenceMode", (), _mode),
    "ecc_mode": ("nvmlDeviceGetEccMode", (), _mode),
    "ecc_volatile_uncorrected": (
        "nvmlDeviceGetTotalEccErrors",
        ("NVML_MEMORY_ERROR_TYPE_UNCORRECTED", "NVML_VOLATILE_ECC"),
        None,
    ),
    "power_limit_w": ("nvmlDeviceGetEnforcedPowerLimit", (), lambda mw: mw / 1e3),
    "default_power_limit_w": ("nvmlDeviceGetPowerManagementDefaultLimit", (), lambda mw: mw / 1e3),
    "mig_mode": ("nvmlDeviceGetMigMode", (), _mode),
    "compute_mode": ("nvmlDeviceGetComputeMode", (), lambda m: COMPUTE_MODES.get(m, str(m))),
    "application_sm_clock_mhz": ("nvmlDeviceGetApplicationsClock", ("NVML_CLOCK_SM",), None),
    "application_memory_clock_mhz": ("nvmlDeviceGetApplicationsClock", ("NVML_CLOCK_MEM",), None),
    "max_sm_clock_mhz": ("nvmlDeviceGetMaxClockInfo", ("NVML_CLOCK_SM",), None),
    "max_memory_clock_mhz": ("nvmlDeviceGetMaxClockInfo", ("NVML_CLOCK_MEM",), None),
    "pcie_generation": ("nvmlDeviceGetCurrPcieLinkGeneration", (), None),
    "pcie_width": ("nvmlDeviceGetCurrPcieLinkWidth", (), None),
    "pcie_max_generation": ("nvmlDeviceGetMaxPcieLinkGeneration", (), None),
    "pcie_max_width": ("nvmlDeviceGetMaxPcieLinkWidth", (), None),
}


def gpu_info(nv: Any, handle: Any, index: int) -> dict[str, Any]:
    """One card's settings as GpuInfo fields; a field NVML refuses is null, and why is in
    `unreadable` (field -> NVML's error)."""
    bad: dict[str, str] = {}
    info: dict[str, Any] = {"index": index}
    for field, (function, constants, convert) in GPU_INFO_CALLS.items():
        read = lambda f=function, c=constants: getattr(nv, f)(handle, *(getattr(nv, n) for n in c))
        value = _call(bad, field, read)
        info[field] = convert(value) if convert and value is not None else value
    info["unreadable"] = bad or None
    return info


def gpu_infos(cards: Nvml, indices: Sequence[int]) -> list[dict[str, Any]]:
    """gpu_info of the cards at these NVML indices (Nvml.visible), in that order."""
    return [gpu_info(cards.nv, cards.handles[index], index) for index in indices]


def visible_indices(value: str | None, uuids: Sequence[str | None]) -> tuple[list[int] | None, str]:
    """The NVML index of each CUDA device ordinal, from CUDA_VISIBLE_DEVICES (`value`).

    Returns (indices, "") or (None, why they cannot be mapped). CUDA stops at the first
    entry it cannot read; a MIG instance has no card-level counters of its own. Assumes
    CUDA's order is NVML's (PCI bus order; what CUDA_DEVICE_ORDER=PCI_BUS_ID guarantees).
    """
    if value is None:
        return list(range(len(uuids))), ""
    indices = []
    for entry in (part.strip() for part in value.split(",")):
        if entry.isdigit() and int(entry) < len(uuids):
            indices.append(int(entry))
        elif entry.startswith("MIG-"):
            return None, f"CUDA_VISIBLE_DEVICES names a MIG instance ({entry})"
        elif entry.startswith("GPU-"):
            found = [i for i, uuid in enumerate(uuids) if uuid and uuid.startswith(entry)]
            if len(found) != 1:
                break
            indices.append(found[0])
        else:
            break
    return indices, ""


# --- the window ----------------------------------------------------------------------------


def read_sample(nv: Any, handle: Any, t: float) -> Sample:
    """One reading of a card; a call NVML refuses leaves its figure None."""

    # nvidia-ml-py before 12.535 has the older name only
    reasons = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
    reasons = reasons or nv.nvmlDeviceGetCurrentClocksThrottleReasons
    power = reading(lambda: nv.nvmlDeviceGetPowerUsage(handle))  # mW
    return Sample(
        t=t,
        sm_mhz=reading(lambda: nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_SM)),
        memory_mhz=reading(lambda: nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_MEM)),
        temperature_c=reading(lambda: nv.nvmlDeviceGetTemperature(handle, nv.NVML_TEMPERATURE_GPU)),
        power_w=power / 1e3 if power is not None else None,
        reasons=reading(lambda: reasons(handle)),
    )


class WindowSampler:
    """Reads every card every `interval_s` in a thread, from start() to stop().

    The energy counter is read in the calling thread right at start() and stop(), so the
    energy spans exactly the steps between them. The thread only sleeps and makes NVML
    calls (ctypes lets go of the GIL during each), so the steps it runs beside are not
    held up by it; the row shows the synced step time with and without it.
    """

    def __init__(self, nv: Any, handles: Sequence[Any], interval_s: float = 0.05):
        self.nv, self.handles, self.interval_s = nv, list(handles), interval_s
        self.samples: list[list[Sample]] = [[] for _ in self.handles]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dew-nvml-sampler", daemon=True)
        self.energy_start: list[EnergyReading] = []
        self.energy_end: list[EnergyReading] = []
        self.window_s = 0.0

    def _energy(self) -> list[EnergyReading]:
        read = self.nv.nvmlDeviceGetTotalEnergyConsumption
        return [read_energy(lambda h=h: read(h)) for h in self.handles]

    def _read_all(self) -> None:
        t = time.perf_counter() - self._t0
        for readings, handle in zip(self.samples, self.handles, strict=True):
            readings.append(read_sample(self.nv, handle, t))

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._read_all()

    def start(self) -> None:
        self._t0 = time.perf_counter()
        self._read_all()
        self.energy_start = self._energy()
        self._t0 = time.perf_counter()
        self._thread.start()

    def stop(self) -> None:
        self.energy_end = self._energy()
        self.window_s = time.perf_counter() - self._t0
        self._stop.set()
        self._thread.join()
        self._read_all()

    def windows(self, steps: int, batch: int | None) -> list[dict[str, Any]]:
        """Every card's summary (GpuWindow fields, without its identity)."""
        return [
            summarize(
                samples, energy_joules(start, end, self.window_s), self.window_s, steps, batch
            )
            for samples, start, end in zip(
                self.samples, self.energy_start, self.energy_end, strict=True
            )
        ]
