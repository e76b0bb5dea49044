"""flux_transformer: no published row; params and GFLOP/step pinned to figures derived by
formula from the config (they equal the spec's replica figures), and a cpu-smoke run."""

import math

import jax
import pytest

from dew.models.flux import FluxConfig
from dew.train.mesh import MeshSpec
from dew.train.trainer import Trainer

TEXT_TOKENS = 77
# Compiling the small preset takes minutes on a shared 2-core CPU host.
LONG_COMPILES = pytest.mark.slow  # minutes on CPU: `nox -s tests-full` runs them


def flux_params(c: FluxConfig) -> int:
    """x_embedder; timestep, guidance and pooled MLPs; context Dense; double blocks (per
    stream 18d² + 15d, plus q and k RMSNorm scales per head dim); single blocks (3d² + 3d
    adaLN, 3d² + 3d q/k/v, 4d² + 4d MLP in, 5d² + d out, q/k norms); head."""
    d, hd, patch_out = c.width, c.head_dim, 4 * c.channels
    dense = lambda i, o: i * o + o
    embed = (
        dense(patch_out, d)
        + 2 * (dense(c.timestep_features, d) + dense(d, d))
        + dense(c.pooled_dim, d) + dense(d, d)
        + dense(c.joint_attention_dim, d)
    )  # fmt: skip
    double = c.double_blocks * (36 * d * d + 30 * d + 4 * hd)
    single = c.single_blocks * (15 * d * d + 11 * d + 2 * hd)
    return embed + double + single + dense(d, 2 * d) + dense(d, patch_out)


def flux_gflop(c: FluxConfig, batch: int) -> float:
    """Matmul FLOPs of a train step: 3 passes of every Dense whose input depends on
    parameters, 2 where it does not (the latent, caption and sinusoid inputs); attention over
    the joint 77 + 256 sequence, 2 products of 2·B·S²·d forward and twice that backward."""
    d, n_img = c.width, (c.image_size // 2) ** 2
    seq, patch_out = n_img + TEXT_TOKENS, 4 * c.channels
    mm = lambda rows, i, o, passes=3: passes * 2 * rows * i * o
    tokens = batch * seq
    double = c.double_blocks * mm(tokens, d, 12 * d)
    single = c.single_blocks * mm(tokens, d, 3 * d + 4 * d + 5 * d)
    attention = (c.double_blocks + c.single_blocks) * 3 * 4 * batch * seq * seq * d
    modulation = mm(batch, d, (c.double_blocks * 12 + c.single_blocks * 3 + 2) * d)
    embed = (
        mm(batch * n_img, patch_out, d, 2) + mm(batch * TEXT_TOKENS, c.joint_attention_dim, d, 2)
        + 2 * mm(batch, c.timestep_features, d, 2) + mm(batch, c.pooled_dim, d, 2)
        + 3 * mm(batch, d, d)
    )  # fmt: skip
    head = mm(batch * n_img, d, patch_out)
    return (double + single + attention + modulation + embed + head) / 1e9


@pytest.mark.slow
def test_params_follow_the_formula_and_the_replica_figure():
    expected = flux_params(FluxConfig.preset("small"))
    assert expected == 25_463_872  # the spec's replica figure
    trainer = Trainer("flux_transformer", preset="small", compilation_cache_dir=None)
    assert trainer.param_counts == {"backbone": expected, "condition": 0}


@pytest.mark.slow
@LONG_COMPILES
def test_gflop_follows_the_formula_and_the_replica_figure():
    expected = flux_gflop(FluxConfig.preset("small"), batch=4)
    assert expected == pytest.approx(99.487, rel=1e-4)  # the spec's replica figure
    trainer = Trainer("flux_transformer", preset="small", compilation_cache_dir=None)
    trainer.compile(trainer.example_batch(4))  # compiled, never run
    assert trainer.flops / 1e9 == pytest.approx(expected, rel=1e-3)


@pytest.mark.slow
def test_cpu_smoke_trains_three_steps_on_8_devices():
    trainer = Trainer(
        "flux_transformer", preset="cpu-smoke", mesh=MeshSpec(fsdp=8), compilation_cache_dir=None
    )
    state = trainer.init()
    batch = trainer.put_batch(trainer.example_batch(8))
    for _ in range(3):
        state, metrics = trainer.step(state, batch)
        assert math.isfinite(float(metrics["train/loss"]))
    assert int(state.step) == 3
    largest = max(jax.tree.leaves(state.params["model"]), key=lambda leaf: leaf.size)
    assert {s.data.size for s in largest.addressable_shards} == {largest.size // 8}


def test_rope_axes_must_sum_to_the_head_dim():
    with pytest.raises(ValueError, match=r"rope_axes \(16, 24, 16\) must be even and sum to"):
        FluxConfig.preset("small", rope_axes=(16, 24, 16))
