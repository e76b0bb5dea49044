"""The GPU sessions' checks: engine, GPU, driver and the engine's NVIDIA support (docker's
NVIDIA Container Toolkit, podman's CDI spec) before anything is built, the GPU seen
through the engine, and this host's GPU as nvidia-smi names it; and the environment the
GPU benchmarks run in.

A host that cannot run a GPU container is refused in one line naming the fix, exit 2.
`session` is a nox.Session; nothing here imports nox.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

from dew.host.benchmarks import choose_engine, usage
from dew.host.engine import Engine
from dew.host.runner import run_argv

# The oldest driver each CUDA variant's wheels run on.
MIN_DRIVER = {"cuda12": 525, "cuda13": 580}
# The seed's GPU rerun (2026-09-05, results/published/*-rerun.json; README.md): the allocator
# grows on demand up to 80% of the card instead of taking 75% at start, so a comparison with
# those rows compares the same allocator. A case that needs preallocation says so in its row.
GPU_ENV = {
    "JAX_PLATFORMS": "cuda",
    "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
    "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.8",
}
# Where podman looks for CDI specs (the CDI default); DEW_CDI_DIRS (os.pathsep-separated)
# replaces them, for a host that keeps its specs elsewhere and for tests.
CDI_DIRS = ("/etc/cdi", "/var/run/cdi")
CDI_KIND = "nvidia.com/gpu"
# What the NVIDIA Container Toolkit installs: docker's `--gpus` runs its hook.
TOOLKIT_TOOLS = ("nvidia-container-cli", "nvidia-ctk", "nvidia-container-runtime-hook")


def refuse(session, message: str):
    """A host that cannot run the session: `<session>: error: <message>`, exit 2."""
    usage(session.name, message)


def nvidia_smi() -> subprocess.CompletedProcess:
    """nvidia-smi's `name, driver_version` line for each GPU."""
    return subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip


def gpu_here() -> tuple[str, str]:
    """(name, driver) of this host's first GPU; "" for each when there is none."""
    query = nvidia_smi() if shutil.which("nvidia-smi") else None
    first = query.stdout.strip().splitlines()[0] if query and query.stdout.strip() else ""
    name, _, driver = (part.strip() for part in first.partition(","))
    return name, driver


# --- the engine's NVIDIA support ---------------------------------------------------------------


def cdi_dirs(environ: Mapping[str, str] | None = None) -> list[Path]:
    environ = os.environ if environ is None else environ
    given = environ.get("DEW_CDI_DIRS")
    if given is None:
        return [Path(d) for d in CDI_DIRS]
    return [Path(d) for d in given.split(os.pathsep) if d]


def cdi_specs(dirs: list[Path]) -> list[Path]:
    """The CDI spec files in `dirs` that name nvidia.com/gpu (an unreadable one is none)."""
    found = []
    for directory in dirs:
        candidates = sorted(directory.glob("*.yaml")) + sorted(directory.glob("*.json"))
        for spec in candidates:
            try:
                if CDI_KIND in spec.read_text(errors="replace"):
                    found.append(spec)
            except OSError:
                continue
    return found


def docker_runtimes(engine: Engine) -> list[str]:
    """The runtimes the docker daemon knows (`docker info`); [] when it does not say."""
    probe = engine("info", "--format", "{{json .Runtimes}}", timeout=30)
    try:
        runtimes = json.loads(probe.stdout.strip() or "null") if probe.returncode == 0 else None
    except ValueError:
        return []
    return sorted(runtimes) if isinstance(runtimes, dict) else []


def toolkit_problem(engine: Engine, environ: Mapping[str, str] | None = None) -> str | None:
    """Why `engine` cannot give a container the GPU here, with the fix; None when it can."""
    if engine.name == "docker":
        if "nvidia" in docker_runtimes(engine) or any(map(shutil.which, TOOLKIT_TOOLS)):
            return None
        return (
            "docker has no NVIDIA Container Toolkit here (no `nvidia` runtime in `docker info`, "
            f"none of {', '.join(TOOLKIT_TOOLS)} on PATH): install it, then "
            "`sudo nvidia-ctk runtime configure --runtime=docker && sudo systemctl restart docker`"
        )
    dirs = cdi_dirs(environ)
    if cdi_specs(dirs):
        return None
    where = " or ".join(str(d) for d in dirs) or "no directory (DEW_CDI_DIRS is empty)"
    return (
        f"podman finds no CDI spec naming {CDI_KIND} in {where}: generate it with "
        "`sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml` (NVIDIA Container Toolkit)"
    )


# --- the checks, in the sessions' order ------------------------------------------------------


def gpu_preflight(session, variant: str):
    """Engine, GPU, driver and the engine's NVIDIA support, before anything is built; each
    failure the one line that says what to fix, exit 2. Returns (engine, GPU name)."""
    if variant not in MIN_DRIVER:
        refuse(session, f"--variant {variant!r} is not one of: {', '.join(MIN_DRIVER)}")
    engine = choose_engine(session)
    if engine is None:
        refuse(
            session,
            "the GPU benchmarks need a container engine with GPU access: install docker with "
            "the NVIDIA Container Toolkit, or podman with its CDI spec (nvidia-ctk cdi generate)",
        )
    if not shutil.which("nvidia-smi"):
        refuse(
            session,
            "no NVIDIA GPU here: nvidia-smi is not on PATH; the GPU benchmarks need an NVIDIA "
            f"GPU and driver >= {MIN_DRIVER[variant]} (on a CPU machine run `nox -s cpu-smoke`)",
        )
    query = nvidia_smi()
    lines = [line.split(",") for line in query.stdout.strip().splitlines() if "," in line]
    if query.returncode != 0 or not lines:
        refuse(session, f"nvidia-smi sees no GPU: {query.stderr.strip() or query.stdout.strip()}")
    name, driver = lines[0][0].strip(), lines[0][1].strip()
    major = driver.split(".")[0]
    if not major.isdigit() or int(major) < MIN_DRIVER[variant]:
        refuse(
            session,
            f"driver {driver} is older than {variant} needs ({MIN_DRIVER[variant]}+): "
            "update the NVIDIA driver or use --variant cuda12",
        )
    problem = toolkit_problem(engine)
    if problem:
        refuse(session, problem)
    return engine, name


def gpu_visible_in_image(session, engine, image) -> None:
    """The GPU through the engine: the devices JAX finds in the image with JAX_PLATFORMS=cuda
    (none found fails the probe), said in the session's log."""
    probe = (
        "import jax; d = jax.devices(); "
        "print(f'{len(d)} {d[0].platform} device(s), {d[0].device_kind}')"
    )
    argv = run_argv(engine, image, ["python", "-c", probe], env=GPU_ENV, gpu=True)
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        fix = (
            "install the NVIDIA Container Toolkit"
            if engine.name == "docker"
            else "generate the CDI spec: nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml"
        )
        refuse(session, f"the GPU is not visible inside {engine.name} ({last}): {fix}")
    seen = (result.stdout.strip().splitlines() or ["no output"])[-1]
    session.log(f"the GPU through {engine.name}: {seen}")
