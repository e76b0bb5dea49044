"""Where and on what a run ran (host, devices, container, code, packages, flags, GPUs, the
scheduler) and the idle-host readings taken before measuring."""

from __future__ import annotations

from typing import Annotated, Literal

import pydantic
from pydantic import Field

from dew.bench.record.schema.base import (
    ENV_FLAG_PREFIXES,
    JsonScalar,
    NonNegFloat,
    NonNegInt,
    Record,
    is_recordable_env_flag,
)

# --- environment -------------------------------------------------------------------------


class Host(Record):
    cpu_model: str | None
    logical_cores: NonNegInt | None
    physical_cores: NonNegInt | None
    memory_gib: NonNegFloat | None
    os: str | None = Field(description="operating system and release, e.g. 'Debian GNU/Linux 13'")
    kernel: str | None
    hostname: str | None = None


class Devices(Record):
    platform: str | None = Field(description="jax platform: cpu, gpu (cuda/rocm) or tpu")
    kind: str | None = Field(description="device kind, e.g. 'NVIDIA GeForce RTX 4080'")
    count: NonNegInt | None
    memory_gib: NonNegFloat | None = Field(
        description="memory of one device: NVML's total on a GPU, memory_stats' bytes_limit "
        "on a TPU"
    )
    read_by: Literal["the process that held them"] | None = Field(
        default=None,
        description="who read these: a process that held the devices (a step run's device "
        "probe, or its own process); null: a guess by a process that held none (NVML's "
        "cards, else the CPU), or a record from before the field",
    )
    coords: list[list[int]] | None = Field(
        default=None, description="each device's coordinates in its slice (TPU)"
    )
    topology: str | None = Field(
        default=None, description="the TPU slice the devices form, e.g. 'v5e:1x1'"
    )


class Backend(Record):
    """The JAX backend as the process that held the device saw it, after importing jax."""

    platform_version: str | None = Field(description="the PJRT client's platform_version")
    libtpu: str | None = Field(default=None, description="libtpu's version (TPU)")
    env_after_import: dict[str, str] | None = Field(
        default=None,
        description="XLA_*, LIBTPU_* and TPU_* variables as they stand after jax is imported "
        "(jax sets some itself, e.g. LIBTPU_INIT_ARGS)",
    )
    transparent_hugepages: str | None = Field(
        default=None,
        description="/sys/kernel/mm/transparent_hugepage/enabled, or why it could not be read",
    )

    @pydantic.field_validator("env_after_import")
    @classmethod
    def _only_allowlisted(cls, flags: dict[str, str] | None) -> dict[str, str] | None:
        return recordable_flags(flags)


class Container(Record):
    """The stack the run's image was built from, named fully enough to build it again
    (dew.host.stack_images): the commit (Code), the lock, the Dockerfile and the base."""

    engine: str | None = Field(description="docker or podman, with its version")
    image_id: str | None
    base_image_digest: str | None
    lock_sha256: str | None = Field(description="sha256 of the hash lock the image was built from")
    variant: str | None = Field(default=None, description="the lock: locks/<variant>.txt")
    tag: str | None = Field(default=None, description="the image's tag")
    dockerfile_sha256: str | None = Field(default=None, description="sha256 of docker/Dockerfile")
    base_image: str | None = Field(default=None, description="the base as named to the build")
    base_suite: str | None = Field(default=None, description="the base's Debian/Ubuntu suite")
    base_snapshot: str | None = Field(
        default=None, description="when the archive the base's packages came from was published"
    )
    base_packages: list[str] | None = Field(
        default=None, description="name=version of every package in the base"
    )
    base_rebuild: str | None = Field(
        default=None, description="how to rebuild the base, or why it cannot be rebuilt"
    )


class Code(Record):
    commit: str | None
    dirty: bool | None
    source: Literal["git", "label", "stated"] | None = Field(
        default=None,
        description="git: read from the checkout; label: from a build label or variable; "
        "stated: copied from a published text",
    )
    diff_sha256: str | None = Field(
        default=None, description="sha256 of `git diff HEAD --binary` when dirty"
    )


