"""A loader configuration measured: in this process (measure_loader) or in a fresh one
(measure_in_child, one repeat of `benchmark_data --repeats N`).

A repeat's process is `python -m dew.bench.loader.measure`; it speaks
dew.bench.runtime.conversation's messages with the run: the run sends its Job, the child
sends its Notices (a capped worker count) and then its row (Result) or its bad input
(Refused, the run's one line and exit 2). Its stdout and stderr are its log: the last line
there is the error of a repeat that died. A repeat that passes its deadline
(--case-timeout, or repeat_deadline: 30 min for imports, the workers' start, warmup and
timed batches, more for many samples) is killed with its workers (its process group) and
fails the run in one line, exit 1, as one that dies does; one out of memory (the kernel's
OOM killer, a failed allocation) fails it with "out of memory in the repeat: ..."
(dew.bench.runtime.protocol).
"""

from __future__ import annotations

import sys
import time
import traceback

import numpy as np

from dew.bench.analysis.kinds import KINDS
from dew.bench.analysis.repeats import DIGITS
from dew.bench.common import cli
from dew.bench.common.cli import UsageError
from dew.bench.record.schema import DataRepeat, DataRow
from dew.bench.runtime import protocol
from dew.bench.runtime.conversation import Job, Notice, Refused, Result
from dew.bench.runtime.protocol import spawn
from dew.data.spec import DATASETS, DatasetSpec

CHILD = [sys.executable, "-m", "dew.bench.loader.measure"]  # a repeat's process
SAMPLE_S = 0.1  # a repeat's deadline per sample read, above LOADER_REPEAT_S: 10 samples/s


def print_notice(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def measure_loader(
    spec: DatasetSpec, batch: int, steps: int, warmup: int, *, notify=print_notice
) -> DataRow:
    """One DataRow for `spec` (its Loading capped to this machine, with a notice), holding
    its per-batch intervals as one repeat."""
    if batch < 1 or steps < 1 or warmup < 0:
        raise ValueError(
            f"need batch >= 1, steps >= 1, warmup >= 0; got batch={batch} steps={steps} "
            f"warmup={warmup}"
        )
    # grain, and JAX through it, only in the process that reads batches: the command that
    # refuses bad input, spawns the repeats and writes the record starts without them.
    from dew.data.pipeline import make_source, open_batches

    spec.check()
    start = time.perf_counter()
    source = make_source(spec)
    loading, notices = spec.loading.capped_to_machine()
    for notice in notices:
        notify(notice)
    spec = spec.model_copy(update={"loading": loading})
    with open_batches(spec, batch, source=source) as batches:
        next(batches)
        first_batch_s = time.perf_counter() - start
        for _ in range(warmup - 1):
            next(batches)
        intervals = np.empty(steps)
        last = time.perf_counter()
        for i in range(steps):
            next(batches)
            now = time.perf_counter()
            intervals[i] = now - last
            last = now
    samples_per_s = steps * batch / float(intervals.sum())
    row = DataRow(
        status="ok",
        dataset=spec.name,
        batch=batch,
        image_size=spec.image_size,
        workers=loading.workers,
        threads=loading.threads,
        steps=steps,
        warmup=warmup,
        samples_per_s=samples_per_s,
        p50_ms=float(np.percentile(intervals, 50) * 1e3),
        p95_ms=float(np.percentile(intervals, 95) * 1e3),
        first_batch_s=first_batch_s,
    )
    repeat = DataRepeat(
        samples_per_s=samples_per_s,
        intervals_ms=[round(float(value) * 1e3, DIGITS) for value in intervals],
        first_batch_s=first_batch_s,
    )
    return KINDS["data"].summarize(row, [repeat])


# --- a repeat in a fresh process -------------------------------------------------------------


class RepeatFailed(Exception):
    """A repeat's process died or timed out (not bad input): one line, exit 1."""


def measure_in_child(
    spec: DatasetSpec,
    batch: int,
    steps: int,
    warmup: int,
    *,
    notify=print_notice,
    timeout_s: float | None = None,
) -> DataRow:
    """measure_loader in a fresh process; its bad input raises UsageError, a death or a
    repeat past `timeout_s` (default: repeat_deadline; killed with its workers)
    RepeatFailed."""
    work = {"dataset": spec.name, "spec": spec.model_dump(mode="json"), "batch": batch}
    job = Job(work | {"steps": steps, "warmup": warmup})
    if timeout_s is None:
        timeout_s = repeat_deadline(batch, steps, warmup)
    deadline = protocol.Deadline(timeout_s)
    with spawn("the loader's process", CHILD) as child:
        child.send(job)
        while True:
            try:
                message = child.receive(
                    Notice, Refused, Result,
                    phase="the repeat", deadline=deadline, waiting_for="its row",
                )  # fmt: skip
            except protocol.ChildFailed as error:
                raise RepeatFailed(str(error)) from None
            if isinstance(message, Notice):
                notify(message.text)
            elif isinstance(message, Refused):
                raise UsageError(message.error)
            else:
                child.finish()
                return DataRow.model_validate(message.row)


def repeat_deadline(batch: int, steps: int, warmup: int) -> float:
    """The seconds a repeat's process may take by default: LOADER_REPEAT_S (30 min), plus
    SAMPLE_S for every sample it reads (warmup and timed batches), a rate slower than any
    loader worth measuring; 105 batches of 8 (the defaults) get 30 min 84 s."""
    return protocol.LOADER_REPEAT_S + (warmup + steps) * batch * SAMPLE_S


def child_main() -> int:
    """A repeat's process: its Job, then its Notices and its row (or its bad input)."""
    parent = protocol.ToParent.from_environment()
    job = parent.receive(Job)
    if job is None:  # the run has gone
        return cli.EXIT_CHANGED
    work = job.work
    spec = DATASETS[work["dataset"]].model_validate(work["spec"])

    def notify(line: str) -> None:
        parent.send(Notice(line))

    try:
        row = measure_loader(spec, work["batch"], work["steps"], work["warmup"], notify=notify)
    except ValueError as error:  # DataError included: the run's one line
        parent.send(Refused(str(error)))
        return cli.EXIT_USAGE
    except Exception as error:  # a worker that died, MemoryError: the traceback, then the
        # one line the run reports (the last of the log; a traceback may end in a note)
        traceback.print_exc()
        print(cli.one_line(error), file=sys.stderr, flush=True)
        return cli.EXIT_CHANGED
    parent.send(Result(row.model_dump(mode="json")))
    return cli.EXIT_OK


if __name__ == "__main__":
    sys.exit(child_main())
