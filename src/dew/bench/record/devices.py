"""A device's identity, read by the process that holds it.

One reader for every platform: jax's devices (platform, device_kind, count, coordinates),
the memory of one device (NVML's total on an NVIDIA card, memory_stats' bytes_limit on a
TPU), and the backend as that process sees it after importing jax (platform_version,
libtpu's version, the XLA_/LIBTPU_/TPU_ variables, transparent hugepages). A step run's
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

from dew.bench.common.units import GIB
from dew.bench.record.schema import Backend, Devices
from dew.telemetry import nvml

BACKEND_PREFIXES = ("XLA_", "LIBTPU_", "TPU_")
HUGEPAGES = Path("/sys/kernel/mm/transparent_hugepage/enabled")
# A TPU's device_kind -> the chip's name in a topology ("v5e:2x4"), as
# jax.experimental.topologies spells it; 2-D slices for the lite chips, 3-D for the others.
TPU_CHIPS = {"TPU v4": ("v4", 3), "TPU v5 lite": ("v5e", 2), "TPU v5": ("v5p", 3),
             "TPU v5p": ("v5p", 3), "TPU v6 lite": ("v6e", 2)}  # fmt: skip


def read(devices: Sequence[Any], environ: Mapping[str, str] | None = None, gpus=None) -> Devices:
    """The identity of `devices` (jax devices this process holds), read here. `gpus`: an
    open dew.telemetry.nvml session (default: one of its own where a card is read)."""
    environ = os.environ if environ is None else environ
    first = devices[0]
    coords = [list(d.coords) for d in devices if getattr(d, "coords", None) is not None]
    return Devices(
        platform=first.platform,
        kind=first.device_kind,
        count=len(devices),
        memory_gib=_memory_gib(first, environ, gpus),
        read_by="the process that held them",
        coords=coords or None,
        topology=topology_name(first.device_kind, coords) if first.platform == "tpu" else None,
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


def topology_name(kind: str, coords: Sequence[Sequence[int]]) -> str | None:
    """The slice `coords` span on a TPU of `kind`: "v5e:1x1" for one v5e chip; None for a
    kind this table does not know or devices without coordinates."""
    chip = TPU_CHIPS.get(kind)
    if chip is None or not coords:
        return None
    name, axes = chip
    extent = [
        max(c[axis] for c in coords) - min(c[axis] for c in coords) + 1 for axis in range(axes)
    ]
    return f"{name}:{'x'.join(str(n) for n in extent)}"


def guessed(environ: Mapping[str, str], gpus) -> Devices:
    """What a process that holds no device can say: the cards the open NVML session `gpus`
    sees (memory their total), else the CPU backend with as many devices as XLA_FLAGS asks
    for. read_by null: a guess."""
    card = _first_visible(gpus, environ)
    if card is not None:
        memory = nvml.reading(lambda: gpus.nv.nvmlDeviceGetMemoryInfo(card).total)
        return Devices(
            platform="gpu",
            kind=nvml.reading(lambda: nvml.text(gpus.nv.nvmlDeviceGetName(card))),
            count=len(gpus.visible(environ.get("CUDA_VISIBLE_DEVICES"))[0]),
            memory_gib=round(memory / GIB, 2) if memory else None,
        )
    match = re.search(r"--xla_force_host_platform_device_count=(\d+)", environ.get("XLA_FLAGS", ""))
    count = int(match.group(1)) if match else 1
    return Devices(platform="cpu", kind="cpu", count=count, memory_gib=None)


def _first_visible(gpus, environ: Mapping[str, str]) -> Any:
    """The first card CUDA_VISIBLE_DEVICES shows this process (its NVML handle), or None."""
    visible = gpus.visible(environ.get("CUDA_VISIBLE_DEVICES"))[0] if gpus else []
    return gpus.handles[visible[0]] if visible else None


def _memory_gib(device: Any, environ: Mapping[str, str], gpus) -> float | None:
    """One device's memory: NVML's total on an NVIDIA card (jax's memory_stats gives the
    allocator's budget there, not the card), memory_stats' bytes_limit on a TPU."""
    if device.platform in ("gpu", "cuda"):
        if gpus is None:
            with nvml.session() as own:
                return _memory_gib(device, environ, own)
        card = _first_visible(gpus, environ)
        if card is None:
            return None
        memory = nvml.reading(lambda: gpus.nv.nvmlDeviceGetMemoryInfo(card).total)
        return round(memory / GIB, 2) if memory else None
    if device.platform == "tpu":
        try:
            stats = device.memory_stats() or {}
        except Exception:  # a backend that raises instead of returning None
            stats = {}
        limit = stats.get("bytes_limit")
        return round(limit / GIB, 2) if limit else None
    return None


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
