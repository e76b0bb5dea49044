"""Embeddings without learned state: Fourier and sinusoidal features, sin-cos positions,
and `Constant`, the array an executable holds outside the state."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np


@dataclasses.dataclass(frozen=True, eq=False)
class Constant:
    """A numpy array baked into the executable as a constant, never part of the state.

    NNX keeps non-array attributes in the graph definition, which must be hashable:
    identity hashing keeps a large array out of every comparison.
    """

    value: np.ndarray

    def __call__(self, dtype=None) -> jax.Array:
        return jnp.asarray(self.value, dtype=dtype)


def fourier_features(t: jax.Array, frequencies: Constant) -> jax.Array:
    """Random Fourier features [B, width] of a scalar per sample, cos and sin halves."""
    angles = 2 * jnp.pi * t.astype(jnp.float32)[:, None] * frequencies()[None]
    return jnp.concatenate([jnp.cos(angles), jnp.sin(angles)], axis=-1)


def fourier_frequencies(width: int, scale: float = 16.0, seed: int = 0) -> Constant:
    """Fixed Gaussian frequencies (width // 2 of them), drawn once: no parameters."""
    return Constant(np.random.default_rng(seed).normal(0, scale, width // 2).astype(np.float32))


def sinusoidal(t: jax.Array, width: int, *, cos_first: bool = False, max_period: float = 1e4):
    """The transformer timestep embedding [B, width] (sin half first unless `cos_first`)."""
    half = width // 2
    freqs = jnp.exp(-jnp.log(max_period) * jnp.arange(half, dtype=jnp.float32) / half)
    angles = t.astype(jnp.float32)[:, None] * freqs[None]
    sin, cos = jnp.sin(angles), jnp.cos(angles)
    return jnp.concatenate([cos, sin] if cos_first else [sin, cos], axis=-1)


def sincos_2d(height: int, width: int, features: int) -> np.ndarray:
    """Fixed 2-D sin-cos positions [height·width, features] (MAE / DiT layout)."""

    def one_axis(positions: np.ndarray, dim: int) -> np.ndarray:
        omega = 1.0 / 10000 ** (np.arange(dim // 2, dtype=np.float64) / (dim / 2))
        angles = positions.reshape(-1)[:, None] * omega[None]
        return np.concatenate([np.sin(angles), np.cos(angles)], axis=1)

    rows, cols = np.meshgrid(np.arange(height), np.arange(width), indexing="ij")
    table = np.concatenate([one_axis(rows, features // 2), one_axis(cols, features // 2)], axis=1)
    return table.astype(np.float32)
