"""A step whose loss became NaN or inf: the step at which it did, and what that does to the row.

Once a loss is not finite the step computes on NaNs, and its time is not the time of the
training it stands for: the row fails, "the loss became nan at step N of M", unless the
run says the step is known to diverge (--loss-may-diverge): then the row is kept, its
note says the same, and a warning that the loss is not finite follows it to the table.

Each step's loss is kept as the step returned it (a reference to a device array: no sync
inside the timed windows, dew.bench.sweep.timing) and read after them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

FLAG = "--loss-may-diverge"


def loss_leaf(metrics: Any) -> Any:
    """The step's loss as it returned it: dew's "train/loss", or a step of the user's
    "loss"; None when its metrics hold neither. Read nothing from the device."""
    if not isinstance(metrics, Mapping):
        return None
    return metrics.get("train/loss", metrics.get("loss"))


def as_number(value: Any) -> float | None:
    """A loss as one float; None when it is missing or not one number (a user's metrics
    may hold anything)."""
    import numpy as np

    try:
        number = np.asarray(value, dtype=float) if value is not None else None
    except (TypeError, ValueError):
        return None
    return float(number) if number is not None and number.size == 1 else None


def first_non_finite(losses: Sequence[Any]) -> tuple[int, float] | None:
    """The first step (from 1) whose loss is NaN or inf, with that loss; None when every
    loss that is one number is finite."""
    for step, value in enumerate(losses, start=1):
        number = as_number(value)
        if number is not None and not math.isfinite(number):
            return step, number
    return None


def sentence(diverged: tuple[int, float], steps_run: int) -> str:
    step, value = diverged
    return f"the loss became {value} at step {step} of {steps_run}"


def verdict(losses: Sequence[Any], *, may_diverge: bool) -> tuple[str | None, str | None]:
    """(error, note) for a row whose steps returned `losses`: an error that fails the row
    when a loss is not finite, or with `may_diverge` a note instead; (None, None) when
    every loss is finite."""
    diverged = first_non_finite(losses)
    if diverged is None:
        return None, None
    said = sentence(diverged, len(losses))
    if may_diverge:
        return None, f"{said} (known to diverge: {FLAG})"
    return (
        f"{said}: its times are of arithmetic on {diverged[1]}, not of training; fix the "
        f"step, or pass {FLAG} when it is known to diverge",
        None,
    )
