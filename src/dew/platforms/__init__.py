"""Platforms as units: what dew knows of each kind of device, in one module per platform.

A `Platform` says everything dew does differently on it: which devices are its own (JAX's
platform name, the vendor), how one device's memory is read, its peak FLOP/s table, the
topology its devices form and the topologies it compiles for without them, the stack its
records ran on outside an image, the executor
that holds its device for a round, the default --compile-jobs, the noise prior and band a
comparison of its records assumes, what compare may hold its times against, and what its
rows lack. Callers ask the registry (`get` for a record's platform name, `identify` for a
device JAX reports) and read the unit's fields: nothing outside a platform's module
branches on its name.

dew's platforms are this package's `*_platform.py` modules (cpu, nvidia, tpu), imported by
name on the first lookup, each ending in `register(...)`; another package's (a test's, a
user's) is one module declared under the `dew.platforms` entry point group, imported with
them; a platform registered later claims a device before the earlier ones. Every module
is plain data at import, the standard library only (`dew.host` imports this package, and a
record of any platform is read on any host), and imports what reads its devices (jax,
psutil, NVML through dew.telemetry) inside the functions that read them, by name where it
lies in a higher layer (`resolve`): where that library is absent, only those functions
are, and JAX reports no device of the platform there.

A device no platform claims (a ROCm GPU, which JAX also calls "gpu"; Metal) is `unknown`:
named as its backend calls it ("rocm", "metal"), with no other platform's paths (no NVML,
no CUDA stack, no cuDNN attention, no GPU noise prior) and a `lacks` line its rows carry.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.metadata
import pkgutil
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

GROUP = "dew.platforms"  # the entry point group of a platform from outside dew


class Peak(NamedTuple):
    """A dense bf16 peak (TFLOP/s) and the datasheet it is from."""

    tflops: float
    source: str


class Prior(NamedTuple):
    """The weak prior of a device kind with no A/A history: the process, run and shift
    levels (standard deviations of the log figure) and where they come from."""

    process: float
    run: float
    shift: float
    source: str


def one_compile(cores: int, cases: int) -> int:
    """One compile at a time: the compiles would share (and autotune on) the device."""
    return 1


@dataclasses.dataclass(frozen=True)
class Platform:
    """One platform, as plain data; the defaults are a platform that has nothing."""

    name: str  # what a record's environment.devices.platform says
    title: str  # in a sentence: "an NVIDIA GPU"
    jax_names: tuple[str, ...]  # JAX's platform names for its devices
    aliases: tuple[str, ...] = ()  # other names a record or JAX_PLATFORMS gives it
    # The device kind or the backend's platform_version matches this (re.I); "": any.
    vendor: str = ""
    kinds: str = ""  # every device kind of this platform matches it (re.I); "": any
    peaks: Mapping[str, Peak] = dataclasses.field(default_factory=dict)
    # "module:function" (device, environ, gpus) -> GiB or None: one device's memory
    memory: str | None = None
    # "module:function" (platform, environ, gpus) -> schema Devices or None: what a process
    # that holds no device can say of this platform's (dew.bench.record.devices.guessed)
    guess: str | None = None
    # (device kind, coordinates) -> the slice's name ("v5e:1x1"), None where unknown
    topology: Callable[[str, Sequence[Sequence[int]]], str | None] | None = None
    topologies: str = ""  # the topology names it compiles for (a full match, re); "": none
    topology_form: str = ""  # those names in words, for a refusal ("" : the pattern itself)
    # "module:function" (topology name) -> the devices a compile for it targets, without
    # holding them (dew.train.executables.topology_devices)
    compile_devices: str | None = None
    stack_variant: str | None = None  # the stack its records ran on outside an image
    variants: tuple[str, ...] = ()  # every stack of it dew builds or replays (--variant)
    jax_platforms: str = ""  # the JAX_PLATFORMS value that selects it in an image
    # "module:Class": an executor that holds the device for a round (given its topology)
    executor: str | None = None
    compile_jobs: Callable[[int, int], int] = one_compile  # (host cores, cases) -> default
    parallel_compiles: bool = False  # several compiles at once were measured here
    host_cores: bool = False  # the cases run on the host's cores (host load, host probe)
    simulated_devices: bool = False  # XLA_FLAGS may give it more devices than it has
    attention: frozenset[str] = frozenset()  # fused attention beyond XLA's ("cudnn")
    nvml: bool = False  # its cards are NVIDIA's: NVML's memory, window and clocks
    tcmalloc: bool = False  # --allocator auto preloads tcmalloc
    own_kind_only: bool = False  # its times compared only with records of its own kind
    noise: Prior = Prior(0.16, 0.05, 0.13, "none given")
    band: float = 0.05  # the relevance floor of a comparison (a fraction)
    lacks: str | None = None  # what its rows lack, said in each row's note

    def claims(self, jax_platform: str, kind: str, version: str = "") -> bool:
        """Whether a device JAX reports as `jax_platform` of `kind`, on a backend of
        `version`, is this platform's."""
        if jax_platform.lower() not in self.jax_names:
            return False
        return not self.vendor or re.search(self.vendor, f"{kind} {version}", re.I) is not None

    def own(self, kind: str) -> bool:
        """Whether a device kind can be of this platform (a record contradicts itself
        otherwise)."""
        return not self.kinds or re.search(self.kinds, kind, re.I) is not None


