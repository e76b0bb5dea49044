"""The body of each nox session, one module per session (smoke: cpu-smoke and cuda-smoke,
which share theirs): noxfile.py declares the sessions and hands each its `session`, as
`sessions.<module>.<function>(session)`."""

from dew.host.sessions import (
    ab_session,
    base_image,
    bench_data,
    bench_gpu,
    bench_tpu,
    bundle,
    lock,
    multihost_smoke,
    reproduce_session,
    slurm_smoke,
    smoke,
    tpu_host_smoke,
)

__all__ = [
    "ab_session",
    "base_image",
    "bench_data",
    "bench_gpu",
    "bench_tpu",
    "bundle",
    "lock",
    "multihost_smoke",
    "reproduce_session",
    "slurm_smoke",
    "smoke",
    "tpu_host_smoke",
]
