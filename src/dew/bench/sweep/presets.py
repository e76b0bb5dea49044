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
import re
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


# A step of the user's (dew.bench.sweep.own_step): `MODULE:FACTORY`, a dotted module and a
# name in it. Its case takes a batch and its process's allocator setting; nothing of dew's
# models applies to it. Its batch unless the case names one (not the factory's default).
STEP_SPEC = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")
# The batch of a case of the user's own (a step, or another package's architecture) unless
# the case names one: no preset of dew's says it.
OWN_BATCH = 8
NOT_FOR_A_STEP = ("head_chunks", "attention_impl", "moe", "condition_in_state", "model")


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
    step: str | None = pydantic.Field(
        default=None,
        description="MODULE:FACTORY: a step that is not a model (dew.bench.sweep.own_step), "
        "its factory called as FACTORY(batch=batch); the row's architecture is this string",
    )

    @pydantic.model_validator(mode="before")
    @classmethod
    def _step_names_the_row(cls, data: Any) -> Any:
        """A step case's architecture is its MODULE:FACTORY (given or not)."""
        if isinstance(data, dict) and data.get("step") is not None:
            data = {"architecture": data["step"], **data}
        return data

    @pydantic.model_validator(mode="after")
    def _step_case(self) -> Case:
        if self.step is None:
            return self
        if not STEP_SPEC.fullmatch(self.step):
            raise ValueError(not_a_step_spec(self.step))
        if self.architecture != self.step:
            raise ValueError(f"a step case's architecture is its step {self.step!r}")
        given = [name for name in NOT_FOR_A_STEP if getattr(self, name) not in (None, False, {})]
        if given:
            raise ValueError(
                f"{given[0]} does not apply to the step {self.step} (its factory builds "
                "the step); a step case takes step, batch and xla_preallocate"
            )
        return self

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


def not_a_step_spec(spec: str) -> str:
    return (
        f"step {spec!r} is not MODULE:FACTORY (a dotted module name, a colon, the "
        "factory's name in it), e.g. mypackage.steps:make_step"
    )


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
    preset_name: str,
    architectures: Sequence[str] | None,
    cases_json: str | None,
    step: str | None = None,
) -> tuple[Case, ...]:
    """The cases a run covers, from --preset, --architectures, --cases and --step (ValueError:
    one line naming the bad value). --cases replaces the preset's cases; --architectures then
    keeps those of the named architectures (and every step case); --step adds its case after
    them, or is the run's only case when neither is given."""
    if step is not None:
        if not STEP_SPEC.fullmatch(step):
            raise ValueError(f"--{not_a_step_spec(step)}")
        own = Case(step=step, batch=OWN_BATCH)
        if architectures is None and cases_json is None:
            return (own,)
        return (*resolve(preset_name, architectures, cases_json), own)
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
        cases = tuple(case for case in cases if case.architecture in names or case.step)
        if not cases:
            raise ValueError(f"--cases has no case of --architectures {' '.join(architectures)}")
    return cases


def select(preset: Preset, architectures: list[str]) -> tuple[Case, ...]:
    """The preset's cases of these architectures, in the preset's order, then the cases of
    the named architectures from other packages (`outside_case`)."""
    valid = {case.architecture for case in preset.cases}
    outside = tuple(outside_case(preset, name) for name in architectures if name not in valid)
    wanted = set(architectures)
    return tuple(case for case in preset.cases if case.architecture in wanted) + outside


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
        if item.get("step") is not None:  # a step of the user's: nothing of a preset's
            try:
                cases.append(Case.model_validate({"batch": OWN_BATCH, **item}))
            except pydantic.ValidationError as error:
                raise ValueError(f"--cases[{index}]: {one_line(error)}") from None
            continue
        name = item.get("architecture")
        if name not in defaults:
            defaults[name] = outside_case(preset, name, where=f"--cases[{index}]: ")
        base = defaults[name].model_dump()
        try:
            cases.append(Case.model_validate({**base, **item}))
        except pydantic.ValidationError as error:
            raise ValueError(f"--cases[{index}]: {one_line(error)}") from None
    return tuple(cases)


# --- architectures from other packages (dew.models.registry's entry points) -----------------


def outside_case(preset: Preset, name: Any, where: str = "") -> Case:
    """The case of an architecture another package registers (docs/own-models.md): batch
    OWN_BATCH, its config's preset named like this one. ValueError in one line: an
    unknown name, a package that cannot be loaded (dew.models.registry), a config without
    this preset, an objective dew does not know."""
    from dew.models import registry

    own = {case.architecture for case in preset.cases}
    if not isinstance(name, str) or name not in registry.outside_names():
        valid = ", ".join(sorted(own | set(registry.outside_names())))
        raise ValueError(
            f"{where}unknown architecture {name!r} for preset {preset.name!r}; valid: {valid}"
        )
    arch = registry.get(name)  # loads its package: a RegistryError names it
    config = arch.config_cls
    if preset.name not in config.presets:
        has = ", ".join(sorted(config.presets)) or "none"
        raise ValueError(
            f"{where}architecture {name!r} ({arch.origin()}): its config {config.__name__} "
            f"has no preset {preset.name!r} (it has: {has}); run --preset "
            f"{sorted(config.presets)[0] if config.presets else 'cpu-smoke'}, or add "
            f"{preset.name!r} to {config.__name__}.presets"
        )
    from dew.train.objectives import objective_names

    if config.objective not in objective_names():
        raise ValueError(
            f"{where}architecture {name!r} ({arch.origin()}): its objective "
            f"{config.objective!r} is not registered (dew's: {', '.join(objective_names())}); "
            "name one of them, or register one with @dew.train.objectives.register_objective "
            "in a module its entry point's module imports"
        )
    return Case(architecture=name, batch=OWN_BATCH)


def check_registered(cases: Sequence[Case]) -> None:
    """Every architecture of these cases is registered (dew.models.registry's RegistryError,
    one line naming the package: one that claims one of dew's names included)."""
    from dew.models import registry

    for case in cases:
        if not getattr(case, "step", None):
            registry.get(case.architecture)


def outside_modules(cases: Sequence[Case]) -> dict[str, list[str]]:
    """The code from outside dew these cases run: module -> the architectures (or
    MODULE:FACTORY steps) it holds, for the record (dew.bench.record.outside)."""
    from dew.models import registry

    uses: dict[str, list[str]] = {}
    for case in cases:
        step = getattr(case, "step", None)
        if step:
            module, used = step.partition(":")[0], step
        else:
            try:
                arch = registry.get(case.architecture)
            except ValueError:  # refused before any case runs; a resumed record's may be gone
                continue
            if not arch.outside:
                continue
            module, used = arch.module, case.architecture
        users = uses.setdefault(module, [])
        if used not in users:
            users.append(used)
    return uses
