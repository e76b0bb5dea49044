"""A benchmark child's conversation with its run: one lifecycle and one set of messages for
every benchmark kind, spoken over dew.bench.runtime.protocol.

    run                          child
    Job (what to measure)   ->            a forked child may get its job with its start
                            <- Notice     any number: a line the run shows
                            <- Ready      prepared (compiled, initialised): what it knows
                                          so far, kept in a row should it die later
    Go                      ->            its turn to be timed
                            <- Result     its row, as JSON; or Refused: its bad input

A kind uses the steps it has: the step kind's case (dew.bench.sweep.case_process) gets its
job with its fork, sends Ready and waits for Go, so that several cases compile at once and
one at a time is timed; a loader repeat (dew.bench.loader.measure) is sent its Job, may
send Notices (a capped worker count) and then Result or Refused. A new kind's child speaks
the same messages: its row model (dew.bench.analysis.kinds) reads Result's row. A TPU's
compile processes and the process that holds the chip (dew.bench.sweep.chip) answer with
more than a row: they speak typed messages of their own (chip.messages), each validated
where it is received.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from dew.bench.runtime.protocol import Message


@dataclasses.dataclass(frozen=True)
class Job(Message):
    """The run's: what the child measures, as the child's kind spells it."""

    work: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Notice(Message):
    """The child's: a line the run shows (a capped worker count)."""

    text: str


@dataclasses.dataclass(frozen=True)
class Ready(Message):
    """The child's, once prepared: what it knows then (params, GFLOP, compile s), kept in a
    row should it die later; it then waits for Go."""

    figures: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Go(Message):
    """The run's: the child's turn to be timed has come."""


@dataclasses.dataclass(frozen=True)
class Result(Message):
    """The child's last: its row (the kind's row model, as JSON)."""

    row: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Refused(Message):
    """The child's last instead of a row: its bad input (an unreadable record), which the
    run says in one line, exit 2."""

    error: str
