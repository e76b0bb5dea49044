"""multimodal_transformer: small-preset params and GFLOP/step pinned by formula, the image
replacing the first positions, and a cpu-smoke training run on 8 simulated devices."""

import jax
import numpy as np
import pytest
from flax import nnx

from dew.models.multimodal import POOL, MultimodalConfig, MultimodalTransformer
from dew.train.mesh import MeshSpec
from dew.train.trainer import Trainer

BATCH = 8  # the small preset's batch (dew.bench.sweep.presets)


def expected_params(c: MultimodalConfig) -> int:
    """Decoder V·d + L·(4d² + 3·d·f + 2d + 128) + d; tower: patch conv p²·3·w + w, position
    table N·w, per layer 2 LNs 4w + q, k, v, o 4(w² + w) + MLP 2·w·m + m + w, post-LN 2w;
    projector RMSNorm w + Dense w·d without bias."""
    d, f, w, m = c.width, c.mlp_hidden, c.vision_width, c.vision_mlp
    decoder = c.vocab_size * d + c.depth * (4 * d * d + 3 * d * f + 2 * d + 2 * (d // c.heads)) + d
    patches = (c.image_size // c.patch) ** 2
    layer = 4 * w + 4 * (w * w + w) + 2 * w * m + m + w
    tower = c.patch**2 * 3 * w + w + patches * w + c.vision_depth * layer + 2 * w
    return decoder + tower + w + w * d


def expected_flops(c: MultimodalConfig, batch: int) -> int:
    """dot/conv FLOPs of one step (forward 2, backward 4 per weight product; attention full
    square: 12·L·B·T²·width). Decoder over S tokens with the tied head: 6·B·S·(P + V·d)
    + 12·L·B·S²·d, P = L·(4d² + 3·d·f). Tower over N patches: 6·B·N·Lv·(4w² + 2·w·m)
    + 12·Lv·B·N²·w; the patch convolution 4·B·N·p²·3·w (forward and filter gradient: the
    pixels take no gradient); the projector 6·B·(N / 4)·w·d."""
    d, L, S, w, Lv = c.width, c.depth, c.seq_len, c.vision_width, c.vision_depth
    N = (c.image_size // c.patch) ** 2
    decoder = 6 * batch * S * (L * (4 * d * d + 3 * d * c.mlp_hidden) + c.vocab_size * d)
    decoder += 12 * L * batch * S * S * d
    tower = 6 * batch * N * Lv * (4 * w * w + 2 * w * c.vision_mlp) + 12 * Lv * batch * N * N * w
    patch_conv = 4 * batch * N * c.patch**2 * 3 * w
    projector = 6 * batch * (N // POOL**2) * w * d
    return decoder + tower + patch_conv + projector


@pytest.fixture(scope="module")
def small():
    """The small preset compiled (never run) at batch 8, 512 tokens, 448 px."""
    trainer = Trainer("multimodal_transformer", preset="small", compilation_cache_dir=None)
    trainer.compile(trainer.example_batch(BATCH))
    return trainer


@pytest.mark.slow
def test_small_params_follow_the_formula(small):
    assert expected_params(small.config) == 130_655_168  # the spec's replica figure
    assert small.param_counts == {"backbone": expected_params(small.config), "condition": 0}


@pytest.mark.slow
def test_small_gflop_per_step_follows_the_formula(small):
    assert expected_flops(small.config, BATCH) == 5_193_471_098_880  # spec: 5193.471
    assert small.flops == expected_flops(small.config, BATCH)


@pytest.mark.slow
def test_small_batch_rows_start_with_256_image_tokens(small):
    batch = small.example_batch(2)
    assert small.config.image_tokens == 256
    assert (batch["tokens"][:, :256] == 50303).all()
    assert batch["tokens"].shape == (2, 513) and batch["images"].shape == (2, 448, 448, 3)


def test_image_features_replace_the_image_token_embeddings():
    config = MultimodalConfig.preset("cpu-smoke", dtype="float32")
    graphdef, params = nnx.split(MultimodalTransformer(config, rngs=nnx.Rngs(0)))
    forward = jax.jit(lambda params, t, x: nnx.merge(graphdef, params)(t, x))
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, config.vocab_size, (1, config.seq_len)).astype(np.int32)
    images = rng.uniform(-1, 1, (2, config.image_size, config.image_size, 3)).astype(np.float32)
    n = config.image_tokens
    other_ids = tokens.copy()
    other_ids[:, :n] = (other_ids[:, :n] + 1) % config.vocab_size
    base = forward(params, tokens, images[:1])
    # the ids at image positions are never read: their embeddings are replaced
    np.testing.assert_allclose(forward(params, other_ids, images[:1]), base, rtol=1e-6)
    # the image reaches every position, causally, from the first
    other_image = forward(params, tokens, images[1:])
    assert np.all(np.abs(np.asarray(other_image - base)).max(axis=-1) > 1e-4)


@pytest.mark.slow
def test_cpu_smoke_trains_three_steps_sharded_over_8_devices():
    trainer = Trainer(
        "multimodal_transformer", preset="cpu-smoke", mesh=MeshSpec(fsdp=8),
        compilation_cache_dir=None,
    )  # fmt: skip
    batch = trainer.put_batch(trainer.example_batch(8))
    state = trainer.init()
    table = state.params["model"]["decoder"]["embedding"]["embedding"][...]
    assert "fsdp" in table.sharding.spec
    assert table.addressable_shards[0].data.size == table.size // 8
    patch_before = np.asarray(state.params["model"]["vision"]["patch_embed"]["conv"]["kernel"][...])

    losses = []
    for _ in range(3):
        state, metrics = trainer.step(state, batch)
        losses.append(float(metrics["train/loss"]))
    assert np.all(np.isfinite(losses))
    assert int(state.step) == 3
    # the vision tower is trained through the decoder's loss
    patch_after = state.params["model"]["vision"]["patch_embed"]["conv"]["kernel"][...]
    assert not np.array_equal(patch_before, np.asarray(patch_after))
