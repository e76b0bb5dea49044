"""The objectives registry and the chunked LM head's loss and gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dew.train.objectives import get_objective, objective_names
from dew.train.objectives.lm import chunked_cross_entropy


def test_registry_holds_this_lanes_objectives():
    assert {"edm", "lm"} <= set(objective_names())
    assert get_objective("edm").uses_condition and not get_objective("lm").uses_condition


def test_unknown_objective_lists_the_valid_ones():
    with pytest.raises(ValueError, match="unknown objective 'nope'; valid: .*edm.*lm"):
        get_objective("nope")


def full_cross_entropy(hidden, table, targets):
    logits = hidden.astype(jnp.float32) @ table.T
    picked = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    return (jax.nn.logsumexp(logits, axis=-1) - picked).mean()


@pytest.mark.parametrize("chunks", [1, 2, 4])
def test_chunked_head_matches_the_full_softmax_in_value_and_gradients(chunks):
    keys = jax.random.split(jax.random.key(0), 3)
    hidden = jax.random.normal(keys[0], (2, 8, 16), jnp.float32)
    table = jax.random.normal(keys[1], (40, 16), jnp.float32) * 0.3
    targets = jax.random.randint(keys[2], (2, 8), 0, 40)
    chunked = lambda h, t: chunked_cross_entropy(h, t, targets, chunks) * 3.0
    full = lambda h, t: full_cross_entropy(h, t, targets) * 3.0
    np.testing.assert_allclose(chunked(hidden, table), full(hidden, table), rtol=1e-6)
    for ours, reference in zip(
        jax.grad(chunked, argnums=(0, 1))(hidden, table),
        jax.grad(full, argnums=(0, 1))(hidden, table),
        strict=True,
    ):
        np.testing.assert_allclose(ours, reference, rtol=1e-5, atol=1e-7)


def test_chunked_head_returns_the_hidden_gradient_in_its_dtype():
    hidden = jnp.ones((1, 4, 8), jnp.bfloat16)
    grad = jax.grad(lambda h: chunked_cross_entropy(h, jnp.eye(8), jnp.zeros((1, 4), int), 2))
    assert grad(hidden).dtype == jnp.bfloat16


def test_chunks_not_dividing_the_sequence_is_an_error():
    with pytest.raises(ValueError, match="head_chunks 3 does not divide the sequence 8"):
        chunked_cross_entropy(jnp.ones((1, 8, 4)), jnp.ones((5, 4)), jnp.zeros((1, 8), int), 3)