class OutsideCode(Record):
    """A package outside dew whose architecture or step a run used (docs/own-models.md)."""

    distribution: str | None = Field(
        description="its distribution (PEP 503 name, as in `packages`); null: a module no "
        "installed distribution holds (a source tree on PYTHONPATH)"
    )
    version: str | None
    module: str = Field(description="the module the run imported it from")
    used_by: list[str] = Field(
        default_factory=list, description="the cases' architectures (or MODULE:FACTORY steps)"
    )
    commit: str | None = Field(
        default=None, description="HEAD of the git work tree its code lies in (editable or source)"
    )
    dirty: bool | None = Field(default=None, description="that work tree had uncommitted changes")
    source: Literal["git", "direct_url"] | None = Field(
        default=None,
        description="git: read from its work tree; direct_url: the commit pip installed it "
        "from (direct_url.json's vcs_info); null: an installed copy, no commit known",
    )


class ProcessInfo(Record):
    """One process of a multi-process run (room for the distributed runtime)."""

    process_index: NonNegInt
    hostname: str | None = None
    local_device_count: NonNegInt | None = None


class SlurmJob(Record):
    """The SLURM job a multi-process run was started in."""

    name: Literal["slurm"]
    job_id: str
    step_id: str | None = None
    nodelist: str | None = None


class KubernetesPod(Record):
    """The Kubernetes pod process 0 ran in: one pod of an indexed Job, the Job one of a
    JobSet's (the manifests of dew.bench.multihost.kubernetes pass these down through the
    downward API). Enough to find the run again with kubectl, as a SLURM job id is."""

    name: Literal["kubernetes"]
    pod: str = Field(description="the pod's name (metadata.name), as `kubectl logs` takes it")
    namespace: str | None = Field(default=None, description="the pod's namespace")
    job: str | None = Field(
        default=None, description="the Job the pod belongs to (its `job-name` label)"
    )
    completion_index: NonNegInt | None = Field(
        default=None,
        description="the pod's index in its indexed Job (JOB_COMPLETION_INDEX): with JAX's "
        "detection, the process id",
    )
    node: str | None = Field(default=None, description="the node the pod ran on (spec.nodeName)")
    jobset: str | None = Field(
        default=None,
        description="the JobSet the Job belongs to (its `jobset.sigs.k8s.io/jobset-name` label)",
    )


# Which scheduler started the run, told apart by `name`.
Scheduler = Annotated[SlurmJob | KubernetesPod, Field(discriminator="name")]


class GpuInfo(Record):
    """One NVIDIA card as NVML describes it (the driver is Environment.driver_version)."""

    index: NonNegInt = Field(description="NVML's index (PCI order), not CUDA's ordinal")
    name: str | None = None
    uuid: str | None = None
    vbios: str | None = None
    persistence_mode: bool | None = None
    ecc_mode: bool | None = None
    ecc_volatile_uncorrected: NonNegInt | None = Field(
        default=None, description="uncorrected ECC errors since the driver loaded"
    )
    power_limit_w: NonNegFloat | None = Field(default=None, description="enforced")
    default_power_limit_w: NonNegFloat | None = None
    application_sm_clock_mhz: NonNegInt | None = None
    application_memory_clock_mhz: NonNegInt | None = None
    max_sm_clock_mhz: NonNegInt | None = None
    max_memory_clock_mhz: NonNegInt | None = None
    pcie_generation: NonNegInt | None = Field(default=None, description="current (drops idle)")
    pcie_width: NonNegInt | None = None
    pcie_max_generation: NonNegInt | None = None
    pcie_max_width: NonNegInt | None = None
    mig_mode: bool | None = None
    compute_mode: str | None = None
    unreadable: dict[str, str] | None = Field(
        default=None, description="field -> NVML's error, for each field left null"
    )


class LockedCard(Record):
    """One card's clocks as --lock-clocks locked them (dew.telemetry.clocks)."""

    index: NonNegInt = Field(description="NVML's index (PCI order), not CUDA's ordinal")
    uuid: str | None = None
    sm_clock_mhz: NonNegInt | None = Field(
        default=None,
        description="the SM clock locked (as min and max): max's MHz; null under base, "
        "locked to the card's TDP (base) clock by NVML_CLOCK_LIMIT_ID_TDP, which names no MHz",
    )
    memory_clock_mhz: NonNegInt | None = Field(
        default=None,
        description="the memory clock locked; null where it was not (`note` says why)",
    )
    sm_clock_read_mhz: NonNegInt | None = Field(
        default=None, description="the SM clock NVML read right after the lock"
    )
    memory_clock_read_mhz: NonNegInt | None = Field(
        default=None, description="the memory clock NVML read right after the lock"
    )
    note: str | None = None


