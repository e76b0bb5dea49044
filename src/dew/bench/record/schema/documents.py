"""The other JSON dew writes beside its records, each with its own model: what a file is,
read from its content (`document_kind`), and its check (`check_document`).

    JSON Schema    results/schema/*.schema.json    python -m dew.bench.record.schema
    run level      results/noise.json              python -m dew.bench.analysis.levels.history
    superseded     results/superseded.json         by hand: each reason with the commit that
                                                   removed its cause
    A/B plan       RUN/ab-plan.json                nox -s ab (dew.host.ab_rounds)
    comparison     compare.json                    dew compare --format json
    sweep timings  scripts/sweep_time.py --out
    wall time      STEP/wall.json                  scripts/chip_replays.py (a step's calls)
    step exit      STEP/done.json                  scripts/chip_replays.py (its verdict's exit)

A kind is known by the keys only it has at its top, checked before a record's (a
comparison has a kind and rows too). Each model names the fields the readers use and
allows more (a newer writer may add some); `dew validate` checks a file of each kind
against its model, and the site lists them by kind, never as a broken record.
Pydantic and the standard library only, like the rest of the schema.
"""

from __future__ import annotations

import json
import re
from typing import Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, NonNegativeInt

RECORD = "record"
RECORD_KEYS = ({"schema_version"}, {"kind", "rows"})  # an object with either claims to be one
# The verdicts a comparison ends in (dew.bench.analysis.judge's outcomes).
OUTCOMES = ("REPRODUCED", "NOT REPRODUCED", "INCONCLUSIVE")


class Document(BaseModel):
    model_config = ConfigDict(extra="allow")


class JsonSchema(Document):
    """A JSON Schema as `dew schema --export` writes it (draft 2020-12, one object model)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    dialect: str = Field(alias="$schema", pattern=r"^https://json-schema\.org/")
    title: str
    type: Literal["object"]
    properties: dict[str, dict]


class RowLevels(Document):
    process: NonNegativeFloat
    process_df: NonNegativeFloat
    run: NonNegativeFloat
    run_df: NonNegativeFloat


class KindLevels(RowLevels):
    """One device kind's fitted noise levels (standard deviations, fractions)."""

    platform: str | None
    shift: NonNegativeFloat
    shift_df: NonNegativeFloat
    records: int = Field(ge=2)  # an A/A pair at least
    groups: list[list[str]]
    rows: dict[str, RowLevels]
    superseded: list[str] = []  # records of the kind left out of its fit (Superseded)


class RunLevels(Document):
    """results/noise.json: the A/A history's fit per device kind."""

    command: str
    kinds: dict[str, KindLevels]


class PlanSide(Document):
    given: str
    kind: Literal["commit", "record", "image"]
    commit: str | None
    image: str | None
    image_id: str | None
    outside: list[dict]


class PlanRun(Document):
    round: int = Field(ge=1)
    unit: int = Field(ge=1)
    side: Literal["A", "B"]
    record: str
    exit: int


class AbPlan(Document):
    """RUN/ab-plan.json: the two sides, the cases and the order the rounds ran in."""

    sides: dict[Literal["A", "B"], PlanSide]
    rounds: int = Field(ge=1)
    units: list[str]
    env: dict[Literal["A", "B"], dict[str, str]]
    tool: list[str]
    band: float = Field(gt=0, lt=100)
    alpha: float = Field(gt=0, lt=1)
    order: list[PlanRun]


class ComparisonDocument(Document):
    """compare.json: `dew compare --format json` (docs/reproducing.md lists its fields;
    a compare before the outcome field wrote none)."""

    run: str
    reference: str | None
    kind: str | None = None
    summary: str
    outcome: Literal[OUTCOMES] | None = None  # type: ignore[valid-type]
    exit: Literal[0, 1, 3] | None = None
    rows: list[dict] = []


