"""The host's gates on a change: the host probe's drift between two records, and a busy
host during a side's repeats. A change either explains is `undecided`
(dew.bench.analysis.comparison applies them; the probe times the CPU, so its drift gates
only comparisons of CPU records)."""

from __future__ import annotations

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


def busy_line(row: StepRow | DataRow | Record, side: str) -> str:
    """`the host was busy for k of n repeats (side)`, or "" when it never was."""
    repeats = getattr(row, "repeats", None) or []
    busy = sum(1 for repeat in repeats if getattr(repeat, "host_busy", None))
    return f"the host was busy for {busy} of {len(repeats)} {side} repeats" if busy else ""


def busy_explaining(
    run: StepRow | DataRow | Record, reference: StepRow | DataRow | Record, word: str
) -> str:
    """The busy side that could have made a row read `word`, as busy_line says it, or "".

    Other work on the host only takes time from the side it ran beside: a busy run can
    read slower than its stack is, a busy reference can make the run read faster. So a
    `slower` is held against the run's repeats, a `faster` against the reference's; a
    busy reference under a `slower` only narrows what was shown, and it stands."""
    if word == "slower":
        return busy_line(run, "run")
    if word == "faster":
        return busy_line(reference, "ref")
    return ""
