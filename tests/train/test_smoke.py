"""cpu-smoke cases of this lane's architectures: 3 steps on 8 simulated devices, fsdp=8."""

import math

import jax
import pytest

from dew.bench.sweep.presets import MOE_CASES
from dew.models import registry
from dew.train.mesh import MeshSpec
from dew.train.trainer import Trainer

# (architecture, MoE case); simple_dit's is in test_trainer.py
CASES = [
    pytest.param("simple_udit", False, marks=pytest.mark.slow),
    pytest.param("hybrid_dit", False, marks=pytest.mark.slow),
    ("causal_transformer", False),
    ("causal_transformer", True),
]


@pytest.mark.parametrize(("architecture", "moe"), CASES)
def test_cpu_smoke_trains_three_steps_sharded_and_donated(architecture, moe):
    config_cls = registry.get(architecture).config_cls
    config = config_cls.preset("cpu-smoke", **(MOE_CASES[architecture] if moe else {}))
    trainer = Trainer(architecture, config, mesh=MeshSpec(fsdp=8), compilation_cache_dir=None)
    state = trainer.init()
    batch = trainer.example_batch(8)
    for _ in range(3):
        previous = state
        state, metrics = trainer.step(state, batch)
        assert math.isfinite(float(metrics["train/loss"]))
        assert all(leaf.is_deleted() for leaf in jax.tree.leaves(previous.params))
    assert int(state.step) == 3
    largest = max(jax.tree.leaves(state.params), key=lambda leaf: leaf.size)
    assert "fsdp" in largest.sharding.spec
    assert {s.data.size for s in largest.addressable_shards} == {largest.size // 8}
