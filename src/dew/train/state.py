"""The train state: everything one step reads and replaces (and donates)."""

from __future__ import annotations

from typing import Any

import jax
from flax import struct


@struct.dataclass
class TrainState:
    """params: {"model": nnx.State of the backbone's Params, "condition": the CharTable's
    (empty unless the condition is in the state)}; opt_state: optax adam over params;
    ema: the objective's EMA copy (JEPA's target encoder) or None; step: int32 scalar.
    """

    step: jax.Array
    params: Any
    opt_state: Any
    ema: Any = None


def count_params(tree) -> int:
    """Number of scalars in a (possibly abstract) tree of arrays."""
    return sum(int(leaf.size) for leaf in jax.tree.leaves(tree))
