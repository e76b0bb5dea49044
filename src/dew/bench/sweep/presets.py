"""The step benchmark's presets as plain data: which cases each preset runs.

A `Case` is one row of the table: an architecture, the batch it trains on and the
per-case settings that tell two rows of one architecture apart (head_chunks, MoE,
attention_impl, model-config overrides). The model's own geometry (image size, frames,
sequence length) lives in its config's named preset, which has the same name as the
benchmark preset ("small" or "cpu-smoke"); the batch lives here because it is the
benchmark's choice, not the model's.

`--cases` on the command line gives a list of objects with Case fields; `merge_cases`
fills what an object leaves out from the preset's case of the same architecture.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any, Literal

import pydantic

from dew.bench.common.cli import one_line
from dew.bench.record.schema import StepRow
from dew.config import AttentionImpl, Config

# Registry entries that never get a row: they train inside another architecture's step.
NO_STEP_OF_THEIR_OWN = {"jepa_predictor": "trains inside jepa_encoder and jepa_video_encoder"}

# What `moe: true` means per architecture: the model-config fields of its MoE case. A
# benchmark notion (which variant the table times), so it lives here, not in the model.
MOE_CASES: dict[str, dict[str, Any]] = {
    "causal_transformer": {"experts": 8, "top_k": 2, "moe_every": 2},  # top-2 of 8, every 2nd
}


class Case(Config):
    """One benchmark row. None means "the model config's own default"."""

    architecture: str
    batch: int = pydantic.Field(ge=1)
    head_chunks: int | None = pydantic.Field(default=None, ge=1)
    attention_impl: AttentionImpl | None = None
    moe: bool = False
    condition_in_state: bool | None = None
    model: dict[str, Any] = pydantic.Field(
        default_factory=dict, description="overrides of the model config's fields"
    )
    xla_preallocate: bool | None = pydantic.Field(
        default=None,
        description="XLA_PYTHON_CLIENT_PREALLOCATE in this case's own process, set there "
        "before its backend starts (None: the run's environment decides); the row says "
        "which setting ran (StepRow.xla_preallocate)",
    )

    def row_fields(self) -> dict[str, Any]:
        """The StepRow fields that say which case a row is (its identity, no figures)."""
        extra: dict[str, Any] = {"batch": self.batch}
        if self.moe:
            extra["moe"] = True
        if self.condition_in_state is not None:
            extra["condition_in_state"] = self.condition_in_state
        for name, value in sorted(self.model.items()):
            scalar = value is None or isinstance(value, str | int | float | bool)
            extra[f"model.{name}"] = value if scalar else json.dumps(value)
        return {
            "architecture": self.architecture,
            "head_chunks": self.head_chunks,
            "attention_impl": self.attention_impl,
            "case": extra,
        }

    def key(self) -> tuple:
        """The identity its row will have (StepRow.key): what --resume matches on."""
        return StepRow(**self.row_fields(), status="ok").key()

    def label(self) -> str:
        return StepRow(**self.row_fields(), status="ok").label()

    def model_overrides(self, config_fields: Any) -> dict[str, Any]:
        """The model-config fields this case sets: its `model` overrides, head_chunks and
        the MoE settings (ValueError naming a setting that does not apply)."""
        unknown = sorted(set(self.model) - set(config_fields))
        if unknown:
            raise ValueError(
                f"unknown model field {unknown[0]!r} for {self.architecture}; "
                f"valid: {', '.join(sorted(config_fields))}"
            )
        overrides = dict(self.model)
        if self.head_chunks is not None:
            if "head_chunks" not in config_fields:
                raise ValueError(f"head_chunks does not apply to {self.architecture}")
            overrides["head_chunks"] = self.head_chunks
        if self.moe:
            if self.architecture not in MOE_CASES:
                valid = ", ".join(sorted(MOE_CASES))
                raise ValueError(f"{self.architecture} has no MoE case; valid: {valid}")
            overrides.update(MOE_CASES[self.architecture])
        return overrides


CASE_FIELDS = tuple(Case.model_fields)


@dataclasses.dataclass(frozen=True)
class Preset:
    name: str
    cases: tuple[Case, ...]
    mesh: dict[str, Any]
    description: str


# The published table's rows (batch and sample as published), then the small preset's
# architectures the tables have no row for, then the MoE case of the decoder. The MoE
# step asks for one 4.5 GiB buffer, which XLA's allocator grown on demand cannot place
# (RESOURCE_EXHAUSTED on the RTX 4080 under XLA_PYTHON_CLIENT_PREALLOCATE=false, the
# seed's rerun): its process preallocates whatever the run's environment says.
_SMALL_BATCHES = {
    "unet": 16,
    "uvit": 16,
    "simple_udit": 16,
    "simple_dit": 16,
    "simple_mmdit": 16,
    "hierarchical_mmdit": 16,
    "hybrid_dit": 16,
    "video_dit": 4,
    "unet_3d": 4,
    "jepa_encoder": 16,
    "jepa_video_encoder": 4,
    "causal_transformer": 16,
    "unet_2d_condition": 4,
    "sd3_transformer": 4,
    "flux_transformer": 4,
    "multimodal_transformer": 8,
    "diffusion_gemma": 4,
}

SMALL = Preset(
    name="small",
    cases=(
        *(Case(architecture=name, batch=batch) for name, batch in _SMALL_BATCHES.items()),
        Case(architecture="causal_transformer", batch=16, moe=True, xla_preallocate=True),
    ),
    mesh={"fsdp": 1},
    description="the published table: one device, published batch and sample",
)

CPU_SMOKE_BATCH = 8
CPU_SMOKE = Preset(
    name="cpu-smoke",
    cases=(
        *(
            Case(architecture=name, batch=CPU_SMOKE_BATCH)
            for name in _SMALL_BATCHES
            if name not in NO_STEP_OF_THEIR_OWN
        ),
        Case(architecture="causal_transformer", batch=CPU_SMOKE_BATCH, moe=True),
    ),
    mesh={"fsdp": 8, "min_shard_size": 256},
    description="tiny models on a simulated 8-device CPU mesh; checks the tool, not hardware",
)

PRESETS = {preset.name: preset for preset in (SMALL, CPU_SMOKE)}
PresetName = Literal["small", "cpu-smoke"]


def get(name: str) -> Preset:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; valid: {', '.join(PRESETS)}")
    return PRESETS[name]


def resolve(
    preset_name: str, architectures: Sequence[str] | None, cases_json: str | None
) -> tuple[Case, ...]:
    """The cases a run covers, from --preset, --architectures and --cases (ValueError: one
    line naming the bad value). --cases replaces the preset's cases; --architectures then
    keeps those of the named architectures."""
    preset = get(preset_name)
    if architectures is not None and not architectures:
        valid = ", ".join(sorted({case.architecture for case in preset.cases}))
        raise ValueError(f"--architectures needs at least one name; valid: {valid}")
    if cases_json is None:
        return select(preset, list(architectures)) if architectures else preset.cases
    try:
        objects = json.loads(cases_json)
    except json.JSONDecodeError as error:
        raise ValueError(f"--cases is not valid JSON: {error}") from None
    cases = merge_cases(preset, objects)
    if architectures:
        names = {case.architecture for case in select(preset, list(architectures))}
        cases = tuple(case for case in cases if case.architecture in names)
        if not cases:
            raise ValueError(f"--cases has no case of --architectures {' '.join(architectures)}")
    return cases


def select(preset: Preset, architectures: list[str]) -> tuple[Case, ...]:
    """The preset's cases of these architectures, in the preset's order."""
    valid = sorted({case.architecture for case in preset.cases})
    for name in architectures:
        if name not in valid:
            raise ValueError(
                f"unknown architecture {name!r} for preset {preset.name!r}; "
                f"valid: {', '.join(valid)}"
            )
    wanted = set(architectures)
    return tuple(case for case in preset.cases if case.architecture in wanted)


def merge_cases(preset: Preset, objects: Any) -> tuple[Case, ...]:
    """Cases from a `--cases` JSON value: a list of objects of Case fields.

    An object may leave out everything but `architecture`; the rest comes from the
    preset's first case of that architecture (so `{"architecture": "causal_transformer",
    "head_chunks": 1}` keeps the preset's batch). Raises ValueError with one line.
    """
    if not isinstance(objects, list) or not objects:
        raise ValueError("--cases must be a non-empty JSON list of objects")
    defaults = {}
    for case in preset.cases:
        defaults.setdefault(case.architecture, case)
    cases = []
    for index, item in enumerate(objects):
        if not isinstance(item, dict):
            raise ValueError(f"--cases[{index}] is {item!r}, not an object of Case fields")
        unknown = sorted(set(item) - set(CASE_FIELDS))
        if unknown:
            raise ValueError(
                f"--cases[{index}]: unknown Case field {unknown[0]!r}; "
                f"valid: {', '.join(CASE_FIELDS)}"
            )
        name = item.get("architecture")
        if name not in defaults:
            raise ValueError(
                f"--cases[{index}]: unknown architecture {name!r} for preset "
                f"{preset.name!r}; valid: {', '.join(sorted(defaults))}"
            )
        base = defaults[name].model_dump()
        try:
            cases.append(Case.model_validate({**base, **item}))
        except pydantic.ValidationError as error:
            raise ValueError(f"--cases[{index}]: {one_line(error)}") from None
    return tuple(cases)
