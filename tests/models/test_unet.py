"""UNets: unet and unet_3d against the published rows, unet_2d_condition against figures
derived by formula from its config, cpu-smoke training runs.

Compiling a small preset on CPU takes minutes on a shared 2-core host: by default only
unet's train step is compiled (the most important count: convolutions and their
gradients); unet_3d's (about 3x unet's compile time) and unet_2d_condition's are in the slow
tier (`nox -s tests-full`).
"""

import math

import jax
import pytest

from dew.models.unet import UNetConfig
from dew.models.unet_condition import UNet2DConditionConfig
from dew.telemetry.instrumentation import hlo_flops
from dew.train.mesh import MeshSpec
from dew.train.trainer import Trainer

LONG_COMPILES = pytest.mark.slow  # minutes on CPU: `nox -s tests-full` runs them
TEXT_TOKENS, TEXT_WIDTH = 77, 768


def _compiled_small(architecture: str, batch: int) -> Trainer:
    trainer = Trainer(architecture, preset="small", compilation_cache_dir=None)
    trainer.compile(trainer.example_batch(batch))  # compiled, never run
    return trainer


@pytest.fixture(scope="module")
def unet_small():
    return _compiled_small("unet", 16)


@pytest.mark.slow  # the slow tier: CI runs it (.ci/run), `nox -s tests` leaves it
def test_unet_params_match_published(unet_small):
    assert unet_small.param_counts == {"backbone": 10_159_299, "condition": 0}


@pytest.mark.slow  # the slow tier: CI runs it (.ci/run), `nox -s tests` leaves it
def test_unet_gflop_within_0_1_percent_of_published(unet_small):
    assert unet_small.flops / 1e9 == pytest.approx(646.4, rel=1e-3)


@pytest.mark.slow  # the slow tier: CI runs it (.ci/run), `nox -s tests` leaves it
def test_unet_flops_split_131_convolutions_and_the_dots(unet_small):
    # The published 646.393 to the last FLOP: 623.433 in 131 convolutions (forward, input
    # and weight gradients; the stride-2 convolutions' input gradients at their forward
    # cost) and 22.960 in the dots, attention products included.
    count = hlo_flops(unet_small.compiled.as_text())
    assert count.op_counts["convolution"] == 131
    assert count.by_kind["convolution"] / 1e9 == pytest.approx(623.433, abs=5e-4)
    assert count.by_kind["dot"] / 1e9 == pytest.approx(22.960, abs=5e-4)


@pytest.mark.slow
def test_unet_3d_params_match_published():
    trainer = Trainer("unet_3d", preset="small", compilation_cache_dir=None)
    assert trainer.param_counts == {"backbone": 11_045_699, "condition": 0}


@pytest.mark.slow
@LONG_COMPILES
def test_unet_3d_gflop_within_0_1_percent_of_published():
    assert _compiled_small("unet_3d", 4).flops / 1e9 == pytest.approx(1384.1, rel=1e-3)


# -- unet_2d_condition: no published row; the figures follow from the config ---------------


def _u2dc_layout(c: UNet2DConditionConfig):
    """(down levels, up levels) as lists of (resolution, [(c_in, c_out, attends)], resample)
    and the middle width, following the module's layout rules."""
    res, width, skips = c.image_size, c.block_channels[0], [c.block_channels[0]]
    down = []
    last = len(c.block_channels) - 1
    for i, (ch, attends) in enumerate(zip(c.block_channels, c.cross_attention, strict=True)):
        blocks = []
        for _ in range(c.layers_per_block):
            blocks.append((width, ch, attends))
            width = ch
            skips.append(ch)
        down.append((res, blocks, i < last))
        if i < last:
            skips.append(ch)
            res //= 2
    up = []
    for i, (ch, attends) in enumerate(
        zip(reversed(c.block_channels), reversed(c.cross_attention), strict=True)
    ):
        blocks = []
        for _ in range(c.layers_per_block + 1):
            blocks.append((width + skips.pop(), ch, attends))
            width = ch
        up.append((res, blocks, i < last))
        res = res * 2 if i < last else res
    return down, up