_REGISTERED: dict[str, Platform] = {}
_LOADED = False


def register(platform: Platform) -> Platform:
    """Add `platform` (a later one claims a device before those registered earlier)."""
    _REGISTERED.pop(platform.name, None)
    _REGISTERED[platform.name] = platform
    return platform


@contextlib.contextmanager
def registered(*added: Platform) -> Iterator[None]:
    """`added` registered for a block (a test's), and whatever the block registers (a
    module of a platform imported in it); the registry as it was after."""
    _load()
    before = dict(_REGISTERED)
    for platform in added:
        register(platform)
    try:
        yield
    finally:
        _REGISTERED.clear()
        _REGISTERED.update(before)


def _load() -> None:
    """Import dew's platform modules and the entry points' (each registers itself)."""
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    for module in pkgutil.iter_modules(__path__):
        if module.name.endswith("_platform"):
            importlib.import_module(f"{__name__}.{module.name}")
    for entry in importlib.metadata.entry_points(group=GROUP):
        importlib.import_module(entry.value.split(":")[0])


def every() -> list[Platform]:
    """The registered platforms, in order of registration."""
    _load()
    return list(_REGISTERED.values())


def get(name: str | None) -> Platform:
    """The platform a record names (`environment.devices.platform`, or one of a
    platform's `aliases`); a name no module registers is `unknown(name)`. None (a record
    that names no devices: a loader's) is the host's own, the platform of `host_cores`."""
    _load()
    if name is None:
        host = [p for p in _REGISTERED.values() if p.host_cores]
        return host[0] if host else unknown("none")
    if name in _REGISTERED:
        return _REGISTERED[name]
    for platform in reversed(_REGISTERED.values()):
        if name in platform.aliases:
            return platform
    return unknown(name)


def identify(jax_platform: str, kind: str, version: str = "") -> Platform:
    """The platform of a device JAX reports as `jax_platform` of `kind` (its backend's
    `platform_version`: `version`): the last registered that claims it, else
    `unknown`, named as its backend calls itself."""
    for platform in reversed(every()):
        if platform.claims(jax_platform, kind, version):
            return platform
    words = re.findall(r"[a-z]+", version.lower())
    named = next((w for w in words if w not in ("pjrt", "c", "api")), None)
    name = named if jax_platform.lower() == "gpu" and named else jax_platform.lower()
    # never a registered platform's name: its records would read as that platform's
    return unknown(name if name not in _REGISTERED else f"unknown-{name}")


def of_devices(devices: Sequence[Any]) -> Platform:
    """The platform of JAX devices this process holds (the first one's)."""
    first = devices[0]
    version = getattr(getattr(first, "client", None), "platform_version", None) or ""
    return identify(first.platform, getattr(first, "device_kind", ""), str(version))


def of_topology(name: str) -> Platform:
    """The platform that compiles for the topology `name` ("v5e:1x1", "cpu"); ValueError,
    naming the forms there are, where none does."""
    for platform in reversed(every()):
        if platform.topologies and re.fullmatch(platform.topologies, name):
            return platform
    forms = "; ".join(
        f"{p.name}: {p.topology_form or p.topologies}" for p in every() if p.topologies
    )
    raise ValueError(f"topology {name!r} is no platform's ({forms})")


def of_variant(variant: str) -> Platform:
    """The platform a stack (`--variant`, a container's `variant`) runs on; `unknown` for a
    variant no platform declares."""
    return next((p for p in every() if variant in p.variants), unknown(variant))


def unknown(name: str) -> Platform:
    """A platform no module registers: nothing of another's, the widest prior and band dew
    has, and its rows say so."""
    known = [p for p in every() if p.noise.source != "none given"]
    widest = max(known, key=lambda p: p.noise.process, default=Platform("", "", ()))
    noise = widest.noise._replace(
        source=f"dew knows no platform {name}: the widest prior it has ({widest.title}'s)"
    )
    return Platform(
        name=name,
        title=f"a {name} device, a platform dew does not know",
        jax_names=(name,),
        noise=noise,
        band=max((p.band for p in known), default=0.05),
        lacks=(
            f"platform {name} is not one dew knows (dew.platforms): no peak FLOP/s (util "
            "null), no memory reading, no vendor telemetry"
        ),
    )


def resolve(path: str) -> Any:
    """The object a "module:name" path names (a platform's reader or executor)."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def peaks() -> dict[str, Peak]:
    """Every registered platform's peak table, as one (device kinds never overlap)."""
    table: dict[str, Peak] = {}
    for platform in every():
        table.update(platform.peaks)
    return table
