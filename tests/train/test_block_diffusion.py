"""Block-diffusion corruption and canvas loss: the rate follows t, the prompt is untouched,
only the scored canvas counts."""

import jax
import jax.numpy as jnp
import numpy as np

from dew.train.objectives.block_diffusion import (
    T_MAX,
    T_MIN,
    canvas_cross_entropy,
    corrupt,
    sample_t,
)

VOCAB, PROMPT, ROW = 1000, 16, 4096


def test_replacement_rate_follows_t_and_the_prompt_is_never_touched():
    t = jnp.array([0.0, 0.1, 0.5, 0.9, 1.0])
    tokens = jnp.tile(jnp.arange(ROW, dtype=jnp.int32) % VOCAB, (t.shape[0], 1))
    noisy, replaced = corrupt(jax.random.key(0), tokens, PROMPT, t, VOCAB)
    noisy, replaced, tokens = map(np.asarray, (noisy, replaced, tokens))

    np.testing.assert_array_equal(noisy[:, :PROMPT], tokens[:, :PROMPT])
    assert not replaced[:, :PROMPT].any()
    response = ROW - PROMPT
    rate = replaced[:, PROMPT:].mean(axis=1)
    tolerance = 4 * np.sqrt(0.25 / response)  # 4 standard deviations of a Bernoulli mean
    np.testing.assert_allclose(rate, np.asarray(t), atol=tolerance)
    # replaced tokens are uniform ids: they differ from the clean one with probability 1 - 1/V
    changed = (noisy != tokens)[:, PROMPT:].mean(axis=1)
    np.testing.assert_allclose(changed, np.asarray(t) * (1 - 1 / VOCAB), atol=tolerance)
    assert (noisy[replaced] >= 0).all() and (noisy[replaced] < VOCAB).all()
    np.testing.assert_array_equal(noisy[~replaced], tokens[~replaced])


def test_t_is_drawn_per_row_inside_its_bounds():
    t = np.asarray(sample_t(jax.random.key(1), 10_000))
    assert t.shape == (10_000,)
    assert T_MIN <= t.min() and t.max() < T_MAX
    assert abs(t.mean() - 0.5) < 0.02


def test_only_the_scored_canvas_enters_the_loss():
    canvas, vocab = 3, 5
    targets = jnp.array([[0, 1, 2, 3, 4, 0]])
    right = 20.0 * jax.nn.one_hot(targets, vocab)
    wrong = 20.0 * jax.nn.one_hot((targets + 1) % vocab, vocab)
    first_right = jnp.concatenate([right[:, :canvas], wrong[:, canvas:]], axis=1)
    assert float(canvas_cross_entropy(first_right, targets, jnp.array([0]), canvas)) < 1e-6
    assert float(canvas_cross_entropy(first_right, targets, jnp.array([1]), canvas)) > 19
