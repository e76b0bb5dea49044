"""Every test runs on CPU with 8 simulated devices, set before jax starts its backend; with
`-n` (pytest-xdist, as `nox -s tests` runs them) a file's tests share one worker process."""

import contextlib
import fcntl
import os
import sys
from pathlib import Path

import pytest

# tests/infra (the throwaway SLURM cluster, the browser driver) is the package `infra`:
# tests/ on sys.path, whatever pytest's import mode (prepend adds it too, importlib does not).
TESTS = str(Path(__file__).resolve().parent)
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)

os.environ.setdefault("JAX_PLATFORMS", "cpu")
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    ).strip()

# The slow tier (`@pytest.mark.slow` on the tests themselves): a small-preset compile or a
# cpu-smoke training run per architecture costs one to three minutes of CPU each on a
# 2-core machine; so do the end-to-end runs that build an image of a whole stack, launch a
# SLURM job or time repeats in rounds. `nox -s tests` (the README's command) keeps the
# published params and GFLOP of simple_dit and causal_transformer (with its MoE case) and
# a fast test of each mechanism (unet's convolutions are counted there from HLO fixtures,
# tests/telemetry); `nox -s tests-full` runs everything, and CI runs both tiers (.ci/run).


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: the slow tier, run by `nox -s tests-full`")
    config.addinivalue_line(
        "markers", "alone: needs the host to itself (a quiet reading); other workers wait"
    )
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        quick_compiles_in_this_process()


# XLA's CPU backend spends most of a small program's compile in LLVM's optimiser (a tiny
# attention: 2.4 s of CPU at level 0 against 7.6 s at the default). The process that runs
# the tests compiles at level 0: what they check (values within tolerances, shapes,
# shardings, HLO and its FLOPs) is settled before LLVM. XLA reads XLA_FLAGS once, when the
# backend starts; the flag is then taken out again, so every process a test starts (a
# benchmark, a record, a fingerprint) compiles as a user's would, and records say so.
QUICK_COMPILES = "--xla_backend_optimization_level=0"


def quick_compiles_in_this_process() -> None:
    import jax

    flags = os.environ["XLA_FLAGS"]
    os.environ["XLA_FLAGS"] = f"{flags} {QUICK_COMPILES}"
    try:
        jax.devices()
    finally:
        os.environ["XLA_FLAGS"] = flags


# Workers for `-n auto`: one per core the process may use (xdist's own count is the
# physical cores, fewer where a VM's vCPUs are hyperthreads), at most 4: each worker holds
# a JAX of its own, and many tests start processes of 8 simulated devices besides.
MAX_WORKERS = 4


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    return max(1, min(len(os.sched_getaffinity(0)), MAX_WORKERS))


# Files whose tests share something outside the process, so one worker runs them one after
# another: the container engine's images (two builds of one image at once do its work twice).
SHARED = {"tests/container/": "the container engine"}


def shared_scope(nodeid: str) -> str:
    """The unit `--dist loadfile` hands a worker: the test's file, or what it shares."""
    path = nodeid.split("::", 1)[0]
    return next((name for prefix, name in SHARED.items() if path.startswith(prefix)), path)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class ByFileOrShared(LoadFileScheduling):
        def _split_scope(self, nodeid):
            return shared_scope(nodeid)

    return ByFileOrShared(config, log)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    # Under xdist, a test marked `alone` runs (setup to teardown) while no other worker runs
    # one: every test holds the host lock shared, an `alone` one holds it exclusive; the
    # turnstile keeps the others from starving it by taking the shared lock again and again.
    basetemp = item.config.option.basetemp
    if not hasattr(item.config, "workerinput") or not basetemp:
        return (yield)
    alone = item.get_closest_marker("alone") is not None
    root = Path(basetemp).parent
    with contextlib.ExitStack() as locks:
        turnstile = locks.enter_context(open(root / "turnstile.lock", "a"))
        host = locks.enter_context(open(root / "host.lock", "a"))
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        fcntl.flock(host, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        if not alone:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        return (yield)
