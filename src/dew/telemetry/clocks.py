"""NVIDIA cards' SM and memory clocks locked for the length of a `with`, through NVML.

    locked(mode, visible, open_session)   every visible card locked; restored on the way out
    lock_card(nv, handle, index, mode)     one card: its SM clock, then its memory clock
    restore(nv, lock)                      every card's locks reset, the last locked first

What each mode asks NVML for (nvidia-ml-py's calls, nvml.h's constants):

    base    nvmlDeviceSetGpuLockedClocks(NVML_CLOCK_LIMIT_ID_TDP, NVML_CLOCK_LIMIT_ID_TDP):
            the SM clock the card sustains at its TDP, its base clock; what nvbench's
            `--lgc base` sets (nvbench/device_info.cu). NVML names no MHz for it: the clock
            read right after the lock is recorded instead.
    max     nvmlDeviceSetGpuLockedClocks(m, m), m = nvmlDeviceGetMaxClockInfo(NVML_CLOCK_SM):
            what NVIDIA's lock-gpu-clocks.py `--clock max` sets; nvbench's `--lgc max` locks
            CUDA's clock rate, the same figure.
    memory  both modes: nvmlDeviceSetMemoryLockedClocks(m, m), m = the highest clock
            nvmlDeviceGetSupportedMemoryClocks lists (an HBM card lists one). "Base" is an
            SM clock; the memory clock is only held still. A card that does not let NVML
            lock it (NotSupported) keeps it as it is, said in the card's note.

Restoring is nvmlDeviceResetGpuLockedClocks and nvmlDeviceResetMemoryLockedClocks (what
`nvidia-smi -rgc` / `-rmc` do): back to the driver's default, not to a lock someone set
before the run (NVML cannot read one back). A lock belongs to the card, not the process:
it outlives a run killed with `kill -9`, and `nvidia-smi -rgc -rmc` as root undoes it.

The NVML session is dew.telemetry.nvml's (the one module that imports pynvml); its `nv`
is passed in, so the calls are tested against recorded answers on a machine without a GPU.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

from dew.telemetry import nvml

MODES = ("base", "max", "off")
# nvml.h's values, for an nvidia-ml-py too old to name them
CLOCK_LIMIT_ID_TDP = 0xFFFFFF01
ERROR_NOT_SUPPORTED, ERROR_NO_PERMISSION = 3, 4
# The clocks move within this of the lock (NVIDIA's lock-gpu-clocks.py waits as long).
SETTLE_S = 0.1


class Refused(RuntimeError):
    """The clocks cannot be locked (no card, no permission, a card that cannot): one line,
    and `fix` when there is one beyond not locking (run as root)."""

    def __init__(self, message: str, fix: str | None = None):
        super().__init__(message)
        self.fix = fix


@dataclasses.dataclass
class LockedCard:
    """One card's locks: what was asked, and what NVML read right after."""

    index: int  # NVML's index (PCI order)
    handle: Any = dataclasses.field(repr=False)
    uuid: str | None = None
    sm_clock_mhz: int | None = None  # None under base (NVML_CLOCK_LIMIT_ID_TDP names no MHz)
    memory_clock_mhz: int | None = None  # None when the memory clock was not locked
    sm_clock_read_mhz: int | None = None
    memory_clock_read_mhz: int | None = None
    note: str | None = None

    def fields(self) -> dict[str, Any]:
        """The card as the record's LockedCard (dew.bench.record.schema.environment)."""
        # Not dataclasses.asdict: it deep-copies the NVML handle, a ctypes pointer, which
        # cannot be copied (the first run on a real card ended there).
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name != "handle"}  # fmt: skip


@dataclasses.dataclass
class Lock:
    """The cards a `locked` block holds; `restored` once every lock was reset."""

    mode: str
    cards: list[LockedCard] = dataclasses.field(default_factory=list)
    restored: bool = False
    problems: list[str] = dataclasses.field(default_factory=list)  # resets NVML refused

    def fields(self) -> dict[str, Any]:
        """The lock as the record's LockedClocks."""
        cards = [card.fields() for card in self.cards]
        return {"mode": self.mode, "cards": cards, "restored": self.restored}


@contextlib.contextmanager
def locked(
    mode: str,
    *,
    visible: str | None,
    open_session: Callable[[], contextlib.AbstractContextManager[nvml.Nvml]] = nvml.session,
) -> Iterator[Lock]:
    """Lock every card CUDA sees (`visible`: CUDA_VISIBLE_DEVICES) to `mode` (base or max),
    and reset them however the block ends: its end, an exception, or a stop signal raised
    in it (dew.bench.common.errors.Interrupted). Raises Refused, with whatever it locked
    already reset, when a card cannot be locked."""
    if mode not in ("base", "max"):
        raise ValueError(f"mode {mode!r}: lock base or max")
    with open_session() as found:
        if not found:
            raise Refused(f"no NVIDIA GPU whose clocks NVML can lock ({found.why})")
        try:
            uuids = found.uuids()
        except Exception as error:  # a card lost between nvmlInit and here
            raise Refused(f"NVML cannot name the cards ({nvml.said(error)})") from None
        indices, why = nvml.visible_indices(visible, uuids)
        if indices is None:
            fix = "lock the whole card's clocks as root before the run (nvidia-smi -lgc, -lmc)"
            raise Refused(f"{why}; its clocks are the whole card's", fix=fix)
        if not indices:
            raise Refused("CUDA_VISIBLE_DEVICES leaves no NVIDIA card to lock")
        lock = Lock(mode)
        try:
            for index in indices:
                lock_card(found.nv, found.handles[index], index, mode, into=lock.cards)
        except BaseException:
            restore(found.nv, lock)  # the cards locked before the one refused
            raise
        time.sleep(SETTLE_S)
        for card in lock.cards:
            read_back(found.nv, card)
        try:
            yield lock
        finally:
            restore(found.nv, lock)


