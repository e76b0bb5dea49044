"""Pydantic base for every config in dew: plain, frozen data with named presets."""

from __future__ import annotations

from typing import Any, ClassVar, Self

import pydantic


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
