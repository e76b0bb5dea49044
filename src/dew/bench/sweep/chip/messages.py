"""What the chip's processes and the run say to each other: a typed message each, validated
where it is received (dew.bench.runtime.protocol: a malformed one fails its case in one
line naming the field, never a KeyError).

    run                                    compile process (compile_job)
    CompileJob  ->
                <-  Compiled               its figures, phases, program folder or error

    run                                    holder (holder)
                <-  Opened                 the chip is open
    TimeJob     ->                         a case to time: its Compiled, what to load ahead
                <-  Timed                  its row and what the allocator read after it

A Compiled is also what a kept program's figures.json holds (kept_programs).
"""

from __future__ import annotations

from typing import Annotated, Any

import pydantic
from pydantic import PlainSerializer, PlainValidator

from dew.bench.record.schema import Phase, StepRow
from dew.bench.runtime.protocol import Message
from dew.bench.sweep.case_run import Figures
from dew.bench.sweep.presets import Case
from dew.bench.sweep.settings import Options


def _figures(value: Any) -> Figures:
    """A Figures, or its fields by name as they crossed the pipe; another name is refused."""
    if isinstance(value, Figures):
        return value
    if not isinstance(value, dict):
        raise ValueError(f"figures must be an object, not {type(value).__name__}")
    try:
        return Figures(**value)
    except TypeError as error:  # a name that is not one of the row's measured fields
        raise ValueError(str(error).removeprefix("Figures.__init__() ")) from None


MeasuredFigures = Annotated[
    Figures, PlainValidator(_figures), PlainSerializer(lambda figures: figures.fields())
]
typed = pydantic.dataclasses.dataclass(frozen=True, config={"arbitrary_types_allowed": True})


@typed
class CompileJob(Message):
    """The run's: a case to compile for `topology` and save into `folder`."""

    case: Case
    options: Options
    topology: str
    folder: str
    spawned: float  # when the run started the process: its "imports" phase begins there


@typed
class Compiled(Message):
    """A compile process's answer: the row's figures so far, tokens per sample, the error
    (None: the program is saved in `folder`), its phases."""

    figures: MeasuredFigures
    tokens: int | None = None
    error: str | None = None
    phases: list[Phase] = pydantic.Field(default_factory=list)
    folder: str | None = None  # None: a compile that failed before saving anything


@typed
class Opened(Message):
    """The holder's first: the chip is open, since `began` (Unix time), in `open_s`."""

    open_s: float
    began: float


@typed
class TimeJob(Message):
    """The run's: a case to time from its saved program; `load_ahead`, on a holder's first
    job, the folders of every program it will time."""

    case: Case
    options: Options
    folder: str
    compiled: Compiled
    load_ahead: list[str] = pydantic.Field(default_factory=list)


@typed
class Readings:
    """memory_stats after a case (None where the device keeps none: a CPU)."""

    peak_bytes: int | None = None
    in_use_bytes: int | None = None


@typed
class Timed(Message):
    """The holder's answer to a TimeJob: the case's row and what the allocator read."""

    row: StepRow
    readings: Readings = pydantic.Field(default_factory=Readings)
