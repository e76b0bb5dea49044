"""The caption condition: a character table, so nothing is downloaded.

Token 0 is padding, 1 the start token, a character c maps to 2 + (ord(c) mod 128). The
table is 130 × width drawn from N(0, 1) with seed 0. It is either a constant of the
executable (the 2026-09-02 table: not in the parameters) or a trainable leaf of the state
(the 2026-09-05 rerun: 130 · 768 = 99,840 parameters more).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from dew.config import CAPTION_WIDTH
from dew.models.layers.embeddings import Constant

TEXT_TOKENS = 77
VOCAB = 130
CAPTION = "a flower"  # every benchmark row is conditioned on it


def encode_caption(text: str, length: int = TEXT_TOKENS) -> np.ndarray:
    """Caption -> int32 ids [length]: start token, characters, zero padding."""
    ids = [1] + [2 + (ord(c) % 128) for c in text][: length - 1]
    return np.array(ids + [0] * (length - len(ids)), dtype=np.int32)


class CharTable(nnx.Module):
    """ids [B, 77] -> (embeddings [B, 77, width] in fp32, mask [B, 77] True on tokens)."""

    def __init__(self, width: int = CAPTION_WIDTH, *, in_state: bool = False, seed: int = 0):
        table = np.asarray(jax.random.normal(jax.random.key(seed), (VOCAB, width), jnp.float32))
        self.in_state = in_state
        self.table = nnx.Param(jnp.asarray(table)) if in_state else Constant(table)

    def __call__(self, ids: jax.Array) -> tuple[jax.Array, jax.Array]:
        table = self.table[...] if self.in_state else self.table()
        return jnp.take(table, ids, axis=0), ids != 0
