"""Losses only: each objective turns (model, batch, rng) into a scalar fp32 loss.

An objective is a class registered under the name configs use (`objective: ClassVar[str]`
on a model config). Adding one is adding a file to this package:

    @register_objective("flow")
    class FlowMatching(Objective):
        uses_condition = True
        def example_batch(self, batch_size): ...
        def loss(self, model, batch, rng, *, condition, ema): ...

Every module of this package is imported on first lookup, so registering is all it takes.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any, ClassVar

import jax
import numpy as np

from dew.config import ModelConfig
from dew.models.layers.text_condition import CAPTION, TEXT_TOKENS, encode_caption

_REGISTRY: dict[str, type[Objective]] = {}


class Objective:
    """One training objective for one model config.

    `condition`: the Trainer's CharTable (width `config.text_width`), passed
    to every objective; `uses_condition` says whether this one reads it. `init_ema` /
    `update_ema`: objectives that keep an EMA copy of (part of) the model return it from
    `init_ema`; the Trainer keeps it in the state, sharded like the parameters, and calls
    `update_ema` after each update.
    """

    name: ClassVar[str] = ""
    uses_condition: ClassVar[bool] = False

    def __init__(self, config: ModelConfig):
        self.config = config

    def example_batch(self, batch_size: int) -> dict[str, np.ndarray]:
        """One host batch, built with numpy default_rng(0): the benchmark reuses it every step."""
        raise NotImplementedError

    def loss(self, model, batch, rng: jax.Array, *, condition=None, ema=None):
        """-> (scalar fp32 loss, dict of extra scalar metrics)."""
        raise NotImplementedError

    def init_ema(self, model_params) -> Any:
        return None

    def update_ema(self, ema, model_params, step: jax.Array) -> Any:
        return ema


def register_objective(name: str):
    def decorate(cls: type[Objective]) -> type[Objective]:
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise ValueError(f"objective {name!r} is registered twice")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return decorate


def _import_objectives() -> None:
    import dew.train.objectives as package

    for info in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{info.name}")


def objective_names() -> list[str]:
    _import_objectives()
    return sorted(_REGISTRY)


def get_objective(name: str) -> type[Objective]:
    _import_objectives()
    if name not in _REGISTRY:
        raise ValueError(f"unknown objective {name!r}; valid: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name]


# Helpers shared by the pixel/latent objectives (EDM, flow matching).


def sample_shape(config: ModelConfig) -> tuple[int, ...]:
    """[H, W, C] of an image config or, where `config.frames` is set (video), [T, H, W, C]."""
    size, channels, frames = config.image_size, config.channels, config.frames
    return (size, size, channels) if frames is None else (frames, size, size, channels)


def example_images(config, batch_size: int) -> dict[str, np.ndarray]:
    """Images float32 in 0-255 and the benchmark caption's ids for every row."""
    rng = np.random.default_rng(0)
    images = rng.uniform(0, 255, (batch_size, *sample_shape(config))).astype(np.float32)
    ids = np.broadcast_to(encode_caption(CAPTION), (batch_size, TEXT_TOKENS)).copy()
    return {"images": images, "text_ids": ids}


def to_unit_range(images: jax.Array) -> jax.Array:
    """Pixels 0-255 -> [-1, 1] in fp32."""
    return images.astype(np.float32) / 127.5 - 1.0


def per_sample(values: jax.Array, like: jax.Array) -> jax.Array:
    """[B] -> [B, 1, ..., 1] broadcasting against `like`."""
    return values.reshape(values.shape[0], *([1] * (like.ndim - 1)))
