"""Every test runs on CPU with 8 simulated devices, set before jax starts its backend."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    ).strip()

# The slow tier: a small-preset compile or a cpu-smoke training run per architecture costs
# one to three minutes of CPU each on a 2-core machine. `nox -s tests` (the README's and
# CI's command) keeps one of each kind for the families the published audit counted
# (simple_dit, causal_transformer with its MoE case, unet) and leaves the rest to
# `nox -s tests-full`, which runs every test.
import re  # noqa: E402

import pytest  # noqa: E402

SLOW = [
    r"tests/models/test_dit\.py::test_small_preset_matches_published_params_and_gflop\[(simple_udit|hybrid_dit)",
    r"tests/models/test_(uvit|video|jepa|mmdit|multimodal|diffusion_gemma|flux)\.py::test_.*(small|gflop|params_match|params_follow)",
    r"tests/models/test_unet\.py::test_unet_(3d|2d_condition)_",
    r"tests/models/test_.*\.py::test_cpu_smoke_trains_three_steps",
    r"tests/train/test_smoke\.py::.*\[(simple_udit|hybrid_dit)",
    r"tests/bench/test_multihost\.py::test_a_killed_process",
    r"tests/train/test_distributed\.py::test_two_processes_of_four_devices",
]
_SLOW = re.compile("|".join(f"(?:{pattern})" for pattern in SLOW))


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: the slow tier, run by `nox -s tests-full`")


def pytest_collection_modifyitems(items):
    for item in items:
        if _SLOW.match(item.nodeid):
            item.add_marker(pytest.mark.slow)
