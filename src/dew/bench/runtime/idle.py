"""Is the host idle? Sample it for a few seconds before measuring.

The seed's lesson: unet read 54 ms/step under load against 16.4 idle. So both benchmark
tools call `guard(mode)` before their first measurement:
    off    no sampling; the record says the check did not run
    warn   sample, print one warning line on stderr when busy, measure anyway (the default)
    error  sample and refuse to measure when busy: raises HostNotIdle, a SystemExit whose
           message is one line, so a tool that does not catch it still exits non-zero
           without a traceback; its `.check` holds the readings for the record.

The verdict comes from what other processes did during the window (CPU time per process,
from psutil) and, with an NVIDIA GPU, its utilisation and foreign compute processes (NVML).
The load average is recorded but not judged: it is a minute-long trailing mean, so it still
carries whatever finished just before the check (a build, the previous row's compile).

`python -m dew.bench.runtime.idle [--window S] [--mode warn|error]` prints the readings as JSON;
exit 0 idle (or busy in warn mode), 1 busy in error mode, 2 bad flags (one line).
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import time
from collections.abc import Collection
from typing import Literal

import psutil

from dew.bench.common import cli
from dew.bench.common.units import GIB
from dew.bench.record.schema import GpuReading, IdleCheck, ProcessReading
from dew.telemetry import nvml

PROG = "python -m dew.bench.runtime.idle"
MODES = ("error", "warn", "off")


@dataclasses.dataclass(frozen=True)
class Thresholds:
    """Percent of one core (psutil's unit) and percent GPU utilisation."""

    process_cpu_percent: float = 10.0  # one other process busier than this: not idle
    others_cpu_percent: float = 50.0  # all other processes together: half a core
    gpu_util_percent: float = 10.0


class HostNotIdle(SystemExit):
    """Raised by guard() in error mode: str(self) is the one line for the user."""

    def __init__(self, check: IdleCheck):
        self.check = check
        super().__init__(
            "error: host is not idle, refusing to measure: "
            + "; ".join(check.reasons)
            + " (rerun on a quiet host, or pass --idle-check warn to measure anyway)"
        )


def guard(
    mode: str,
    *,
    window_s: float = 3.0,
    thresholds: Thresholds = Thresholds(),
    watch: Collection[int] | None = None,
) -> IdleCheck:
    """The pre-measurement check both tools run; see the module docstring for the modes."""
    if mode not in MODES:
        raise cli.UsageError(f"--idle-check {mode!r} is not a mode; valid: {', '.join(MODES)}")
    if mode == "off":
        return IdleCheck(
            mode="off",
            idle=None,
            window_s=None,
            cpu_percent=None,
            others_cpu_percent=None,
            logical_cores=psutil.cpu_count(),
            load_avg_1m=None,
            note="idle check turned off (--idle-check off)",
        )
    check = sample(mode, window_s=window_s, thresholds=thresholds, watch=watch)
    if not check.idle:
        if mode == "error":
            raise HostNotIdle(check)
        print(
            "warning: host is not idle, measuring anyway: " + "; ".join(check.reasons),
            file=sys.stderr,
        )
    return check


def busy_and_load(check: IdleCheck | None) -> tuple[str | None, float | None]:
    """What a repeat keeps of a check: why the host was busy (None: idle, or not checked)
    and the CPU other processes used, in cores (compare's busy gate weighs it against the
    host's size)."""
    if check is None or check.idle is None:
        return None, None
    load = None if check.others_cpu_percent is None else check.others_cpu_percent / 100
    return (None if check.idle else "; ".join(check.reasons) or "busy"), load


def sample(
    mode: str = "warn",
    *,
    window_s: float = 3.0,
    thresholds: Thresholds = Thresholds(),
    watch: Collection[int] | None = None,
    exclude: Collection[int] = (),
    top: int = 5,
) -> IdleCheck:
    """Sample the host for `window_s` seconds and judge whether it is idle.

    watch: judge only these processes (and their children) instead of every process on the
    host; for a job that owns a host slice or a test that must not depend on its neighbours.
    exclude: processes not to count besides this one (e.g. the tool's own parent).
    """
    ignored = {os.getpid(), *exclude}
    notes = [] if watch is None else [f"judged on watched processes only: {sorted(watch)}"]
    with nvml.session() as cards:
        gpu = None
        if cards:  # the cards CUDA_VISIBLE_DEVICES shows a run, by their NVML index
            indices, why = cards.visible(os.environ.get("CUDA_VISIBLE_DEVICES"))
            gpu = _GpuSampler(cards, indices)
            notes += [f"GPUs: {why}"] if why else []
        # Reading every process takes a while on a busy host: time each snapshot at its
        # midpoint so a process's CPU seconds are divided by the span they were counted in.
        t0 = time.monotonic()
        before = _cpu_seconds()
        psutil.cpu_percent(interval=None)  # starts the host-wide counter
        t1 = time.monotonic()
        if gpu:
            gpu_utils = gpu.sample_during(window_s)
        else:
            time.sleep(window_s)
        host_cpu = psutil.cpu_percent(interval=None)
        t2 = time.monotonic()
        after = _cpu_seconds()
        elapsed = (t2 + time.monotonic()) / 2 - (t0 + t1) / 2
        gpus = gpu.readings(gpu_utils, ignored) if gpu else None

    watched = _with_children(watch) if watch is not None else None
    readings = []
    for pid, (key, seconds, name) in after.items():
        if pid in ignored or (watched is not None and pid not in watched):
            continue
        # A process born during the window spent all its CPU time inside it.
        start_seconds = before[pid][1] if pid in before and before[pid][0] == key else 0.0
        percent = max(0.0, seconds - start_seconds) / elapsed * 100
        readings.append(ProcessReading(pid=pid, name=name, cpu_percent=round(percent, 1)))
    readings.sort(key=lambda r: r.cpu_percent, reverse=True)
    others = sum(r.cpu_percent for r in readings)

    reasons = []
    busy = [r for r in readings if r.cpu_percent >= thresholds.process_cpu_percent]
    for r in busy[:top]:
        reasons.append(f"pid {r.pid} ({r.name}) used {r.cpu_percent:.0f}% of a core")
    if len(busy) > top:
        reasons.append(f"{len(busy) - top} more busy processes")
    if others >= thresholds.others_cpu_percent and not busy:
        reasons.append(f"other processes used {others:.0f}% of a core together")
    for g in gpus or []:
        if g.util_percent is not None and g.util_percent >= thresholds.gpu_util_percent:
            reasons.append(f"GPU {g.index} was {g.util_percent:.0f}% busy")
        for p in g.foreign_processes:
            reasons.append(f"GPU {g.index} runs compute process pid {p.pid} ({p.name})")

    return IdleCheck(
        mode=mode,
        idle=not reasons,
        window_s=round(elapsed, 3),
        cpu_percent=host_cpu,
        others_cpu_percent=round(others, 1),
        logical_cores=psutil.cpu_count(),
        load_avg_1m=round(os.getloadavg()[0], 2),
        busiest=readings[:top],
        gpus=gpus,
        reasons=reasons,
        note="; ".join(notes) or None,
    )


def _cpu_seconds() -> dict[int, tuple[float, float, str]]:
    """pid -> (create time, user + system CPU seconds, name), for every readable process."""
    out = {}
    for proc in psutil.process_iter(["name", "cpu_times", "create_time"]):
        info = proc.info
        times = info.get("cpu_times")
        if times is None:  # access denied or gone
            continue
        out[proc.pid] = (info["create_time"], times.user + times.system, info["name"] or "?")
    return out


def _with_children(pids: Collection[int]) -> set[int]:
    found = set(pids)
    for pid in pids:
        try:
            found.update(c.pid for c in psutil.Process(pid).children(recursive=True))
        except psutil.Error:
            pass
    return found


class _GpuSampler:
    """NVML utilisation sampled through the window, on the cards of an open nvml.session()."""

    def __init__(self, cards: nvml.Nvml, indices: list[int]):
        self.nv, self.indices = cards.nv, indices
        self.handles = [cards.handles[index] for index in indices]

    def sample_during(self, window_s: float, interval_s: float = 0.2) -> list[list[float]]:
        utils: list[list[float]] = [[] for _ in self.handles]
        end = time.monotonic() + window_s
        while True:
            for i, h in enumerate(self.handles):
                util = nvml.reading(lambda h=h: self.nv.nvmlDeviceGetUtilizationRates(h).gpu)
                if util is not None:
                    utils[i].append(util)
            left = end - time.monotonic()
            if left <= 0:
                return utils
            time.sleep(min(interval_s, left))

    def readings(self, utils: list[list[float]], ignored: set[int]) -> list[GpuReading]:
        out = []
        for i, h in enumerate(self.handles):
            memory = nvml.reading(lambda h=h: self.nv.nvmlDeviceGetMemoryInfo(h))
            used = memory.used / GIB if memory is not None else None
            foreign = []
            procs = nvml.reading(lambda h=h: self.nv.nvmlDeviceGetComputeRunningProcesses(h))
            for p in procs or []:
                if p.pid in ignored:
                    continue
                try:
                    name = psutil.Process(p.pid).name()
                except psutil.Error:  # another container's pid namespace
                    name = "?"
                foreign.append(ProcessReading(pid=p.pid, name=name, cpu_percent=0.0))
            samples = utils[i]
            out.append(
                GpuReading(
                    index=self.indices[i],
                    util_percent=round(sum(samples) / len(samples), 1) if samples else None,
                    memory_used_gib=round(used, 2) if used is not None else None,
                    foreign_processes=foreign,
                )
            )
        return out


@dataclasses.dataclass
class Args:
    """Sample the host and print the idle-check readings as JSON. Exit 0: idle, or busy in
    warn mode; 1: busy in error mode; 2: bad flags."""

    window: float = 3.0
    """seconds to sample (> 0)"""
    mode: Literal["warn", "error"] = "warn"
    """warn: a busy host is reported, exit 0; error: exit 1"""


def main(argv: list[str] | None = None) -> int:
    return cli.run(PROG, lambda: _check(sys.argv[1:] if argv is None else list(argv)))


def _check(argv: list[str]) -> int:
    args = cli.parse(Args, argv, prog=PROG)
    if not 0 < args.window < math.inf:  # a NaN fails this too
        raise cli.UsageError(f"--window {args.window:g} is not a positive number of seconds")
    check = sample(args.mode, window_s=args.window)
    print(check.model_dump_json(indent=2))
    if not check.idle:
        print("host is not idle: " + "; ".join(check.reasons), file=sys.stderr)
        return cli.EXIT_CHANGED if args.mode == "error" else cli.EXIT_OK
    return cli.EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
