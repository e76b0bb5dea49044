"""Every test runs on CPU with 8 simulated devices, set before jax starts its backend."""

import os
import sys
from pathlib import Path

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
# 2-core machine; so do the end-to-end runs that build an image of a whole stack, launch
# a SLURM job or time repeats in rounds. `nox -s tests` (the README's command, at most 8
# minutes here) keeps the published params and GFLOP of simple_dit and causal_transformer
# (with its MoE case) and a fast test of each mechanism (unet's convolutions are counted
# there from HLO fixtures, tests/telemetry); `nox -s tests-full` runs everything, and CI
# runs both tiers (.ci/run).


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: the slow tier, run by `nox -s tests-full`")
