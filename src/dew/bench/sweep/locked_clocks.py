"""--lock-clocks base|max|off: the step benchmark's cards held at one clock for its cases.

Locked clocks take the card's boost and its thermal and power state out of a comparison of
two runs; they are not the clocks a user's training runs at, so the default is off and the
published tables are measured without them. The lock itself is dew.telemetry.clocks; this
module refuses what cannot be locked (one line, exit 2, before any case), puts the locks in
the record's environment, and says in the record whether they were restored:

    check(mode, in_cluster=)                what cannot be locked, before the device probe
    held(mode, platform, json_out=, log=)   a `with` around the run: the LockedClocks its
                                            record carries (None for off), reset on the way
                                            out, whatever ends the run (its end, a failed
                                            write, SIGTERM / SIGINT raised in it)
    check_resume(previous, environment, path)   --resume continues only under the same lock
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from dew import platforms
from dew.bench.common.cli import UsageError, one_line
from dew.bench.common.errors import WriteFailed
from dew.bench.common.files import file_stamp
from dew.bench.record.schema import Environment, read_run, write_run
from dew.bench.record.schema.environment import LockedClocks
from dew.telemetry import clocks, nvml

OFF = "off"


MULTI_PROCESS = (
    "--lock-clocks {mode} in a multi-process run: a host's processes share its cards; lock "
    "them as root before the run (nvidia-smi -lgc, -lmc), or use --lock-clocks off"
)


def check(mode: str, *, in_cluster: bool, open_session=nvml.session) -> None:
    """Refuse, before the devices are probed, a lock that cannot be: a multi-process run,
    or a host without an NVIDIA GPU NVML can reach."""
    if mode == OFF:
        return
    if in_cluster:
        raise UsageError(MULTI_PROCESS.format(mode=mode))
    with open_session() as found:
        if not found or not found.handles:
            why = found.why or "NVML lists no card"
            raise UsageError(
                f"--lock-clocks {mode} locks NVIDIA GPU clocks; no NVIDIA GPU here: {why}; "
                "use --lock-clocks off"
            )


@contextlib.contextmanager
def held(
    mode: str,
    platform: str | None,
    *,
    json_out: str | None,
    log: Callable[[str], None],
    open_session=nvml.session,
) -> Iterator[LockedClocks | None]:
    """Lock the clocks of every card the run uses (CUDA_VISIBLE_DEVICES) for the block;
    yield what the record's environment carries. `platform` is the cases' (the device
    probe's; None in a multi-process run, whose devices are known only once it is joined).
    Raises UsageError, having locked nothing, when the clocks cannot be locked."""
    if mode == OFF:
        yield None
        return
    if platform is None:
        raise UsageError(MULTI_PROCESS.format(mode=mode))
    if not platforms.get(platform).nvml:
        raise UsageError(
            f"--lock-clocks {mode} locks NVIDIA GPU clocks; the cases here run on {platform}: "
            "use --lock-clocks off"
        )
    with contextlib.ExitStack() as stack:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        try:
            lock = stack.enter_context(
                clocks.locked(mode, visible=visible, open_session=open_session)
            )
        except clocks.Refused as refused:
            fix = "use --lock-clocks off"
            if refused.fix:
                fix = f"{refused.fix}, or {fix}"
            raise UsageError(f"--lock-clocks {mode}: {refused}; {fix}") from None
        log(f"clocks locked ({mode}): {describe(lock)}; reset when the run ends")
        # The record is told only if this run wrote it (not a --resume refused before its
        # first write), and not after a write failed: that failure's line is the one said.
        before = file_stamp(json_out)
        writable = json_out is not None
        try:
            yield LockedClocks.model_validate(lock.fields())
        except WriteFailed:
            writable = False
            raise
        finally:
            stack.close()  # the reset, before anything else on the way out
            said = ", ".join(f"card {card.index}" for card in lock.cards)
            if lock.restored:
                log(f"clocks restored: {said}")
            else:
                log(
                    f"warning: clocks left locked: {'; '.join(lock.problems)}; reset them "
                    "as root: nvidia-smi -rgc -rmc"
                )
            if writable and file_stamp(json_out) != before:
                say_restored(json_out, lock.restored, log)


def describe(lock: clocks.Lock) -> str:
    """`card 0 SM 1980 MHz, memory 3201 MHz`, per card, as locked and as read."""
    parts = []
    for card in lock.cards:
        sm = f"{card.sm_clock_mhz} MHz" if card.sm_clock_mhz is not None else "base (TDP)"
        if card.sm_clock_read_mhz is not None:
            sm += f", reads {card.sm_clock_read_mhz} MHz"
        memory = f"{card.memory_clock_mhz} MHz" if card.memory_clock_mhz else "not locked"
        parts.append(f"card {card.index} SM {sm}, memory {memory}")
    return "; ".join(parts)


def say_restored(json_out: str, restored: bool, log: Callable[[str], None]) -> None:
    """Rewrite the record's `environment.locked_clocks.restored` once the locks are reset
    (the record was written while they held). A record that cannot take it keeps false,
    which errs on the side of a user checking the card."""
    if not Path(json_out).exists():
        return
    try:
        record = read_run(json_out)
        lock = record.environment.locked_clocks
        if lock is None or lock.restored == restored:
            return
        environment = record.environment.model_copy(
            update={"locked_clocks": lock.model_copy(update={"restored": restored})}
        )
        write_run(json_out, record.model_copy(update={"environment": environment}))
    except (OSError, ValueError) as error:
        log(f"warning: {json_out} could not record that the clocks were reset: {one_line(error)}")


def check_resume(previous: Environment, environment: Environment, path: str) -> None:
    """--resume keeps rows measured under the same lock only."""
    then, now = (
        env.locked_clocks.mode if env.locked_clocks else OFF for env in (previous, environment)
    )
    if then != now:
        raise UsageError(
            f"--resume: --lock-clocks differs: {then} in the record, {now} in this run; "
            f"rerun with the same or write a new --json-out (the record: {path})"
        )
