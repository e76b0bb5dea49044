"""Google's TPUs: libtpu runs them, one process at a time holds the chip, and the cases
compile without it (dew.bench.sweep.chip, docs/tpu.md)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dew.platforms import Peak, Platform, Prior, register

PEAKS = {
    "TPU v4": Peak(275.0, "Google Cloud TPU v4 system architecture page"),
    "TPU v5 lite": Peak(197.0, "Google Cloud TPU v5e system architecture page"),
    "TPU v5e": Peak(197.0, "Google Cloud TPU v5e system architecture page"),
    "TPU v5": Peak(459.0, "Google Cloud TPU v5p system architecture page"),
    "TPU v5p": Peak(459.0, "Google Cloud TPU v5p system architecture page"),
    "TPU v6 lite": Peak(918.0, "Google Cloud TPU v6e (Trillium) system architecture page"),
    "TPU v6e": Peak(918.0, "Google Cloud TPU v6e (Trillium) system architecture page"),
}

# A TPU's device_kind -> the chip's name in a topology ("v5e:2x4"), as
# jax.experimental.topologies spells it; 2-D slices for the lite chips, 3-D for the others.
CHIPS = {"TPU v4": ("v4", 3), "TPU v5 lite": ("v5e", 2), "TPU v5": ("v5p", 3),
         "TPU v5p": ("v5p", 3), "TPU v6 lite": ("v6e", 2)}  # fmt: skip

# What one small-preset compile for a TPU may take of the host's memory: 13 at once ran a
# 40 GiB TPU host out of memory, 8 at once did not.
COMPILE_BYTES = 5 * 1024**3


def topology_name(kind: str, coords: Sequence[Sequence[int]]) -> str | None:
    """The slice `coords` span on a TPU of `kind`: "v5e:1x1" for one v5e chip; None for a
    kind this table does not know or devices without coordinates."""
    chip = CHIPS.get(kind)
    if chip is None or not coords:
        return None
    name, axes = chip
    extent = [
        max(c[axis] for c in coords) - min(c[axis] for c in coords) + 1 for axis in range(axes)
    ]
    return f"{name}:{'x'.join(str(n) for n in extent)}"


def compile_devices(name: str) -> list[Any]:
    """The devices of a one-host TPU topology (e.g. "v5e:1x1"), to compile for without
    the chip. Needs libtpu; in a process beside the chip's holder, JAX_PLATFORMS=cpu and
    ALLOW_MULTIPLE_LIBTPU_LOAD=1 (libtpu's lockfile refuses a second process otherwise)."""
    from jax.experimental import topologies

    dims = tuple(int(n) for n in name.split(":", 1)[1].split("x"))
    description = topologies.get_topology_desc(
        platform="tpu",
        topology_name=name,
        chip_config_name="default",
        chips_per_host_bounds=(*dims, 1)[:3],
        num_slices=1,
    )
    return list(description.devices)


def memory_gib(device: Any, environ: Mapping[str, str], gpus: Any = None) -> float | None:
    """One chip's HBM: memory_stats' bytes_limit."""
    try:
        stats = device.memory_stats() or {}
    except Exception:  # a backend that raises instead of returning None
        stats = {}
    limit = stats.get("bytes_limit")
    return round(limit / 1024**3, 2) if limit else None


def compile_jobs(cores: int, cases: int) -> int:
    """Compiles without the chip, side by side: a core each, as many as the host's
    available memory holds (at least one)."""
    import psutil

    in_memory = max(1, psutil.virtual_memory().available // COMPILE_BYTES)
    return min(cores, max(cases, 1), in_memory)


TPU = register(
    Platform(
        name="tpu",
        title="a TPU",
        jax_names=("tpu",),
        kinds=r"^tpu",
        peaks=PEAKS,
        memory="dew.platforms.tpu_platform:memory_gib",
        topology=topology_name,
        # a chip generation, then the chips along each axis: "v5e:1x1", "v5e:2x4", "v4:2x2x1"
        topologies=r"[a-z0-9]+:\d+(?:x\d+){1,2}",
        topology_form="CHIP:AxB or CHIP:AxBxC, e.g. v5e:1x1",
        compile_devices="dew.platforms.tpu_platform:compile_devices",
        stack_variant="tpu-host",  # the host's own jax and libtpu beside dew's bundle
        variants=("tpu", "tpu-host"),
        jax_platforms="tpu",
        executor="dew.bench.sweep.chip.rounds:HeldChip",
        compile_jobs=compile_jobs,
        parallel_compiles=True,
        own_kind_only=True,
        noise=Prior(
            0.01,
            0.005,
            0.005,
            "none yet: half the GPU prior, a guess until a TPU's A/A records replace it",
        ),
        band=0.02,
    )
)
