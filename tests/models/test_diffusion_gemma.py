"""diffusion_gemma: small-preset params and GFLOP/step pinned by formula, canvas visibility,
and a cpu-smoke training run on 8 simulated devices."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from dew.models.diffusion_gemma import DiffusionGemma, DiffusionGemmaConfig, canvas_mask
from dew.train.mesh import MeshSpec
from dew.train.trainer import Trainer

BATCH = 4  # the small preset's batch (dew.bench.sweep.presets)


def expected_params(c: DiffusionGemmaConfig) -> int:
    """The decoder's V·d + L·(4d² + 3·d·f + 2d + 128) + d, one scalar per layer, and the
    self-conditioning MLP: RMSNorm d + gate, up, down 3·d·f_sc without biases."""
    d, f = c.width, c.mlp_hidden
    decoder = c.vocab_size * d + c.depth * (4 * d * d + 3 * d * f + 2 * d + 2 * (d // c.heads)) + d
    return decoder + c.depth + d + 3 * d * c.self_condition_hidden


def expected_flops(c: DiffusionGemmaConfig, batch: int) -> int:
    """dot FLOPs of one step (forward 2, backward 4 per weight product; attention full square).

    P = L·(4d² + 3·d·f) layer weights, H = V·d the tied head, M = 3·d·f_sc, S the row, R the
    response. Causal pass with grad over S tokens: 6·B·S·(P + H) + 12·L·B·S²·d. Each
    denoising pass runs R tokens against S + R keys; its input adds probs·E (B·R·H) and M.
    First pass, no gradient: 2·B·R·(P + 2H + M) + 4·L·B·R·(S + R)·d. Second pass, with
    gradient (probs·E: forward and the table's gradient only, the probs are constant):
    6·B·R·(P + H + M) + 4·B·R·H + 12·L·B·R·(S + R)·d.
    """
    d, L, S = c.width, c.depth, c.seq_len
    R = c.canvases * c.canvas
    P, H, M = (
        L * (4 * d * d + 3 * d * c.mlp_hidden),
        c.vocab_size * d,
        3 * d * c.self_condition_hidden,
    )
    causal = 6 * batch * S * (P + H) + 12 * L * batch * S * S * d
    first = 2 * batch * R * (P + 2 * H + M) + 4 * L * batch * R * (S + R) * d
    second = 6 * batch * R * (P + H + M) + 4 * batch * R * H + 12 * L * batch * R * (S + R) * d
    return causal + first + second


@pytest.fixture(scope="module")
def small():
    """The small preset compiled (never run) at batch 4, 512 tokens."""
    trainer = Trainer("diffusion_gemma", preset="small", compilation_cache_dir=None)
    trainer.compile(trainer.example_batch(BATCH))
    return trainer


@pytest.mark.slow
def test_small_params_follow_the_formula(small):
    assert expected_params(small.config) == 74_029_443  # the spec's replica figure
    assert small.param_counts == {"backbone": expected_params(small.config), "condition": 0}


@pytest.mark.slow
def test_small_gflop_per_step_follows_the_formula(small):
    assert expected_flops(small.config, BATCH) == 1_724_362_260_480  # spec: 1724.362
    assert small.flops == expected_flops(small.config, BATCH)


def test_canvas_mask_shows_prompt_earlier_canvases_and_own_canvas():
    mask = np.asarray(canvas_mask(prompt=3, canvas=2, canvases=2))
    # keys: 3 prompt + 4 clean response (the cache), then the 4 noisy response tokens
    first = [1, 1, 1, 0, 0, 0, 0] + [1, 1, 0, 0]
    second = [1, 1, 1, 1, 1, 0, 0] + [0, 0, 1, 1]
    np.testing.assert_array_equal(mask, np.array([first, first, second, second], bool))


def test_denoising_a_canvas_ignores_the_clean_canvases_from_its_own_on():
    config = DiffusionGemmaConfig.preset("cpu-smoke", dtype="float32")
    graphdef, params = nnx.split(DiffusionGemma(config, rngs=nnx.Rngs(0)))

    @jax.jit
    def denoised(params, clean):
        model = nnx.merge(graphdef, params)
        noisy = jnp.zeros((1, config.seq_len - config.prompt), jnp.int32)
        zero = jnp.zeros((*noisy.shape, config.vocab_size))
        return model.denoise(noisy, zero, model.encode(clean)[1])

    rng = np.random.default_rng(0)
    clean = rng.integers(0, config.vocab_size, (1, config.seq_len)).astype(np.int32)
    altered = clean.copy()
    altered[:, config.prompt :] = rng.integers(0, config.vocab_size, (1, 2 * config.canvas))
    a, b = denoised(params, clean), denoised(params, altered)
    n = config.canvas
    np.testing.assert_allclose(a[:, :n], b[:, :n], rtol=1e-5, atol=1e-5)  # canvas 0: prompt only
    assert not np.allclose(a[:, n:], b[:, n:], atol=1e-3)  # canvas 1 sees clean canvas 0


@pytest.mark.slow
def test_cpu_smoke_trains_three_steps_sharded_over_8_devices():
    trainer = Trainer(
        "diffusion_gemma", preset="cpu-smoke", mesh=MeshSpec(fsdp=8), compilation_cache_dir=None
    )
    batch = trainer.put_batch(trainer.example_batch(8))
    state = trainer.init()
    table = state.params["model"]["decoder"]["embedding"]["embedding"][...]
    assert "fsdp" in table.sharding.spec
    assert table.addressable_shards[0].data.size == table.size // 8
    scalars_before = np.asarray(state.params["model"]["layer_scalars"][...])

    losses = []
    for _ in range(3):
        state, metrics = trainer.step(state, batch)
        losses.append(float(metrics["train/loss"]))
        assert np.isfinite(float(metrics["train/canvas_loss"]))
    assert np.all(np.isfinite(losses))
    assert int(state.step) == 3
    # the per-layer scalars are trained, not constants
    assert not np.array_equal(
        scalars_before, np.asarray(state.params["model"]["layer_scalars"][...])
    )
