"""Pydantic bases for every config in dew: plain, frozen data with named presets.

`ModelConfig` is the contract every model config keeps (dew.models): the compute dtype and
the attention implementation, the caption table's width, and the sample layout facts that
code outside a family reads (`frames`, `seq_len`: None where they do not apply). Nothing
here imports jax: a config is data.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, Self, get_args

import pydantic

Dtype = Literal["bfloat16", "float32"]
"""A model's compute dtype (parameters, optimizer state, losses and softmax stay float32)."""
DTYPES: tuple[str, ...] = get_args(Dtype)

AttentionImpl = Literal["xla", "cudnn", "auto"]
"""`xla`: the published path; `cudnn`: fused attention; `auto`: cudnn where it applies."""
ATTENTION_IMPLS: tuple[str, ...] = get_args(AttentionImpl)

CAPTION_WIDTH = 768
"""The caption table's default width (CLIP-L's token width)."""


def check_divisible(name: str, value: int, by_name: str, by: int) -> None:
    """ValueError "`name` `value` is not divisible by `by_name` `by`" unless by divides value."""
    if value % by:
        raise ValueError(f"{name} {value} is not divisible by {by_name} {by}")


class Config(pydantic.BaseModel):
    """Frozen and strict: an unknown field is an error, not a silently ignored typo."""

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")


class PresetConfig(Config):
    """A config with named presets ("small", "cpu-smoke") kept beside its fields.

    Subclasses set `presets = {"small": {...}, "cpu-smoke": {...}}`: field values that
    differ from the defaults.
    """

    presets: ClassVar[dict[str, dict[str, Any]]] = {}

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> Self:
        if name not in cls.presets:
            valid = ", ".join(sorted(cls.presets)) or "none"
            raise ValueError(f"{cls.__name__} has no preset {name!r}; valid: {valid}")
        return cls(**{**cls.presets[name], **overrides})


class ModelConfig(PresetConfig):
    """What every architecture's config holds and what code outside its family may read.

    `objective`: the name of the objective that trains it (dew.train.objectives).
    `text_width`: width of the caption table the Trainer builds for every model, whether
    the model reads a caption or not. `frames` (clips) and `seq_len` (token rows) describe
    the sample: None here, and a family they apply to redeclares them as positive ints.
    Sizes of a family (width, depth, heads, patch, ...) are `pydantic.PositiveInt`: zero
    or a negative size is a ValidationError naming the field.
    """

    objective: ClassVar[str]

    dtype: Dtype = "bfloat16"
    attention_impl: AttentionImpl = "xla"
    text_width: pydantic.PositiveInt = CAPTION_WIDTH
    frames: None = None
    seq_len: None = None
