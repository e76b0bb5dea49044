"""What a run ran on: `capture()` fills a schema.Environment on the host or in a container.

Nothing here initialises a JAX backend: in the step benchmark the parent process captures
the environment and then starts one child per architecture, and a parent that had touched
the GPU would hold memory the children need. Devices therefore come from the caller (a
list of jax devices), from a backend that is already up, or from NVML.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import platform
import shutil
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import psutil

from dew.bench.common.files import REPO_ROOT
from dew.bench.common.units import GIB
from dew.bench.record import devices as device_identity
from dew.bench.record.outside import describe as describe_outside
from dew.bench.record.outside import distribution_name, git
from dew.bench.record.outside import versions as outside_versions
from dew.bench.record.provenance import package_sources
from dew.bench.record.schema import (
    Backend,
    Code,
    Container,
    Devices,
    Environment,
    GpuInfo,
    Host,
    KubernetesPod,
    ProcessInfo,
    Scheduler,
    SlurmJob,
    is_recordable_env_flag,
)
from dew.bench.record.stack import CUDA_PREFIXES
from dew.telemetry import nvml

# The packages whose versions decide the numbers; always listed (null when absent).
CORE_PACKAGES = (
    "jax",
    "jaxlib",
    "flax",
    "optax",
    "grain",
    "array-record",
    "numpy",
    "pydantic",
)
# JAX config values that change numerics or memory (or what gets compiled).
JAX_CONFIG_KEYS = (
    "jax_platforms",
    "jax_enable_x64",
    "jax_default_matmul_precision",
    "jax_default_prng_impl",
    "jax_threefry_partitionable",
    "jax_softmax_custom_jvp",
    "jax_numpy_dtype_promotion",
    "jax_use_shardy_partitioner",
    "jax_memory_fitting_level",
    "jax_compiler_enable_remat_pass",
    "jax_enable_pgle",
    "jax_enable_compilation_cache",
    "jax_compilation_cache_dir",
)
# Build labels a container image passes in when it has no .git.
COMMIT_VARIABLES = ("DEW_COMMIT", "GIT_COMMIT", "SOURCE_COMMIT")
DIRTY_VARIABLE = "DEW_DIRTY"
DIFF_VARIABLE = "DEW_DIFF_SHA256"
CONTAINER_VARIABLES = {
    "image_id": "DEW_IMAGE_ID",
    "base_image_digest": "DEW_BASE_IMAGE_DIGEST",
    "lock_sha256": "DEW_LOCK_SHA256",
    "variant": "DEW_VARIANT",
    "tag": "DEW_IMAGE_TAG",
    "dockerfile_sha256": "DEW_DOCKERFILE_SHA256",
    "base_image": "DEW_BASE_IMAGE",
    "base_suite": "DEW_BASE_SUITE",
    "base_snapshot": "DEW_BASE_SNAPSHOT",
    "base_packages": "DEW_BASE_PACKAGES",
    "base_rebuild": "DEW_BASE_REBUILD",
}

# What a build argument holds when the build was not told (docker/Dockerfile's default).
UNSET_LABELS = {"", "unknown"}


def _label(environ: Mapping[str, str], name: str) -> str | None:
    value = environ.get(name)
    return None if value is None or value.strip().lower() in UNSET_LABELS else value


def capture(
    *,
    devices: Sequence[Any] | None = None,
    environ: Mapping[str, str] | None = None,
    repo: str | os.PathLike | None = None,
    processes: list[ProcessInfo] | None = None,
    outside: Mapping[str, Sequence[str]] | None = None,
    identity: tuple[Devices, Backend] | None = None,
) -> Environment:
    """The environment of this process.

    devices: jax devices to describe (e.g. `jax.devices()`); by default a backend that is
    already initialised is asked, else NVML, else the CPU.
    environ: the variables to take flags and build labels from (default os.environ).
    outside: module -> the cases from outside dew it holds (dew.bench.record.outside):
    named in `outside_code`, their distributions' versions in `packages`.
    identity: the devices and backend as another process that held them read them
    (dew.bench.record.devices; a step run's device probe): this process opened no backend.
    """
    environ = os.environ if environ is None else environ
    outside_code = describe_outside(outside or {})
    packages = {**installed_packages(), **outside_versions(outside_code)}
    with nvml.session() as gpus:
        read, backend = identity or _devices(devices, environ, gpus)
        # Only the cards CUDA_VISIBLE_DEVICES shows this run (their NVML indices), where
        # that can be told: a card beside it is not what the run ran on.
        visible = gpus.visible(environ.get("CUDA_VISIBLE_DEVICES"))[0] if gpus else []
        return Environment(
            host=_host(),
            devices=read,
            backend=backend,
            driver_version=gpus.driver_version() if gpus else _smi_driver_version(),
            cuda_version=_cuda_version(),
            cudnn_version=_cudnn_version(),
            container=_container(environ),
            code=code_identity(Path(repo) if repo else REPO_ROOT, environ),
            python=platform.python_version(),
            packages=packages,
            package_sources=package_sources(packages) or None,
            env_flags=env_flags(environ),
            jax_config=_jax_config(),
            processes=processes,
            scheduler=_scheduler(environ),
            gpus=[GpuInfo(**info) for info in nvml.gpu_infos(gpus, visible)] if gpus else None,
            outside_code=outside_code or None,
        )


def _scheduler(environ: Mapping[str, str]) -> Scheduler | None:
    """The SLURM job or Kubernetes pod this process runs in: what names the run in the
    scheduler's logs (a job id; a pod, its Job and JobSet)."""
    if environ.get("SLURM_JOB_ID"):
        return SlurmJob(
            name="slurm",
            job_id=environ["SLURM_JOB_ID"],
            step_id=environ.get("SLURM_STEP_ID"),
            nodelist=environ.get("SLURM_STEP_NODELIST") or environ.get("SLURM_JOB_NODELIST"),
        )
    if environ.get("KUBERNETES_SERVICE_HOST"):  # set in every container of every pod
        return _kubernetes_pod(environ)
    return None


# What dew's manifests pass down through the downward API (dew.bench.multihost.kubernetes);
# Kubernetes itself sets only HOSTNAME and, in an indexed Job, JOB_COMPLETION_INDEX.
POD_VARIABLES = {
    "pod": "DEW_POD_NAME",
    "namespace": "DEW_POD_NAMESPACE",
    "job": "DEW_JOB_NAME",
    "node": "DEW_NODE_NAME",
    "jobset": "DEW_JOBSET_NAME",
}


def _kubernetes_pod(environ: Mapping[str, str]) -> KubernetesPod | None:
    facts = {field: environ.get(name) or None for field, name in POD_VARIABLES.items()}
    # A pod from other manifests: its hostname is the pod's name (an indexed Job's pod
    # with a subdomain: <job>-<index>, which still names it in the Job).
    facts["pod"] = facts["pod"] or environ.get("HOSTNAME") or None
    if facts["pod"] is None:
        return None
    index = environ.get("JOB_COMPLETION_INDEX", "").strip()
    return KubernetesPod(
        name="kubernetes", completion_index=int(index) if index.isdigit() else None, **facts
    )


def env_flags(environ: Mapping[str, str]) -> dict[str, str]:
    """The allowlisted variables only; anything else (tokens, keys) is never read out."""
    return {name: environ[name] for name in sorted(environ) if is_recordable_env_flag(name)}


# --- host --------------------------------------------------------------------------------


def _host() -> Host:
    try:
        os_name = platform.freedesktop_os_release().get("PRETTY_NAME")
    except OSError:
        os_name = f"{platform.system()} {platform.release()}"
    return Host(
        cpu_model=_cpu_model(),
        logical_cores=psutil.cpu_count(logical=True),
        physical_cores=psutil.cpu_count(logical=False),
        memory_gib=round(psutil.virtual_memory().total / GIB, 2),
        os=os_name,
        kernel=platform.release(),
        hostname=socket.gethostname(),
    )


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


# --- devices -----------------------------------------------------------------------------


def _devices(devices: Sequence[Any] | None, environ, gpus) -> tuple[Devices, Backend | None]:
    """The devices and their backend, read from `devices` or a backend already up in this
    process; else a guess (read_by null)."""
    if devices is None:
        devices = _initialised_jax_devices()
    if devices:
        read = device_identity.read(devices, environ, gpus)
        return read, device_identity.backend(devices, environ)
    return device_identity.guessed(environ, gpus), None


def _initialised_jax_devices() -> list[Any] | None:
    """jax.devices() only when a backend is already up; never start one from here."""
    if "jax" not in sys.modules:
        return None
    try:
        from jax._src import xla_bridge

        if not xla_bridge._backends:
            return None
        import jax

        return list(jax.devices())
    except Exception:
        return None


def _smi_driver_version() -> str | None:
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    first = out.strip().splitlines()
    return first[0].strip() if first else None


def _cuda_version() -> str | None:
    """The CUDA runtime JAX loads (jaxlib's probe), else the runtime wheel's version."""
    probe = _jaxlib_cuda_probe()
    if probe is not None:
        try:
            return _cuda_int_version(probe.cuda_runtime_get_version())
        except Exception:
            pass
    return _first_version(("nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime"))


def _cudnn_version() -> str | None:
    probe = _jaxlib_cuda_probe()
    if probe is not None:
        try:
            v = probe.cudnn_get_version()  # e.g. 91000 -> 9.10.0
            return f"{v // 10000}.{v % 10000 // 100}.{v % 100}"
        except Exception:
            pass
    return _first_version(("nvidia-cudnn-cu12", "nvidia-cudnn-cu13"))


def _jaxlib_cuda_probe() -> Any:
    """jaxlib's cuda_versions module when the CUDA plugin is installed (no backend start)."""
    if importlib.util.find_spec("jax") is None:
        return None
    try:
        from jax._src.lib import cuda_versions
    except Exception:
        return None
    return cuda_versions


def _cuda_int_version(v: int) -> str:
    return f"{v // 1000}.{v % 1000 // 10}"


def _first_version(names: Sequence[str]) -> str | None:
    for name in names:
        version = device_identity.package_version(name)
        if version:
            return version
    return None


# --- container, code, packages -----------------------------------------------------------


def _container(environ: Mapping[str, str]) -> Container | None:
    """Null outside dew's image. Inside, the engine from its marker file, the rest from the
    image's build labels. A marker file alone does not count: a host that is itself some
    container (a CI runner, a dev box) runs dew outside any image of ours."""
    labels = {field: _label(environ, var) for field, var in CONTAINER_VARIABLES.items()}
    if not (labels["variant"] or labels["image_id"]):
        return None
    podman = Path("/run/.containerenv")
    docker = Path("/.dockerenv")
    if podman.exists():
        engine = "podman"
        info = _containerenv(podman)
    elif docker.exists():
        engine, info = "docker", {}
    elif environ.get("container"):
        engine, info = environ["container"], {}
    else:
        engine, info = "unknown", {}
    if not labels["image_id"]:
        labels["image_id"] = info.get("imageid") or info.get("image")
    if labels["base_packages"] is not None:  # name=version,name=version,...
        labels["base_packages"] = [item for item in labels["base_packages"].split(",") if item]
    return Container(engine=engine, **labels)


def _containerenv(path: Path) -> dict[str, str]:
    values = {}
    try:
        for line in path.read_text().splitlines():
            key, sep, value = line.partition("=")
            if sep:
                values[key.strip()] = value.strip().strip('"')
    except OSError:
        pass
    return values


def code_identity(repo: Path, environ: Mapping[str, str]) -> Code:
    """The code a record made from the checkout `repo` names: git's commit, whether the tree
    differs from it and the digest of that diff; outside a checkout, the image's labels."""
    commit = _git(repo, "rev-parse", "HEAD")
    if commit:
        status = _git(repo, "status", "--porcelain", "--untracked-files=no")
        diff = _git(repo, "diff", "HEAD", "--binary") if status else None  # as dew.host.engine
        digest = hashlib.sha256(diff.encode()).hexdigest() if diff else None
        return Code(commit=commit, dirty=bool(status), source="git", diff_sha256=digest)
    for var in COMMIT_VARIABLES:
        if _label(environ, var):
            dirty = _label(environ, DIRTY_VARIABLE)
            return Code(
                commit=environ[var],
                dirty=None if dirty is None else dirty.lower() in ("1", "true", "yes"),
                source="label",
                diff_sha256=_label(environ, DIFF_VARIABLE),
            )
    return Code(commit=None, dirty=None, source=None)


def _git(repo: Path, *args: str) -> str | None:
    """git's output in the checkout `repo` (None outside one, or when git answers otherwise)."""
    return git(repo, *args) if (repo / ".git").exists() else None


def installed_packages(path: Sequence[str] | None = None) -> dict[str, str | None]:
    """CORE_PACKAGES (null when absent), then every installed CUDA_PREFIXES distribution by
    name; from `path` (default sys.path), the first of a name winning as imports do."""
    installed: dict[str, str] = {}
    for dist in importlib.metadata.distributions(path=list(path or sys.path)):
        name = distribution_name(dist.metadata["Name"] or "")
        if name and dist.version:
            installed.setdefault(name, dist.version)
    packages: dict[str, str | None] = {name: installed.get(name) for name in CORE_PACKAGES}
    cuda = (name for name in installed if name.startswith(CUDA_PREFIXES))
    packages.update((name, installed[name]) for name in sorted(cuda))
    return packages


def _jax_config() -> dict[str, Any] | None:
    if importlib.util.find_spec("jax") is None:
        return None
    import jax

    values = {}
    for key in JAX_CONFIG_KEYS:
        if key in jax.config.values:
            value = jax.config.values[key]
            if not isinstance(value, str | int | float | bool | type(None)):
                value = str(value)
            values[key] = value
    return values
