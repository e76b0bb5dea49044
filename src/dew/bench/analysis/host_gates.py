"""The host's gates on a change: the host probe's drift between two records, and a busy
host during a side's repeats. A change the drift explains is `undecided`; a busy side is
weighed by what the host could have done to the row (repeat_bias: what the other work can
take from the row's own work on a host of that size, times the share of the step that is
the host's), a bound the judge widens the
row's and the shift's intervals by (dew.bench.analysis.comparison applies them; the probe
times the CPU, so its drift gates only comparisons of CPU records)."""

from __future__ import annotations

import math
import re

import numpy as np

from dew import platforms
from dew.bench.analysis import stats
from dew.bench.record.schema import BenchmarkRun, DataRow, Record, StepRow


def drift_why(host: stats.Drift, diff: stats.Difference, band: float) -> str:
    """Why a change the host's drift explains is undecided, with the figures."""
    floor, ceiling = stats.drift_band(host, band)
    shown = f"{diff.low:.3f}-{diff.high:.3f}"
    return (
        f"{_host_speed(host)} (host probe); the change is within that (ratio {shown} "
        f"against the band {floor:.3f}-{ceiling:.3f} around the drift)"
    )


def _host_speed(host: stats.Drift) -> str:
    """`the host ran 12% faster during the run than the reference`, from the probe's ratio
    (like a row's ratio: 0.88 takes 12% less time)."""
    change = host.ratio - 1
    if round(abs(change) * 100) == 0:
        return "the host ran at the same speed during the run and the reference"
    word = "faster" if change < 0 else "slower"
    return f"the host ran {abs(change):.0%} {word} during the run than the reference"


def probe_readings(record: BenchmarkRun) -> list[float]:
    """The record's host-probe readings, each once: the step benchmark takes one probe per
    time stage and gives it to every row's repeat timed in that stage, so a reading shared
    by rows is one look at the host, not several."""
    readings = {
        repeat.host_probe_ms
        for row in record.rows
        for repeat in getattr(row, "repeats", None) or []
        if getattr(repeat, "host_probe_ms", None) is not None  # a kind's repeats may not
    }
    return sorted(readings)


def host_drift(
    run: BenchmarkRun, reference: BenchmarkRun, run_label: str, reference_label: str
) -> tuple[stats.Drift | None, str]:
    """The host's drift between the records (None when a side has no probe readings) and
    the header's line on it."""
    run_ms, ref_ms = probe_readings(run), probe_readings(reference)
    missing = [
        f"{which} {label}"
        for which, label, readings in (
            ("RUN", run_label, run_ms),
            ("REFERENCE", reference_label, ref_ms),
        )
        if not readings
    ]
    if missing:
        return None, f"no host probe in {' or '.join(missing)}: drift between the runs not checked"
    host = stats.drift(run_ms, ref_ms)
    line = (
        f"host drift: the host probe read {host.ratio:.3f}x [{host.low:.3f}, {host.high:.3f}] "
        f"run / reference ({host.readings[0]} and {host.readings[1]} readings): "
        f"{_host_speed(host)}"
    )
    return host, line


# --- a busy host: how much slower it could have made a side --------------------------------

# A busy reading as the idle check words it (dew.bench.runtime.idle): a record made before
# repeats kept the load as a number says it only here.
_USED = re.compile(r"used (\d+(?:\.\d+)?)% of a core")


def repeat_load(repeat) -> float | None:
    """The CPU other processes used when the repeat's host was found busy, in cores; None
    when the reading does not bound it (a busy card, processes left unnamed)."""
    reason = repeat.host_busy
    if "GPU" in reason:  # a card's other work is no share of the host's cores
        return None
    if getattr(repeat, "host_load_cores", None) is not None:
        return repeat.host_load_cores
    if "more busy processes" in reason:
        return None
    found = _USED.findall(reason)
    return sum(float(x) for x in found) / 100 if found else None


