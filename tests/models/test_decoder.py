"""causal_transformer and its MoE case: counts, GFLOP, chunked head, routing."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from dew.bench.sweep.presets import MOE_CASES
from dew.models.decoder import CausalTransformer, CausalTransformerConfig, MixtureOfExperts
from dew.train.trainer import Trainer

DENSE_PARAMS, DENSE_GFLOP = 66_950_784, 3406.4
MOE_PARAMS = 116_502_144


def param_count(config: CausalTransformerConfig) -> int:
    model = nnx.eval_shape(lambda: CausalTransformer(config, rngs=nnx.Rngs(0)))
    return sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param)))


def test_small_params_match_published_and_the_formula():
    c = CausalTransformerConfig.preset("small")
    v, d, n, f = c.vocab_size, c.width, c.depth, c.mlp_hidden
    assert param_count(c) == DENSE_PARAMS == v * d + n * (4 * d * d + 3 * d * f + 2 * d + 128) + d


def test_moe_params_follow_from_the_dense_count():
    dense = CausalTransformerConfig.preset("small")
    moe = CausalTransformerConfig.preset("small", **MOE_CASES["causal_transformer"])
    sparse_layers = sum(moe.is_sparse(i) for i in range(moe.depth))
    assert sparse_layers == 1
    extra = (moe.experts - 1) * 3 * moe.width * moe.mlp_hidden + moe.width * moe.experts
    assert param_count(moe) == param_count(dense) + sparse_layers * extra == MOE_PARAMS


def test_small_gflop_matches_published():
    trainer = Trainer("causal_transformer", preset="small", compilation_cache_dir=None)
    assert trainer.param_counts == {"backbone": DENSE_PARAMS, "condition": 0}
    trainer.compile(trainer.example_batch(16))  # compiled, not run
    assert trainer.flops / 1e9 == pytest.approx(DENSE_GFLOP, rel=1e-3)


# A config whose vocabulary head dominates memory, small enough to run on CPU.
HEAD_HEAVY = dict(vocab_size=4096, width=32, depth=1, heads=2, mlp_hidden=64, seq_len=64)


def static_peak(analysis) -> int:
    # XLA's peak: arguments + outputs + temporaries - donated (aliased) buffers. The CPU
    # backend's own peak_memory_in_bytes leaves the temporaries out, where the logits live.
    return (
        analysis.argument_size_in_bytes
        + analysis.output_size_in_bytes
        + analysis.temp_size_in_bytes
        - analysis.alias_size_in_bytes
    )


@pytest.mark.slow  # the slow tier: CI runs it (.ci/run), `nox -s tests` leaves it
def test_head_chunks_keep_the_loss_and_lower_the_peak():
    losses, peaks = [], []
    for chunks in (1, 2, 4, 8):
        config = CausalTransformerConfig(**HEAD_HEAVY, head_chunks=chunks)
        trainer = Trainer("causal_transformer", config, compilation_cache_dir=None)
        batch = trainer.example_batch(8)
        trainer.compile(batch)
        peaks.append(static_peak(trainer.compiled.memory_analysis()))
        _, metrics = trainer.step(trainer.init(), batch)
        losses.append(float(metrics["train/loss"]))
    np.testing.assert_allclose(losses, losses[0], rtol=1e-5)
    assert peaks == sorted(peaks, reverse=True) and peaks[-1] < peaks[0]


def test_head_chunks_must_divide_the_sequence():
    with pytest.raises(ValueError, match="seq_len 16 is not divisible by head_chunks 3"):
        CausalTransformerConfig.preset("cpu-smoke", head_chunks=3)


def test_heads_not_dividing_width_is_an_error_naming_both():
    with pytest.raises(ValueError, match="width 768 is not divisible by heads 7"):
        CausalTransformerConfig(heads=7)


@pytest.fixture(scope="module")
def moe():
    return MixtureOfExperts(16, 24, 4, 2, rngs=nnx.Rngs(0), dtype=jnp.float32)


def test_every_token_reaches_exactly_top_k_distinct_experts(moe):
    tokens = jax.random.normal(jax.random.key(1), (64, 16))
    weights, experts = moe.route(tokens)
    assert experts.shape == (64, 2) and weights.shape == (64, 2)
    assert (experts[:, 0] != experts[:, 1]).all()
    np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-6)
    assert (weights > 0).all()
    # the chosen experts are the router's two most probable ones
    probs = jax.nn.softmax(moe.router(tokens), axis=-1)
    np.testing.assert_array_equal(np.sort(experts, -1), np.sort(np.argsort(probs, -1)[:, -2:], -1))


def test_grouped_dispatch_equals_a_per_expert_loop(moe):
    x = jax.random.normal(jax.random.key(2), (2, 8, 16))
    tokens = x.reshape(-1, 16)
    weights, experts = moe.route(tokens)
    expected = np.zeros_like(tokens)
    for e in range(4):
        h = jax.nn.silu(tokens @ moe.gate[...][e]) * (tokens @ moe.up[...][e])
        out = h @ moe.down[...][e]
        w = (weights * (experts == e)).sum(-1, keepdims=True)
        expected += np.asarray(w * out)
    np.testing.assert_allclose(moe(x).reshape(-1, 16), expected, rtol=1e-4, atol=1e-5)
