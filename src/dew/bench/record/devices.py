"""A device's identity, read by the process that holds it.

One reader for every platform: jax's devices (the platform that claims them, device_kind,
count, coordinates), the memory of one device and the topology they form as their platform
reads them (dew.platforms: NVML's total on an NVIDIA card, memory_stats' bytes_limit on a
TPU; nothing on a platform dew does not know), and the backend as that process sees it
after importing jax (platform_version, libtpu's version, the XLA_/LIBTPU_/TPU_ variables,
transparent hugepages). A step run's
parent never opens a backend, so it cannot know them itself: its device probe
(dew.bench.sweep.preflight), a process that opens the backend the cases will use, reads
them here and hands them over.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dew import platforms
from dew.bench.common.units import GIB
from dew.bench.record.schema import Backend, Devices
from dew.telemetry import nvml

BACKEND_PREFIXES = ("XLA_", "LIBTPU_", "TPU_")
HUGEPAGES = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def read(devices: Sequence[Any], environ: Mapping[str, str] | None = None, gpus=None) -> Devices:
    """The identity of `devices` (jax devices this process holds), read here. `gpus`: an
    open dew.telemetry.nvml session (default: one of its own where a card is read)."""
    environ = os.environ if environ is None else environ
    first = devices[0]
    platform = platforms.of_devices(devices)
    coords = [list(d.coords) for d in devices if getattr(d, "coords", None) is not None]
    memory = platforms.resolve(platform.memory) if platform.memory else None
    return Devices(
        platform=platform.name,
        kind=first.device_kind,
        count=len(devices),
        memory_gib=memory(first, environ, gpus) if memory else None,
        read_by="the process that held them",
        coords=coords or None,
        topology=platform.topology(first.device_kind, coords) if platform.topology else None,
    )


def backend(devices: Sequence[Any], environ: Mapping[str, str] | None = None) -> Backend:
    """The backend of `devices` as this process sees it, after importing jax."""
    environ = os.environ if environ is None else environ
    first = devices[0]
    version = getattr(getattr(first, "client", None), "platform_version", None)
    flags = {k: v for k, v in environ.items() if k.startswith(BACKEND_PREFIXES)}
    from dew.bench.record.schema.base import is_recordable_env_flag

    return Backend(
        platform_version=str(version) if version is not None else None,
        libtpu=package_version("libtpu") or package_version("libtpu-nightly"),
        env_after_import={k: v for k, v in sorted(flags.items()) if is_recordable_env_flag(k)},
        transparent_hugepages=_hugepages(),
    )


def guessed(environ: Mapping[str, str], gpus) -> Devices:
    """What a process that holds no device can say: the first platform's guess, the last
    registered first (dew.platforms: `guess`), that finds any. read_by null: a guess."""
    for platform in reversed(platforms.every()):
        found = (
            platforms.resolve(platform.guess)(platform, environ, gpus) if platform.guess else None
        )
        if found is not None:
            return found
    return host_guess(platforms.get(None), environ, gpus)


def nvml_guess(platform, environ: Mapping[str, str], gpus) -> Devices | None:
    """The cards the open NVML session `gpus` sees (memory their total), or None."""
    card = _first_visible(gpus, environ)
    if card is None:
        return None
    memory = nvml.reading(lambda: gpus.nv.nvmlDeviceGetMemoryInfo(card).total)
    return Devices(
        platform=platform.name,
        kind=nvml.reading(lambda: nvml.text(gpus.nv.nvmlDeviceGetName(card))),
        count=len(gpus.visible(environ.get("CUDA_VISIBLE_DEVICES"))[0]),
        memory_gib=round(memory / GIB, 2) if memory else None,
    )


def host_guess(platform, environ: Mapping[str, str], gpus) -> Devices:
    """The host's own backend with as many devices as XLA_FLAGS asks for."""
    match = re.search(r"--xla_force_host_platform_device_count=(\d+)", environ.get("XLA_FLAGS", ""))
    count = int(match.group(1)) if match else 1
    return Devices(platform=platform.name, kind=platform.name, count=count, memory_gib=None)


def _first_visible(gpus, environ: Mapping[str, str]) -> Any:
    """The first card CUDA_VISIBLE_DEVICES shows this process (its NVML handle), or None."""
    visible = gpus.visible(environ.get("CUDA_VISIBLE_DEVICES"))[0] if gpus else []
    return gpus.handles[visible[0]] if visible else None


def nvml_memory_gib(device: Any, environ: Mapping[str, str], gpus) -> float | None:
    """An NVIDIA card's memory: NVML's total (jax's memory_stats gives the allocator's
    budget there, not the card); `gpus` an open NVML session, else one of its own."""
    if gpus is None:
        with nvml.session() as own:
            return nvml_memory_gib(device, environ, own)
    card = _first_visible(gpus, environ)
    if card is None:
        return None
    memory = nvml.reading(lambda: gpus.nv.nvmlDeviceGetMemoryInfo(card).total)
    return round(memory / GIB, 2) if memory else None


def package_version(name: str) -> str | None:
    """An installed distribution's version, or None."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _hugepages() -> str:
    try:
        return HUGEPAGES.read_text().strip()
    except OSError as error:
        return f"unknown: {error.strerror or error} ({HUGEPAGES})"