def host_share(repeat, device_is_host: bool) -> float:
    """How much of a repeat's time is the host's, 0-1: the host's time to issue one step over
    the step's (a device-bound step is issued well ahead of the device); 1 where the device
    is the host's own cores, or the issue time was not measured."""
    host_ms = getattr(repeat, "host_ms", None)
    ms = getattr(repeat, "ms_per_step", None)
    if device_is_host or host_ms is None or not ms:
        return 1.0
    return min(1.0, host_ms / ms)


def repeat_bias(repeat, cores: int | None, device_is_host: bool) -> float:
    """How much slower (log scale) than its stack a repeat may have read because the host was
    busy: log(1 + share · s), share the part of the step that is the host's (host_share)
    and s what other work of L cores could take from it on a host of C. Where it and the
    row's own process (u cores: all C where the device is the host, else measured over its
    window, or one, the dispatch thread, where a record did not measure it) fit in the host,
    the scheduler keeps them apart and the other work takes at most its share of what they
    share, L/C; where they do not, a thread of the row may share a core with it and lose
    as much as the overflow, L + u - C, up to all of L (and never more than all of one
    core). 0 for a repeat the idle check found quiet (what a quiet host does is the
    records' noise); inf where the reading does not bound it."""
    if not getattr(repeat, "host_busy", None):
        return 0.0
    load = repeat_load(repeat)
    if load is None or not cores:
        return math.inf
    # Where the device is the host, the row's XLA threads want every core: what it measured
    # beside the other work is what it got, not what it wanted.
    used = getattr(repeat, "host_cores", None)
    if device_is_host:
        used = cores
    elif used is None:
        used = 1.0
    overflow = min(1.0, load, max(0.0, load + used - cores))
    return math.log1p(host_share(repeat, device_is_host) * max(load / cores, overflow))


def side_bias(row, record: BenchmarkRun) -> float:
    """The bound repeat_bias gives a row's figure (the mean of its repeats' logs): the mean
    of its repeats' bounds."""
    repeats = getattr(row, "repeats", None) or []
    if not repeats:
        return 0.0
    host = record.environment.host
    devices = record.environment.devices
    device_is_host = (record.kind != "step" or devices is None
                      or platforms.get(devices.platform).host_cores)  # fmt: skip
    cores = host.logical_cores if host is not None else None
    return sum(repeat_bias(r, cores, device_is_host) for r in repeats) / len(repeats)


def busy_line(row: StepRow | DataRow | Record, side: str, bias: float | None = None) -> str:
    """`the host was busy for k of n repeats (side)`, with what it could have done to the
    row, or "" when it never was."""
    repeats = getattr(row, "repeats", None) or []
    busy = [repeat for repeat in repeats if getattr(repeat, "host_busy", None)]
    if not busy:
        return ""
    line = (
        f"the host was busy for {len(busy)} of {len(repeats)} {side} repeats ({busy[0].host_busy})"
    )
    if bias is None:
        return line
    reach = "by an amount its reading does not bound" if math.isinf(bias) else (
        f"at most {math.expm1(bias):.2%} slower")  # fmt: skip
    return f"{line}: it could have read {reach}"


def biases(tested, records) -> tuple[np.ndarray, np.ndarray]:
    """Per compared row (dew.bench.analysis.comparison.RowComparison) how much slower its
    run and its reference may have read than their stacks because their host was busy
    (side_bias, from `records`: the run's and the reference's; none without them)."""
    if records is None:
        return np.zeros(len(tested)), np.zeros(len(tested))
    return tuple(np.array([side_bias(getattr(row, which), record) for row in tested])
                 for which, record in zip(("run", "reference"), records, strict=True))  # fmt: skip


def busy_why(row, held: str, run_bias: float, ref_bias: float) -> str | None:
    """Why a row the busy host's bound made undecided would have read `held` otherwise (None:
    the bound changed nothing), naming the busy side and what it could have done."""
    if held == "undecided":
        return None
    lines = [line for line in (busy_line(row.run, "run", run_bias if run_bias else None),
                               busy_line(row.reference, "ref", ref_bias if ref_bias else None))
             if line]  # fmt: skip
    if not lines:
        return (
            f"{held} but for the host: another row's busy side moves the shift it is judged against"
        )
    return f"{held} while " + "; ".join(lines)
