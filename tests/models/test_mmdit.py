"""MMDiT family: simple_mmdit and hierarchical_mmdit against the published row, sd3_transformer
against figures derived by formula from its config, and cpu-smoke training runs.

Compiling a small preset on CPU takes minutes on a shared 2-core host: by default only
sd3_transformer's train step is compiled (the quickest); simple_mmdit's and
hierarchical_mmdit's are in the slow tier (`nox -s tests-full`).
"""

import math

import jax
import pytest

from dew.models.mmdit import SD3Config
from dew.train.mesh import MeshSpec
from dew.train.trainer import Trainer

LONG_COMPILES = pytest.mark.slow  # minutes on CPU: `nox -s tests-full` runs them


def _compiled_small(architecture: str, batch: int) -> Trainer:
    trainer = Trainer(architecture, preset="small", compilation_cache_dir=None)
    trainer.compile(trainer.example_batch(batch))  # compiled, never run
    return trainer


@pytest.mark.slow
def test_simple_mmdit_params_match_published():
    trainer = Trainer("simple_mmdit", preset="small", compilation_cache_dir=None)
    assert trainer.param_counts == {"backbone": 36_385_584, "condition": 0}


@pytest.mark.slow
def test_hierarchical_mmdit_params_match_published():
    trainer = Trainer("hierarchical_mmdit", preset="small", compilation_cache_dir=None)
    assert trainer.param_counts == {"backbone": 55_498_188, "condition": 0}


@pytest.mark.slow
@LONG_COMPILES
def test_simple_mmdit_gflop_within_0_1_percent_of_published():
    assert _compiled_small("simple_mmdit", 16).flops / 1e9 == pytest.approx(383.7, rel=1e-3)


@pytest.mark.slow
@LONG_COMPILES
def test_hierarchical_mmdit_gflop_within_0_1_percent_of_published():
    assert _compiled_small("hierarchical_mmdit", 16).flops / 1e9 == pytest.approx(737.4, rel=1e-3)


# -- sd3_transformer: no published row; the figures follow from the config -------------------


def sd3_params(c: SD3Config) -> int:
    """Patch conv, timestep MLP, pooled MLP, context Dense; depth − 1 full joint blocks
    (per stream 6d² + 6d adaLN, 4d² + 4d q/k/v/o, 8d² + 5d MLP); the last block's caption
    stream is pre-only (2d² + 2d adaLN, 3d² + 3d q/k/v); the (scale, shift) head."""
    d, out = c.width, c.patch**2 * c.channels
    dense = lambda i, o: i * o + o
    embed = (
        dense(c.patch**2 * c.channels, d)
        + dense(c.timestep_features, d) + dense(d, d)
        + dense(c.pooled_dim, d) + dense(d, d)
        + dense(c.joint_attention_dim, d)
    )  # fmt: skip
    blocks = (c.depth - 1) * (36 * d * d + 30 * d) + (18 * d * d + 15 * d) + (5 * d * d + 5 * d)
    return embed + blocks + dense(d, 2 * d) + dense(d, out)


def sd3_gflop(c: SD3Config, batch: int) -> float:
    """A train step's matmul FLOPs: 3 passes (forward, input and weight gradient) of every
    Dense whose input depends on parameters, 2 where it does not (patch, context, pooled and
    timestep inputs); the last block's caption stream only feeds keys and values (its q/k/v
    rows still run); attention 2 products of 2·B·S²·d forward, twice that backward."""
    d, n_img, n_txt = c.width, (c.image_size // c.patch) ** 2, 77
    seq, out = n_img + n_txt, c.patch**2 * c.channels
    mm = lambda rows, i, o, passes=3: passes * 2 * rows * i * o
    tokens = batch * seq
    full_blocks = (c.depth - 1) * mm(tokens, d, 12 * d)
    last_block = mm(batch * n_img, d, 12 * d) + mm(batch * n_txt, d, 3 * d)
    attention = c.depth * 3 * 4 * batch * seq * seq * d
    modulation = mm(batch, d, ((c.depth - 1) * 12 + 6 + 2 + 2) * d)  # adaLN and head
    embed = (
        mm(batch * n_img, out, d, 2) + mm(batch * n_txt, c.joint_attention_dim, d, 2)
        + mm(batch, c.timestep_features, d, 2) + mm(batch, c.pooled_dim, d, 2)
        + 2 * mm(batch, d, d)
    )  # fmt: skip
    head = mm(batch * n_img, d, out)
    return (full_blocks + last_block + attention + modulation + embed + head) / 1e9


@pytest.fixture(scope="module")
def sd3_small():
    return _compiled_small("sd3_transformer", 4)


@pytest.mark.slow
def test_sd3_params_follow_the_formula_and_the_replica_figure(sd3_small):
    trainer = sd3_small
    expected = sd3_params(SD3Config.preset("small"))
    assert expected == 33_098_560  # the spec's replica figure
    assert trainer.param_counts == {"backbone": expected, "condition": 0}


@pytest.mark.slow
def test_sd3_gflop_follows_the_formula_and_the_replica_figure(sd3_small):
    expected = sd3_gflop(SD3Config.preset("small"), batch=4)
    assert expected == pytest.approx(97.119, rel=1e-4)  # the spec's replica figure
    assert sd3_small.flops / 1e9 == pytest.approx(expected, rel=1e-3)


def test_sd3_caption_table_is_4096_wide():
    assert SD3Config.preset("small").text_width == 4096


@pytest.mark.slow
@pytest.mark.parametrize("architecture", ["simple_mmdit", "hierarchical_mmdit", "sd3_transformer"])
def test_cpu_smoke_trains_three_steps_on_8_devices(architecture):
    trainer = Trainer(
        architecture, preset="cpu-smoke", mesh=MeshSpec(fsdp=8), compilation_cache_dir=None
    )
    state = trainer.init()
    batch = trainer.put_batch(trainer.example_batch(8))
    for _ in range(3):
        state, metrics = trainer.step(state, batch)
        assert math.isfinite(float(metrics["train/loss"]))
    assert int(state.step) == 3
    largest = max(jax.tree.leaves(state.params["model"]), key=lambda leaf: leaf.size)
    assert {s.data.size for s in largest.addressable_shards} == {largest.size // 8}


def test_heads_not_dividing_width_is_an_error_naming_both():
    with pytest.raises(ValueError, match="width 384 is not divisible by heads 5"):
        SD3Config.preset("small", heads=5)