def lock_card(nv: Any, handle: Any, index: int, mode: str, *, into: list[LockedCard]) -> None:
    """Lock one card's SM clock, then its memory clock; the card joins `into` as soon as
    its SM clock is locked, so that a refusal after it still resets it."""
    uuid = nvml.reading(lambda: nvml.text(nv.nvmlDeviceGetUUID(handle)))
    card = LockedCard(index, handle, uuid=uuid)
    if mode == "max":
        read = lambda: int(nv.nvmlDeviceGetMaxClockInfo(handle, nv.NVML_CLOCK_SM))
        card.sm_clock_mhz = _ask(nv, f"read card {index}'s max SM clock", read)
        low = high = card.sm_clock_mhz
    else:
        low = high = getattr(nv, "NVML_CLOCK_LIMIT_ID_TDP", CLOCK_LIMIT_ID_TDP)
    lock = lambda: nv.nvmlDeviceSetGpuLockedClocks(handle, low, high)
    _ask(nv, f"lock card {index}'s SM clock", lock)
    into.append(card)
    memory = highest_memory_clock(nv, handle)
    if memory is None:
        card.note = "memory clock not locked: NVML lists no memory clock for this card"
        return
    try:
        nv.nvmlDeviceSetMemoryLockedClocks(handle, memory, memory)
    except Exception as error:
        if not _is(nv, error, "NOT_SUPPORTED"):
            _refuse(nv, f"lock card {index}'s memory clock", error)
        card.note = f"memory clock not locked: the card does not support it ({nvml.said(error)})"
        return
    card.memory_clock_mhz = memory


def highest_memory_clock(nv: Any, handle: Any) -> int | None:
    """The highest memory clock the card lists as supported, else its max memory clock."""
    listed = nvml.reading(lambda: nv.nvmlDeviceGetSupportedMemoryClocks(handle))
    if listed:
        return int(max(listed))
    found = nvml.reading(lambda: nv.nvmlDeviceGetMaxClockInfo(handle, nv.NVML_CLOCK_MEM))
    return int(found) if found else None


def read_back(nv: Any, card: LockedCard) -> None:
    """The clocks NVML reads once the lock has settled (under base, the only MHz known)."""
    handle = card.handle
    card.sm_clock_read_mhz = nvml.reading(
        lambda: nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_SM)
    )
    card.memory_clock_read_mhz = nvml.reading(
        lambda: nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_MEM)
    )


def restore(nv: Any, lock: Lock) -> None:
    """Reset every lock, the last card and its memory clock first; each reset is tried
    even when one before it failed, and each failure is in `lock.problems`."""
    lock.problems = []
    for card in reversed(lock.cards):
        resets = [("SM", nv.nvmlDeviceResetGpuLockedClocks)]
        if card.memory_clock_mhz is not None:
            resets.insert(0, ("memory", nv.nvmlDeviceResetMemoryLockedClocks))
        for what, reset in resets:
            try:
                reset(card.handle)
            except Exception as error:  # GpuIsLost, NoPermission after a change of user, ...
                lock.problems.append(f"card {card.index} {what} clock: {nvml.said(error)}")
    lock.restored = not lock.problems


# --- NVML's refusals ---------------------------------------------------------------------

# nvml.h's codes, for an nvidia-ml-py too old to name them
ERROR_CODES = {"NOT_SUPPORTED": ERROR_NOT_SUPPORTED, "NO_PERMISSION": ERROR_NO_PERMISSION}


def _is(nv: Any, error: BaseException, name: str) -> bool:
    """Whether `error` is NVML_ERROR_<name> (pynvml's NVMLError carries the code)."""
    return getattr(error, "value", None) == getattr(nv, f"NVML_ERROR_{name}", ERROR_CODES[name])


def _ask(nv: Any, what: str, call: Callable[[], T]) -> T:
    try:
        return call()
    except Exception as error:
        _refuse(nv, what, error)
        raise  # not reached: _refuse raises


def _refuse(nv: Any, what: str, error: BaseException) -> None:
    """Raise Refused naming what NVML would not do, and why."""
    said = nvml.said(error)
    if _is(nv, error, "NO_PERMISSION"):
        raise Refused(f"NVML has no permission to {what} ({said})", fix="run as root") from None
    if _is(nv, error, "NOT_SUPPORTED"):
        raise Refused(f"NVML cannot {what}: the card does not support it ({said})") from None
    raise Refused(f"NVML failed to {what} ({said})") from None
