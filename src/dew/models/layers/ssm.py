"""S5: a diagonal complex state-space layer (Smith et al. 2023), run as a parallel scan.

Per state n: continuous A_n (complex), step size dt_n, zero-order-hold discretisation
Ā = exp(A·dt), B̄ = (Ā − 1)/A ⊙ B. x_k = Ā x_{k−1} + B̄ u_k, y_k = Re(C x_k) + D ⊙ u_k.
The arithmetic is complex64 with the input cast to fp32 (bf16 has no complex type), and
B̄·u and C·x are each one complex-typed matmul. Parameters: 3P (A real and imaginary
parts, log dt) + 4·P·d (complex B [P, d] and C [d, P]) + d (D).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx


class S5(nnx.Module):
    """u [B, L, d] -> y [B, L, d] (same dtype), scanning along L."""

    def __init__(
        self,
        features: int,
        state: int,
        *,
        rngs: nnx.Rngs,
        dt_min: float = 1e-3,
        dt_max: float = 1e-1,
    ):
        # S4D-Lin initialisation: A_n = −1/2 + iπn keeps every mode stable and distinct.
        self.a_real = nnx.Param(jnp.full((state,), -0.5, jnp.float32))
        self.a_imag = nnx.Param(jnp.asarray(np.pi * np.arange(state), jnp.float32))
        log_dt = jax.random.uniform(
            rngs.params(), (state,), jnp.float32, np.log(dt_min), np.log(dt_max)
        )
        self.log_dt = nnx.Param(log_dt)
        normal = lambda shape, fan_in: (
            jax.random.normal(rngs.params(), shape, jnp.float32) * (0.5 / fan_in) ** 0.5
        )
        self.b_real = nnx.Param(normal((state, features), features))
        self.b_imag = nnx.Param(normal((state, features), features))
        self.c_real = nnx.Param(normal((features, state), state))
        self.c_imag = nnx.Param(normal((features, state), state))
        self.d = nnx.Param(jnp.ones((features,), jnp.float32))

    def discretize(self) -> tuple[jax.Array, jax.Array]:
        a = jax.lax.complex(self.a_real[...], self.a_imag[...])
        a_bar = jnp.exp(a * jnp.exp(self.log_dt[...]))
        b = jax.lax.complex(self.b_real[...], self.b_imag[...])
        return a_bar, ((a_bar - 1) / a)[:, None] * b

    def __call__(self, u: jax.Array) -> jax.Array:
        a_bar, b_bar = self.discretize()
        u32 = u.astype(jnp.float32)
        bu = jnp.einsum("bld,pd->blp", u32.astype(jnp.complex64), b_bar)
        decay = jnp.broadcast_to(a_bar, bu.shape)
        _, states = jax.lax.associative_scan(_linear_recurrence, (decay, bu), axis=1)
        c = jax.lax.complex(self.c_real[...], self.c_imag[...])
        y = jnp.einsum("blp,dp->bld", states, c).real + self.d[...] * u32
        return y.astype(u.dtype)


def _linear_recurrence(left, right):
    """Compose x -> a1 x + b1 then x -> a2 x + b2 (associative)."""
    a1, b1 = left
    a2, b2 = right
    return a1 * a2, a2 * b1 + b2


class BidirectionalS5(nnx.Module):
    """S5 forward and S5 over the reversed sequence, concatenated, Dense(2d→d)."""

    def __init__(self, features: int, state: int, *, rngs: nnx.Rngs, dtype=jnp.bfloat16):
        self.forward = S5(features, state, rngs=rngs)
        self.backward = S5(features, state, rngs=rngs)
        self.merge = nnx.Linear(2 * features, features, dtype=dtype, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        ahead = self.forward(x)
        behind = jnp.flip(self.backward(jnp.flip(x, axis=1)), axis=1)
        return self.merge(jnp.concatenate([ahead, behind], axis=-1))
