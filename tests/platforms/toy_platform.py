"""A fourth platform from outside dew, in one module: the CPU's devices claimed as "toy".

It registers itself on import; a process loads it through the `dew.platforms` entry point
(tests/platforms/test_platforms.py declares one beside it), the way a user's package would.
"""

from __future__ import annotations

from typing import Any

from dew.platforms import Platform, Prior, register


def compile_devices(name: str) -> list[Any]:
    """The first N of the host's CPU devices for the topology "toy:N"."""
    import jax

    return jax.devices("cpu")[: int(name.split(":")[1])]


TOY = register(
    Platform(
        name="toy",
        title="the toy platform",
        jax_names=("cpu",),  # it wraps the host's CPU devices
        kinds=r"^cpu$",
        host_cores=True,
        simulated_devices=True,
        topologies=r"toy:\d+",
        compile_devices="toy_platform:compile_devices",
        noise=Prior(0.3, 0.1, 0.1, "the toy's own guess"),
        band=0.1,
        lacks="platform toy: a toy, with no peak FLOP/s and no memory reading",
    )
)