def u2dc_params(c: UNet2DConditionConfig) -> int:
    """Time MLP, conv_in; resnets (2 GroupNorms, 2 convs 3×3, the time Dense, a 1×1 skip when
    widths differ); transformer blocks (GroupNorm, 1×1 in/out, 3 affine LNs, q/k/v without
    bias + o with bias, cross q + caption k/v + o, GEGLU c→8c→…4c→c); resample convs; out."""
    conv = lambda k, i, o: k * k * i * o + o
    dense = lambda i, o: i * o + o
    emb = c.time_embed_features

    def resnet(i, o):
        return (
            2 * i
            + conv(3, i, o)
            + dense(emb, o)
            + 2 * o
            + conv(3, o, o)
            + (conv(1, i, o) if i != o else 0)
        )

    def transformer(ch):
        self_attn = 3 * ch * ch + dense(ch, ch)
        cross = ch * ch + 2 * TEXT_WIDTH * ch + dense(ch, ch)
        return (
            2 * ch
            + 2 * conv(1, ch, ch)
            + 3 * 2 * ch
            + self_attn
            + cross
            + (dense(ch, 8 * ch) + dense(4 * ch, ch))
        )

    down, up = _u2dc_layout(c)
    total = dense(c.time_features, emb) + dense(emb, emb) + conv(3, c.channels, down[0][1][0][0])
    for _, blocks, resample in down + up:
        for i, o, attends in blocks:
            total += resnet(i, o) + (transformer(o) if attends else 0)
        total += conv(3, blocks[-1][1], blocks[-1][1]) if resample else 0
    mid = c.block_channels[-1]
    total += 2 * resnet(mid, mid) + transformer(mid)
    width = up[-1][1][-1][1]
    return total + 2 * width + conv(3, width, c.channels)


def u2dc_gflop(c: UNet2DConditionConfig, batch: int) -> float:
    """A train step's convolution and matmul FLOPs: 3 passes (forward, input and weight
    gradients) for everything but conv_in, the time MLP's first Dense and the caption keys and
    values (no input gradient: 2 passes). A stride-2 convolution counts 3 passes at its
    output resolution (its input gradient at the forward's cost). Attention: 2 products
    forward, 4 backward, of 2·B·N·S·c (S = N self, 77 cross)."""
    conv = lambda res, k, i, o, passes=3: passes * 2 * batch * res * res * k * k * i * o
    mm = lambda rows, i, o, passes=3: passes * 2 * rows * i * o
    emb = c.time_embed_features

    def resnet(res, i, o):
        return (
            conv(res, 3, i, o) + conv(res, 3, o, o) + mm(batch, emb, o)
            + (conv(res, 1, i, o) if i != o else 0)
        )  # fmt: skip

    def transformer(res, ch):
        n = res * res
        rows = batch * n
        dense = 2 * conv(res, 1, ch, ch) + mm(rows, ch, 4 * ch) + mm(rows, ch, 2 * ch)
        dense += mm(batch * TEXT_TOKENS, TEXT_WIDTH, 2 * ch, 2) + mm(rows, ch, 8 * ch)
        dense += mm(rows, 4 * ch, ch)
        attention = 3 * 4 * batch * n * (n + TEXT_TOKENS) * ch
        return dense + attention

    down, up = _u2dc_layout(c)
    total = mm(batch, c.time_features, emb, 2) + mm(batch, emb, emb)
    total += conv(c.image_size, 3, c.channels, c.block_channels[0], 2)
    for res, blocks, resample in down:
        for i, o, attends in blocks:
            total += resnet(res, i, o) + (transformer(res, o) if attends else 0)
        total += conv(res // 2, 3, blocks[-1][1], blocks[-1][1]) if resample else 0
    mid, mid_res = c.block_channels[-1], down[-1][0]
    total += 2 * resnet(mid_res, mid, mid) + transformer(mid_res, mid)
    for res, blocks, resample in up:
        for i, o, attends in blocks:
            total += resnet(res, i, o) + (transformer(res, o) if attends else 0)
        total += conv(res * 2, 3, blocks[-1][1], blocks[-1][1]) if resample else 0
    return (total + conv(c.image_size, 3, up[-1][1][-1][1], c.channels)) / 1e9


@pytest.mark.slow
def test_unet_2d_condition_params_follow_the_formula_and_the_replica_figure():
    expected = u2dc_params(UNet2DConditionConfig.preset("small"))
    assert expected == 13_699_204  # the spec's replica figure
    trainer = Trainer("unet_2d_condition", preset="small", compilation_cache_dir=None)
    assert trainer.param_counts == {"backbone": expected, "condition": 0}


@pytest.mark.slow
@LONG_COMPILES
def test_unet_2d_condition_gflop_follows_the_formula_and_the_replica_figure():
    expected = u2dc_gflop(UNet2DConditionConfig.preset("small"), batch=4)
    assert expected == pytest.approx(62.325, rel=1e-4)  # the spec's replica figure
    trainer = _compiled_small("unet_2d_condition", 4)
    assert trainer.flops / 1e9 == pytest.approx(expected, rel=1e-3)


@pytest.mark.slow
@pytest.mark.parametrize("architecture", ["unet", "unet_3d", "unet_2d_condition"])
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


def test_attention_heads_need_one_entry_per_level():
    with pytest.raises(ValueError, match=r"attention_heads \(4,\) needs one entry per level"):
        UNetConfig.preset("small", attention_heads=(4,))