class Reason(Document):
    """Why records left their kind's noise: the cause, the commit whose change removed it
    (a record made at or after it is timed without the cause) and the device kind whose
    records it concerns."""

    why: str
    removed_by: str  # a commit, abbreviated or whole
    device_kind: str

    @pydantic.field_validator("why", "device_kind")
    @classmethod
    def _said(cls, value: str, info: pydantic.ValidationInfo) -> str:
        what = {
            "why": "say what the cause was and what showed it",
            "device_kind": "name the device kind of its records, as a record names it",
        }
        if not value.strip():
            raise ValueError(f"the {info.field_name} is empty: {what[info.field_name]}")
        return value

    @pydantic.field_validator("removed_by")
    @classmethod
    def _a_commit(cls, value: str) -> str:
        if not re.fullmatch(r"[0-9a-f]{7,40}", value):
            raise ValueError("not a commit: name the commit (7 to 40 hex digits) whose change "
                             "removed the cause")  # fmt: skip
        return value


class Superseded(Document):
    """results/superseded.json: records kept but left out of their kind's noise, each
    naming one of the reasons (a cause a code change removed, named with that commit)."""

    reasons: dict[str, Reason]
    records: dict[str, str]  # a record's path from the repository's root -> its reason

    @pydantic.field_validator("reasons", mode="before")
    @classmethod
    def _reasons_are_objects(cls, value):
        bare = sorted(name for name, reason in value.items() if isinstance(reason, str)) \
            if isinstance(value, dict) else []  # fmt: skip
        if bare:
            raise ValueError(
                f'reason {bare[0]!r} is a bare text: give it as {{"why": ..., "removed_by": '
                '"<the commit that removed the cause>", "device_kind": ...}'
            )
        return value

    @pydantic.model_validator(mode="after")
    def _named_reasons(self) -> Superseded:
        unknown = [f"records[{path!r}] names the reason {name!r}"
                   for path, name in self.records.items() if name not in self.reasons]  # fmt: skip
        if unknown:
            given = ", ".join(sorted(self.reasons)) or "none"
            raise ValueError(f"{'; '.join(unknown)}, which reasons does not give (given: "
                             f"{given}): add it to reasons or name one of them")  # fmt: skip
        return self


class SweepTimings(Document):
    """scripts/sweep_time.py --out: a cold and a warm sweep's time."""

    checkout: str
    preset: str
    steps: int = Field(ge=1)
    runs: dict[str, dict]
    cpus: NonNegativeInt | None = None


class StepWall(Document):
    """scripts/chip_replays.py's STEP/wall.json: a step's wall time, each call's and the sum."""

    calls: list[NonNegativeFloat]
    wall_s: NonNegativeFloat


class StepExit(Document):
    """scripts/chip_replays.py's STEP/done.json: the exit status of the step's verdict."""

    exit: int


# (name, the keys only it has at its top, its model), in the order they are told apart.
KINDS: tuple[tuple[str, set[str], type[Document]], ...] = (
    ("JSON Schema", {"$schema"}, JsonSchema),
    ("run level", {"command", "kinds"}, RunLevels),
    ("superseded records", {"reasons", "records"}, Superseded),
    ("A/B plan", {"sides", "rounds", "order"}, AbPlan),
    ("comparison", {"run", "reference", "summary", "rows"}, ComparisonDocument),
    ("sweep timings", {"checkout", "runs", "preset"}, SweepTimings),
    ("wall time", {"calls", "wall_s"}, StepWall),
    ("step exit", {"exit"}, StepExit),  # after the comparison, which has an exit too
)
MODELS = {name: model for name, _, model in KINDS}


def document_kind(value: dict) -> str | None:
    """What a JSON object dew may have written is: one of KINDS' names, RECORD when it
    claims to be a record, None for anything else."""
    keys = value.keys()
    for name, marks, _ in KINDS:
        if marks <= keys:
            return name
    return RECORD if any(marks <= keys for marks in RECORD_KEYS) else None


def check_document(kind: str, text: str) -> pydantic.ValidationError | None:
    """The problems of a document of `kind` (one of KINDS' names), None when it is valid."""
    try:
        MODELS[kind].model_validate(json.loads(text))
    except pydantic.ValidationError as error:
        return error
    return None
