"""A TPU host as found (issue 50): its own Python and JAX preinstalled in a folder on
PYTHONPATH, no network. What dew takes from it and what a bundle brings beside it: the lock
for that (locks/tpu-host.txt, compiled by `nox -s lock`) and the minimums the bundle's
install script checks on the host before it installs anything.
"""

from __future__ import annotations

from pathlib import Path

# The host's Python (a bundle's wheels are for it: cp311).
HOST_PYTHON = "3.11"
# The host's own packages, as found on a v5e host (libtpu 0.0.42.1 beside them): never in
# the bundle, never replaced. Each version is the lowest the bundle's install script
# accepts (the lock is resolved against exactly these).
HOST_PACKAGES = {"jax": "0.10.2", "jaxlib": "0.10.2", "numpy": "2.4.6", "scipy": "1.17.1"}
# jax's own requirements: they came with the host's jax and stay the host's (present, any
# version its jax runs with).
HOST_JAX_REQUIREMENTS = ("ml-dtypes", "opt-einsum")
# The lock of the host's own packages as found (the CPU jaxlib of the same version, and
# no libtpu): what tpu-host-smoke puts in a folder on PYTHONPATH to be the host on CPU.
HOST_LOCK = "tpu-host-jax"
# The published versions that do not run beside that host: flax 0.12.9 needs Python 3.12
# and jax>=0.11.1; 0.12.8 takes Python 3.11 and jax>=0.10.
BESIDE_HOST = {"flax": "0.12.8"}


def lock_arguments(scratch: Path) -> list[str]:
    """uv pip compile's arguments for locks/tpu-host.txt beyond the common ones: the host's
    Python, its versions in place of the published ones (an override file in `scratch`),
    and none of its own packages written into the lock."""
    overrides = scratch / "tpu-host-overrides.txt"
    pins = {**HOST_PACKAGES, **BESIDE_HOST}
    overrides.write_text("".join(f"{name}=={version}\n" for name, version in pins.items()))
    kept_out = [*HOST_PACKAGES, *HOST_JAX_REQUIREMENTS]
    return [
        "--python-version", HOST_PYTHON, "--override", str(overrides),
        *(arg for name in kept_out for arg in ("--no-emit-package", name)),
    ]  # fmt: skip


def host_lock_arguments(scratch: Path) -> list[str]:
    """uv pip compile's input and arguments for locks/tpu-host-jax.txt: the host's own
    packages at their versions as found, for its Python."""
    found = scratch / "tpu-host-jax.in"
    found.write_text("".join(f"{name}=={version}\n" for name, version in HOST_PACKAGES.items()))
    return [str(found), "--python-version", HOST_PYTHON]
