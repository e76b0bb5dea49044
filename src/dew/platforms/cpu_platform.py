"""The host's CPU as JAX's device: the cases run on the host's own cores."""

from __future__ import annotations

from typing import Any

from dew.platforms import Platform, Prior, register


def compile_jobs(cores: int, cases: int) -> int:
    """A compile per core: the compiles and the cases share nothing but the host."""
    return min(cores, max(cases, 1))


def compile_devices(name: str) -> list[Any]:
    """This process's CPU devices: the held-chip path's compiles on a host without a chip
    (the tests), whose one topology is "cpu"."""
    import jax

    return jax.devices("cpu")


CPU = register(
    Platform(
        name="cpu",
        title="the host's CPU",
        jax_names=("cpu",),
        kinds=r"^cpu$",
        stack_variant="cpu",
        variants=("cpu",),
        jax_platforms="cpu",
        guess="dew.bench.record.devices:host_guess",
        topologies="cpu",
        topology_form="cpu",
        compile_devices="dew.platforms.cpu_platform:compile_devices",
        compile_jobs=compile_jobs,
        parallel_compiles=True,
        host_cores=True,
        simulated_devices=True,
        tcmalloc=True,
        noise=Prior(
            0.16,
            0.05,
            0.13,
            "this 2-core VM's history (results/noise.json: 21 A/A records, process 16%, "
            "shift 13%, run 4% at its standard error); another CPU host is its own kind",
        ),
        band=0.05,  # a shared 2-core VM drifts by several percent
    )
)
