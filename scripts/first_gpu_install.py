"""The first GPU run's dependencies: what dew needs beyond a jax+CUDA host, installed from
carried wheels at the pins of locks/cuda13.txt (scripts/first_gpu_run.py, step 1). Standard
library only."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOCK = REPO / "locks" / "cuda13.txt"
INSTALL_S = 60  # pip's timeout
# What dew needs beyond what a jax+CUDA host has (jax, jaxlib, flax, optax, numpy, scipy
# and their own dependencies: absl-py, etils, protobuf, rich, msgpack, pyyaml, ...).
CARRIED = (
    "pydantic", "pydantic-core", "annotated-types", "typing-inspection", "typing-extensions",
    "tyro", "docstring-parser", "typeguard",
    "grain", "array-record", "cloudpickle", "portpicker",
    "nvidia-ml-py", "psutil", "pillow", "tokenizers", "ftfy", "wcwidth",
)  # fmt: skip


class UsageError(Exception):
    """Bad input: one line, exit 2."""


def pins() -> dict[str, str]:
    """distribution -> version, from the CUDA 13 lock (the stack the published runs use)."""
    found = {}
    for line in LOCK.read_text().splitlines():
        match = re.match(r"([A-Za-z0-9_.\-]+)==([^\s;\\]+)", line)
        if match:
            found[match.group(1).lower()] = match.group(2)
    return found


def plan_install(args: dict) -> list[str]:
    """`name==pin` of what to install: each carried distribution the host lacks (refused,
    one line, when --wheels cannot supply it), and each it has at another version when
    --wheels has the pin (else the host's stays: the record lists the versions)."""
    locked = pins()
    wheels = Path(args["wheels"])
    have = {_wheel_key(p.name) for p in wheels.glob("*.whl")} if wheels.is_dir() else set()
    wanted, absent = [], []
    for name in CARRIED:
        try:
            host = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            host = None
        pin = f"{name}=={locked[name]}"
        if host == locked[name]:
            continue
        if (name, locked[name]) in have:
            wanted.append(pin)
        elif host is None:
            absent.append(pin)
    if absent and not wheels.is_dir():
        raise UsageError(
            f"--wheels {wheels} is not a directory; the host lacks {', '.join(absent)}: "
            "fetch them as docs/gpu-first-run.md says (pip download --no-deps -d wheels/ ...)"
        )
    if absent:
        raise UsageError(f"--wheels {wheels} lacks {', '.join(absent)} (docs/gpu-first-run.md)")
    return wanted


def install(args: dict, log) -> list[str]:
    """pip-install the planned wheels into OUT/site; returns what was installed."""
    wanted = args["wanted"]
    if not wanted:
        log("every carried dependency is already installed: nothing to install")
        return []
    command = [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--no-compile"]
    command += ["--find-links", str(args["wheels"]), "--target", str(args["out"] / "site")]
    log("installing " + " ".join(wanted))
    try:
        done = subprocess.run([*command, *wanted], capture_output=True, text=True,
                              timeout=INSTALL_S)  # fmt: skip
    except subprocess.TimeoutExpired:
        raise UsageError(f"pip did not install the wheels within {INSTALL_S} s") from None
    (args["out"] / "install.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        raise UsageError(f"pip could not install the wheels: {lines[-1] if lines else '?'}")
    return wanted


def _wheel_key(filename: str) -> tuple[str, str]:
    name, version = filename.split("-")[:2]
    return name.lower().replace("_", "-"), version