class LockedClocks(Record):
    """The clocks --lock-clocks base|max held still for the run's cases."""

    mode: Literal["base", "max"]
    cards: list[LockedCard]
    restored: bool = Field(
        description="whether the run reset the locks before it ended; false in a record "
        "last written while they held (a run killed with kill -9 leaves them locked)"
    )


class PackageSource(Record):
    """Where a distribution in `packages` was imported from."""

    source: Literal["environment", "host", "bundle"] = Field(
        description="environment: the site-packages of the venv the run's Python is (built "
        "from a lock: a nox session's, an image's); bundle: a dew bundle's install beside a "
        "host's own packages (`lock` names its lock); host: anything else, the host's own (a "
        "folder on PYTHONPATH, or its Python's site-packages outside a venv)"
    )
    location: str = Field(description="the folder on sys.path it was imported from")
    lock: str | None = Field(
        default=None, description="bundle: the lock its wheel came from and that lock's sha256"
    )


class Environment(Record):
    host: Host | None
    devices: Devices | None
    backend: Backend | None = Field(
        default=None,
        description="the backend as the measuring process saw it; null: not read (a record "
        "from before, or no process opened a device)",
    )
    driver_version: str | None
    cuda_version: str | None
    cudnn_version: str | None
    container: Container | None = Field(description="null when run on the host")
    code: Code | None
    python: str | None
    packages: dict[str, str | None] | None = Field(
        description="distribution name -> version (jax, jaxlib, the CUDA plugin, flax, ...)"
    )
    package_sources: dict[str, PackageSource] | None = Field(
        default=None,
        description="each of `packages`' distributions that is installed: where it came from; "
        "null: a record from before this was recorded",
    )
    env_flags: dict[str, str] | None = Field(
        description="every JAX_*, XLA_*, NCCL_*, CUDA_*, TF_*, TPU_*, LIBTPU_* variable set"
    )
    jax_config: dict[str, JsonScalar] | None = Field(
        description="JAX config values that change numerics or memory"
    )
    processes: list[ProcessInfo] | None = None
    scheduler: Scheduler | None = Field(
        default=None,
        description="the SLURM job or Kubernetes pod the run was started in; null: neither",
    )
    gpus: list[GpuInfo] | None = Field(default=None, description="NVIDIA cards (NVML)")
    locked_clocks: LockedClocks | None = Field(
        default=None,
        description="the cards' clocks as --lock-clocks locked them for the cases; null: "
        "not locked by the run (--lock-clocks off, or a record from before the flag)",
    )
    outside_code: list[OutsideCode] | None = Field(
        default=None,
        description="the packages outside dew whose architectures or steps the run used; "
        "null: none (or a record from before they could be)",
    )

    @pydantic.field_validator("env_flags")
    @classmethod
    def _only_allowlisted_flags(cls, flags: dict[str, str] | None) -> dict[str, str] | None:
        return recordable_flags(flags)


def recordable_flags(flags: dict[str, str] | None) -> dict[str, str] | None:
    """`flags` when every name may be recorded (is_recordable_env_flag); else ValueError."""
    for name in flags or {}:
        if not is_recordable_env_flag(name):
            raise ValueError(
                f"environment variable {name!r} may not be recorded; only names starting "
                f"with {', '.join(ENV_FLAG_PREFIXES)} that do not look like credentials"
            )
    return flags


# --- idle-host check ---------------------------------------------------------------------


class ProcessReading(Record):
    pid: NonNegInt
    name: str
    cpu_percent: NonNegFloat = Field(description="percent of one core, as psutil reports it")


class GpuReading(Record):
    index: NonNegInt
    util_percent: NonNegFloat | None
    memory_used_gib: NonNegFloat | None
    foreign_processes: list[ProcessReading] = Field(
        default_factory=list, description="compute processes on the GPU other than ours"
    )


class IdleCheck(Record):
    mode: Literal["error", "warn", "off"] | None = Field(
        description="null in a published record whose text states the host's state"
    )
    idle: bool | None = Field(description="null when the check did not run (mode off)")
    window_s: NonNegFloat | None
    cpu_percent: NonNegFloat | None = Field(description="whole host, 0-100, during the window")
    others_cpu_percent: NonNegFloat | None = Field(
        description="sum over processes other than this one and its children, in cores x 100"
    )
    logical_cores: NonNegInt | None
    load_avg_1m: NonNegFloat | None
    busiest: list[ProcessReading] = Field(default_factory=list)
    gpus: list[GpuReading] | None = None
    reasons: list[str] = Field(default_factory=list, description="why the host is not idle")
    note: str | None = None
