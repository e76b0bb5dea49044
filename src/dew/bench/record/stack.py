"""What differs between the stacks of two records: packages, driver, device, container,
environment flags, JAX config, commit and settings (compare's first table, and what
--resume checks before it continues a record)."""

from __future__ import annotations

import dataclasses
import re

from dew.bench.record.schema import BenchmarkRun

NOT_RECORDED = "not recorded"  # a field the older record lacks, as every table shows it


@dataclasses.dataclass
class StackDifference:
    what: str
    run: str
    reference: str


def _show(value) -> str:
    if value is None:
        return NOT_RECORDED
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in sorted(value.items())) or "{}"
    return str(value)


def same_device(a: str, b: str) -> bool:
    """'NVIDIA GeForce RTX 4080' and 'RTX 4080' name the same card."""
    x, y = (re.sub(r"nvidia|geforce|[\s_-]", "", kind.lower()) for kind in (a, b))
    return x in y or y in x


def _same_commit(a: str, b: str) -> bool:
    """A short hash and the full one agree."""
    return a.startswith(b) or b.startswith(a)


def stack_differences(
    run: BenchmarkRun, ref: BenchmarkRun
) -> tuple[list[StackDifference], list[str]]:
    """What differs between the two stacks, and what only one side recorded."""
    diffs: list[StackDifference] = []
    unknown: list[str] = []

    def known(what: str, a, b, same=lambda x, y: x == y) -> None:
        if a is None and b is None:
            return
        if a is None or b is None:
            unknown.append(what)
        elif not same(a, b):
            diffs.append(StackDifference(what, _show(a), _show(b)))

    ea, eb = run.environment, ref.environment
    ca, cb = ea.code, eb.code
    known("commit", ca and ca.commit, cb and cb.commit, _same_commit)
    known("dirty tree", ca and ca.dirty, cb and cb.dirty)
    da, db = ea.devices, eb.devices
    known("device", da and da.kind, db and db.kind, same_device)
    known("device count", da and da.count, db and db.count)
    close = lambda x, y: abs(x - y) < 0.5  # GiB as a tool or a spec sheet rounds them
    known("device memory GiB", da and da.memory_gib, db and db.memory_gib, close)
    known("driver", ea.driver_version, eb.driver_version)
    known("CUDA", ea.cuda_version, eb.cuda_version)
    known("cuDNN", ea.cudnn_version, eb.cudnn_version)
    known("python", ea.python, eb.python)
    pa, pb = ea.packages or {}, eb.packages or {}
    for name in sorted(set(pa) | set(pb)):
        known(f"package {name}", pa.get(name), pb.get(name))
    ta, tb = ea.container, eb.container
    for field in ("engine", "image_id", "base_image_digest", "lock_sha256"):
        known(f"container {field}", ta and getattr(ta, field), tb and getattr(tb, field))
    # Env flags: a flag set on one side and unset (or unrecorded) on the other is a
    # difference in how the run ran, so every one is listed.
    fa, fb = ea.env_flags, eb.env_flags
    if fa is not None or fb is not None:
        for name in sorted(set(fa or {}) | set(fb or {})):
            a = (fa or {}).get(name, "unset" if fa is not None else NOT_RECORDED)
            b = (fb or {}).get(name, "unset" if fb is not None else NOT_RECORDED)
            if a != b:
                diffs.append(StackDifference(f"env {name}", a, b))
    ja, jb = ea.jax_config or {}, eb.jax_config or {}
    for name in sorted(set(ja) & set(jb)):
        known(f"jax config {name}", ja[name], jb[name])
    sa, sb = run.settings, ref.settings
    for field in ("preset", "steps", "warmup", "dtype", "mesh", "optimizer"):
        a, b = getattr(sa, field), getattr(sb, field)
        if a is not None and b is not None and a != b:
            diffs.append(StackDifference(f"setting {field}", _show(a), _show(b)))
    return diffs, unknown
