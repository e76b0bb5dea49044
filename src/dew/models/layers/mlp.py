"""Feed-forward blocks: plain MLP, GEGLU and SwiGLU."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from flax import nnx

gelu_exact = lambda x: jax.nn.gelu(x, approximate=False)
gelu_tanh = lambda x: jax.nn.gelu(x, approximate=True)


class Mlp(nnx.Module):
    """Dense(d→hidden) → activation → Dense(hidden→d)."""

    def __init__(
        self,
        features: int,
        hidden: int,
        *,
        rngs: nnx.Rngs,
        activation: Callable[[jax.Array], jax.Array] = gelu_exact,
        use_bias: bool = True,
        out_features: int | None = None,
        dtype=jnp.bfloat16,
    ):
        self.activation = activation
        self.up = nnx.Linear(features, hidden, use_bias=use_bias, dtype=dtype, rngs=rngs)
        self.down = nnx.Linear(
            hidden, out_features or features, use_bias=use_bias, dtype=dtype, rngs=rngs
        )

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.down(self.activation(self.up(x)))


class GeGLU(nnx.Module):
    """Dense(d→2·hidden) split into (a, g), a · gelu(g), Dense(hidden→d)."""

    def __init__(
        self,
        features: int,
        hidden: int,
        *,
        rngs: nnx.Rngs,
        activation: Callable[[jax.Array], jax.Array] = gelu_exact,
        use_bias: bool = True,
        dtype=jnp.bfloat16,
    ):
        self.activation = activation
        self.proj = nnx.Linear(features, 2 * hidden, use_bias=use_bias, dtype=dtype, rngs=rngs)
        self.down = nnx.Linear(hidden, features, use_bias=use_bias, dtype=dtype, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        a, g = jnp.split(self.proj(x), 2, axis=-1)
        return self.down(a * self.activation(g))


class SwiGLU(nnx.Module):
    """silu(gate(x)) · up(x) → down; no biases (the decoder's feed-forward)."""

    def __init__(
        self,
        features: int,
        hidden: int,
        *,
        rngs: nnx.Rngs,
        activation: Callable[[jax.Array], jax.Array] = jax.nn.silu,
        use_bias: bool = False,
        dtype=jnp.bfloat16,
    ):
        self.activation = activation
        dense = lambda i, o: nnx.Linear(i, o, use_bias=use_bias, dtype=dtype, rngs=rngs)
        self.gate, self.up, self.down = (
            dense(features, hidden),
            dense(features, hidden),
            dense(hidden, features),
        )

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.down(self.activation(self.gate(x)) * self.up(x))
