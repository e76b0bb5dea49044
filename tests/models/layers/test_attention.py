"""attention() against jax.nn.dot_product_attention: plain, masked and causal."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dew.models.layers.attention import attention, key_mask

B, H, D = 2, 3, 16


def qkv(t: int, s: int, dtype=jnp.float32):
    kq, kk, kv = jax.random.split(jax.random.key(0), 3)
    q = jax.random.normal(kq, (B, t, H, D), dtype)
    k = jax.random.normal(kk, (B, s, H, D), dtype)
    v = jax.random.normal(kv, (B, s, H, D), dtype)
    return q, k, v


def reference(q, k, v, mask=None):
    return jax.nn.dot_product_attention(q, k, v, mask=mask, implementation="xla")


@pytest.mark.parametrize(("t", "s"), [(7, 7), (5, 11), (11, 5)])
def test_matches_the_reference_without_a_mask(t, s):
    q, k, v = qkv(t, s)
    np.testing.assert_allclose(attention(q, k, v), reference(q, k, v), rtol=1e-5, atol=1e-5)


def test_key_mask_hides_the_padding_keys_as_the_reference_does():
    q, k, v = qkv(4, 9)
    keep = jnp.arange(9)[None] < jnp.array([[6], [9]])  # row 0: the last 3 keys are padding
    out = attention(q, k, v, mask=key_mask(keep))
    np.testing.assert_allclose(out, reference(q, k, v, key_mask(keep)), rtol=1e-5, atol=1e-5)
    # the padding keys' values do not reach the output
    v_changed = v.at[0, 6:].add(100.0)
    np.testing.assert_allclose(attention(q, k, v_changed, mask=key_mask(keep)), out, atol=1e-5)


def test_causal_with_as_many_queries_as_keys_is_the_references_causal():
    q, k, v = qkv(8, 8)
    expected = jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation="xla")
    np.testing.assert_allclose(attention(q, k, v, causal=True), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("t", "s"), [(3, 8), (1, 8)])
def test_causal_with_fewer_queries_aligns_them_to_the_last_keys(t, s):
    # Query i of T is position i + S - T: it sees keys 0 .. i + S - T (a kv cache of S - T).
    q, k, v = qkv(t, s)
    end_aligned = jnp.arange(s)[None, :] <= jnp.arange(t)[:, None] + (s - t)
    expected = reference(q, k, v, end_aligned[None, None])
    out = attention(q, k, v, causal=True)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    # the same rows as causal attention over the full sequence with those queries last
    q_full = jnp.concatenate([qkv(s - t, s)[0], q], axis=1)
    full = attention(q_full, k, v, causal=True)
    np.testing.assert_allclose(out, full[:, s - t :], rtol=1e-5, atol=1e-5)


def test_causal_and_a_mask_combine():
    q, k, v = qkv(6, 6)
    keep = jnp.array([[True] * 4 + [False] * 2, [True] * 6])
    causal = jnp.tril(jnp.ones((6, 6), bool))
    expected = reference(q, k, v, jnp.logical_and(key_mask(keep), causal))
    out = attention(q, k, v, mask=key_mask(keep), causal=True)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_bfloat16_in_bfloat16_out_close_to_float32():
    q, k, v = qkv(5, 7)
    out = attention(*(a.astype(jnp.bfloat16) for a in (q, k, v)))
    assert out.dtype == jnp.bfloat16
    np.testing.assert_allclose(out.astype(jnp.float32), reference(q, k, v), atol=5e-2)


def test_cudnn_refuses_causal_with_fewer_queries_than_keys():
    # jax.nn.dot_product_attention's causal mask starts at key 0: a different convention.
    q, k, v = qkv(3, 8, jnp.bfloat16)
    with pytest.raises(ValueError, match="causal with 3 queries but 8 keys"):
        attention(q, k, v, causal=True, impl="cudnn")


def test_unknown_impl_is_an_error():
    with pytest.raises(ValueError, match="unknown attention_impl 'flash'"):
        attention(*qkv(2, 2), impl="flash")
