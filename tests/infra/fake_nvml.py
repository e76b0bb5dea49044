"""NVML at the boundary, for the clock locks (dew.telemetry.clocks) on a machine without a
GPU: `FakeNvml` stands where nvidia-ml-py's module (`nv`) would, answers the reads with
what an H200 answered (nvmlDeviceGetMaxClockInfo: SM 1980 MHz, memory 3201 MHz; the
one memory clock an HBM card lists; tests/telemetry/test_nvml.py's H200), raises
pynvml's own errors where told to (NVMLError_NoPermission, as for a user who is not root),
and keeps every call that sets or resets a clock, in order (and in a file, for a test
whose run is another process). `opener` is the session dew.telemetry.nvml.session would
open: the fake's cards, nvmlInit and nvmlShutdown recorded too.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pynvml

from dew.telemetry import nvml

H200_MAX = {pynvml.NVML_CLOCK_SM: 1980, pynvml.NVML_CLOCK_MEM: 3201}
H200_MEMORY_CLOCKS = [3201]
IDLE = {pynvml.NVML_CLOCK_SM: 345, pynvml.NVML_CLOCK_MEM: 3201}
# Not a recorded reading: what the fake says the SM clock reads under a lock to the TDP
# limit, so that the read-back has a value to carry.
TDP_READ_MHZ = 1590
NO_PERMISSION = pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)
NOT_SUPPORTED = pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
SETTERS = (
    "nvmlDeviceSetGpuLockedClocks",
    "nvmlDeviceSetMemoryLockedClocks",
    "nvmlDeviceResetGpuLockedClocks",
    "nvmlDeviceResetMemoryLockedClocks",
)


class FakeNvml:
    """`cards` H200s, handles 0..cards-1. `fail[(function, card)]` is raised by that call."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM = pynvml.NVML_CLOCK_SM, pynvml.NVML_CLOCK_MEM
    NVML_CLOCK_LIMIT_ID_TDP = pynvml.NVML_CLOCK_LIMIT_ID_TDP
    NVML_ERROR_NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
    NVML_ERROR_NO_PERMISSION = pynvml.NVML_ERROR_NO_PERMISSION

    def __init__(self, cards: int = 1, fail: dict | None = None, log: Path | None = None):
        self.cards, self.fail, self.log = cards, dict(fail or {}), log
        self.calls: list[tuple] = []
        self.locked: dict[tuple[int, int], int] = {}  # (card, clock type) -> MHz or TDP id

    def _call(self, name: str, handle: int, *args) -> None:
        self.calls.append((name, handle, *args))
        if self.log is not None:
            with self.log.open("a") as file:
                file.write(json.dumps([name, handle, *args]) + "\n")
        error = self.fail.get((name, handle))
        if error is not None:
            raise error

    # --- what nvidia-ml-py's functions answer (NVML's names) --------------------------------

    def nvmlDeviceGetUUID(self, handle):  # noqa: N802
        return f"GPU-h200-{handle}"

    def nvmlDeviceGetMaxClockInfo(self, handle, clock):  # noqa: N802
        return H200_MAX[clock]

    def nvmlDeviceGetSupportedMemoryClocks(self, handle):  # noqa: N802
        return list(H200_MEMORY_CLOCKS)

    def nvmlDeviceGetClockInfo(self, handle, clock):  # noqa: N802
        value = self.locked.get((handle, clock), IDLE[clock])
        return TDP_READ_MHZ if value == self.NVML_CLOCK_LIMIT_ID_TDP else value

    def nvmlDeviceSetGpuLockedClocks(self, handle, low, high):  # noqa: N802
        self._call("nvmlDeviceSetGpuLockedClocks", handle, low, high)
        self.locked[handle, self.NVML_CLOCK_SM] = high

    def nvmlDeviceSetMemoryLockedClocks(self, handle, low, high):  # noqa: N802
        self._call("nvmlDeviceSetMemoryLockedClocks", handle, low, high)
        self.locked[handle, self.NVML_CLOCK_MEM] = high

    def nvmlDeviceResetGpuLockedClocks(self, handle):  # noqa: N802
        self._call("nvmlDeviceResetGpuLockedClocks", handle)
        self.locked.pop((handle, self.NVML_CLOCK_SM), None)

    def nvmlDeviceResetMemoryLockedClocks(self, handle):  # noqa: N802
        self._call("nvmlDeviceResetMemoryLockedClocks", handle)
        self.locked.pop((handle, self.NVML_CLOCK_MEM), None)


def opener(nv: FakeNvml) -> Callable[[], contextlib.AbstractContextManager[nvml.Nvml]]:
    """What dew.telemetry.nvml.session opens, on the fake's cards."""

    @contextlib.contextmanager
    def session() -> Iterator[nvml.Nvml]:
        nv.calls.append(("nvmlInit",))
        try:
            yield nvml.Nvml(nv, tuple(range(nv.cards)))
        finally:
            nv.calls.append(("nvmlShutdown",))

    return session


def set_and_reset(calls: list) -> list[tuple]:
    """The calls that change a card's clocks, in order."""
    return [call for call in calls if call[0] in SETTERS]
