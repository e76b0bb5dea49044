"""The step benchmark over several processes: one row from every process's figures.

Every process runs the same cases; each measures its own timings. A row reports the slowest
process's timing figures and `process_spread_ms` (slowest minus fastest ms/step); a case
that failed on any process fails the row with that process's error. Rows and the process
table travel through the distributed runtime's key-value store, whose reads time out
instead of waiting forever on a peer that is gone.

The loopback launcher that starts such runs is dew.bench.multihost.launch.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence

from dew.bench.record.schema import ProcessInfo, StepRow

KV_TIMEOUT_MS = 600_000  # a peer still compiling a large case may take minutes to answer
# Fields that are timings of one process; the row takes them from the slowest process.
TIMING_FIELDS = ("ms_per_step", "p10_ms", "p50_ms", "p90_ms", "samples_per_s", "tokens_per_s")
TIMING_FIELDS += ("util", "work_util", "compile_s")


# --- inside a multi-process run ----------------------------------------------------------


def _client():
    from jax._src.distributed import global_state  # the runtime's key-value store

    return global_state.client


def exchange(tag: str, payload: str) -> list[str]:
    """Every process's `payload` for `tag`, in process order (a blocking all-gather)."""
    import jax

    client = _client()
    client.key_value_set(f"dew/{tag}/{jax.process_index()}", payload)
    return [
        client.blocking_key_value_get(f"dew/{tag}/{index}", KV_TIMEOUT_MS)
        for index in range(jax.process_count())
    ]


def process_table() -> list[ProcessInfo]:
    """One entry per process: index, host and local device count."""
    import jax

    mine = ProcessInfo(
        process_index=jax.process_index(),
        hostname=socket.gethostname(),
        local_device_count=jax.local_device_count(),
    )
    return [
        ProcessInfo.model_validate_json(text)
        for text in exchange("processes", mine.model_dump_json())
    ]


def gather_row(row: StepRow, tag: str) -> StepRow:
    """This case's row from every process, combined (every process gets the same row)."""
    return combine([StepRow.model_validate_json(t) for t in exchange(tag, row.model_dump_json())])


def combine(rows: Sequence[StepRow]) -> StepRow:
    """One row from the same case's row on every process (in process order).

    A failure anywhere fails the row, naming the first failed process. Otherwise the
    timing figures are the slowest process's (largest ms/step) and process_spread_ms is
    its ms/step minus the fastest's; compiled figures (params, GFLOP) are process 0's.
    """
    for index, row in enumerate(rows):
        if row.status != "ok":
            error = row.error if len(rows) == 1 else f"process {index}: {row.error}"
            return rows[0].model_copy(update={"status": "failed", "error": error})
    timed = [row for row in rows if row.ms_per_step is not None]
    if not timed:  # compile-only: nothing was timed
        return rows[0]
    slowest = max(timed, key=lambda row: row.ms_per_step)
    fastest = min(timed, key=lambda row: row.ms_per_step)
    figures = {name: getattr(slowest, name) for name in TIMING_FIELDS}
    figures["process_spread_ms"] = slowest.ms_per_step - fastest.ms_per_step
    return StepRow.model_validate({**rows[0].model_dump(), **figures})
