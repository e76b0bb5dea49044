"""The GPU sessions' checks: engine, GPU and driver before anything is built, the GPU seen
through the engine, and this host's GPU as nvidia-smi names it.

`session` is a nox.Session; nothing here imports nox.
"""

from __future__ import annotations

import shutil
import subprocess

from .benchmarks import choose_engine
from .runner import run_argv

# The oldest driver each CUDA variant's wheels run on.
MIN_DRIVER = {"cuda12": 525, "cuda13": 580}


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


def gpu_preflight(session, variant: str):
    """Engine, GPU and driver, each failing with the one line that says what to fix."""
    if variant not in MIN_DRIVER:
        session.error(f"--variant {variant!r} is not one of: {', '.join(MIN_DRIVER)}")
    engine = choose_engine(session)
    if engine is None:
        session.error(
            "bench-gpu needs a container engine with GPU access: install docker with the "
            "NVIDIA Container Toolkit, or podman with its CDI spec (nvidia-ctk cdi generate)"
        )
    if not shutil.which("nvidia-smi"):
        session.error(
            "no NVIDIA GPU here: nvidia-smi is not on PATH; bench-gpu needs an NVIDIA GPU and "
            f"driver >= {MIN_DRIVER[variant]} (on a CPU machine run `nox -s cpu-smoke`)"
        )
    query = nvidia_smi()
    lines = [line.split(",") for line in query.stdout.strip().splitlines() if "," in line]
    if query.returncode != 0 or not lines:
        session.error(f"nvidia-smi sees no GPU: {query.stderr.strip() or query.stdout.strip()}")
    name, driver = lines[0][0].strip(), lines[0][1].strip()
    if int(driver.split(".")[0]) < MIN_DRIVER[variant]:
        session.error(
            f"driver {driver} is older than {variant} needs ({MIN_DRIVER[variant]}+): "
            "update the NVIDIA driver or use --variant cuda12"
        )
    return engine, name


def gpu_visible_in_image(session, engine, image) -> None:
    """The GPU through the engine: the NVIDIA Container Toolkit (docker) or CDI spec (podman)."""
    probe = "import jax; print(len(jax.devices('gpu')))"
    argv = run_argv(engine, image, ["python", "-c", probe], env={"JAX_PLATFORMS": "cuda"}, gpu=True)
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        fix = (
            "install the NVIDIA Container Toolkit"
            if engine.name == "docker"
            else "generate the CDI spec: nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml"
        )
        session.error(f"the GPU is not visible inside {engine.name} ({last}): {fix}")
