"""The loopback launcher: N processes of tools/benchmark_step.py on one host (CPU, gloo),
for the nox session `multihost-smoke` and the tests.

    python -m dew.bench.multihost.launch --processes 2 --json-out run.json -- --preset cpu-smoke

starts 2 processes of the step tool with 8 / 2 simulated CPU devices each, forwards
process 0's progress lines, prints process 0's table and checks the record (every row ok,
one process entry per process, a spread on every row). When a process dies, the others
stop within half the heartbeat timeout, each saying so in one line
(dew.train.distributed.PeerWatch; when the dead one is process 0, which hosts the
runtime's coordinator, the runtime aborts them at once), and the launcher sums it up in
one line; the record then keeps its `partial` mark. What runs inside each process across
the runtime (exchange, combine) is dew.bench.multihost.combine.
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import tyro

from dew.bench.common import cli
from dew.bench.record.schema import read_run

SIMULATED_DEVICES = 8  # the cpu-smoke mesh, split over the processes


# absl log lines, their stack traces and gloo's connection chatter (whose lines processes'
# threads can interleave, "[Gloo] Rank " left on the line before): kept in the logs only.
_NOISE = re.compile(
    r"^([IWEF]\d{4} |\s+@ |\[Gloo\]|\*\*\* |=== |RPC: |external/|$"
    # Gloo's connection lines, whole or torn: its threads print them at once, so a line may
    # be any piece of one
    r"|.*peer ranks)"
)
_WORD = re.compile(r"[A-Za-z]")  # a line without one says no why: a torn piece such as "7"
_FATAL = re.compile(r"Terminating process because (.*?)(\. This most likely|$)")
_UNHEALTHY = re.compile(r"tasks are unhealthy \(stopped sending heartbeats\):")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def process_environment(
    index: int, processes: int, devices: int, port: int, heartbeat_s: int
) -> dict[str, str]:
    env = dict(os.environ)
    flags = re.sub(r"--xla_force_host_platform_device_count=\S+", "", env.get("XLA_FLAGS", ""))
    env.update(
        JAX_PLATFORMS="cpu",
        XLA_FLAGS=f"{flags} --xla_force_host_platform_device_count={devices}".strip(),
        DEW_COORDINATOR_ADDRESS=f"127.0.0.1:{port}",
        DEW_NUM_PROCESSES=str(processes),
        DEW_PROCESS_ID=str(index),
        DEW_HEARTBEAT_TIMEOUT_S=str(heartbeat_s),
        DEW_INIT_TIMEOUT_S=env.get("DEW_INIT_TIMEOUT_S", "300"),
        PYTHONUNBUFFERED="1",
    )
    return env


@dataclass
class Launch:
    """N processes of one command on loopback; stderr of each in `log_dir/process-i.log`."""

    command: list[str]
    processes: int
    devices_per_process: int
    log_dir: Path
    heartbeat_s: int = 10
    forward: bool = True  # echo process 0's own lines (progress, table) to this stderr/stdout
    popen: list[subprocess.Popen] = field(default_factory=list)
    stdout: list[str] = field(default_factory=list)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> Launch:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        port = free_port()
        self.stdout = [""] * self.processes
        for index in range(self.processes):
            env = process_environment(
                index, self.processes, self.devices_per_process, port, self.heartbeat_s
            )
            process = subprocess.Popen(
                self.command,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,  # a signal to the launcher's group does not hit them
            )
            self.popen.append(process)
            for stream, sink in ((process.stdout, "out"), (process.stderr, "err")):
                thread = threading.Thread(target=self._pump, args=(index, stream, sink))
                thread.daemon = True
                thread.start()
                self._threads.append(thread)
        return self

    def _pump(self, index: int, stream, sink: str) -> None:
        path = self.log_dir / f"process-{index}.log"
        with open(path, "a") as log:
            for line in stream:
                log.write(line)
                log.flush()
                if sink == "out":
                    self.stdout[index] += line
                elif self.forward and index == 0 and not _NOISE.match(line):
                    print(line, end="", file=sys.stderr, flush=True)

    def wait(self, timeout_s: float, grace_s: float | None = None) -> tuple[list[int], str | None]:
        """Return codes, and one line saying what went wrong (None when all exited 0).

        When a process fails the others get `grace_s` (default: twice the heartbeat
        timeout) to stop on their own, then are killed; past `timeout_s` all are killed.
        """
        grace_s = 2 * self.heartbeat_s + 10 if grace_s is None else grace_s
        deadline = time.monotonic() + timeout_s
        first_failure: tuple[int, float] | None = None
        start = time.monotonic()
        while any(p.poll() is None for p in self.popen):
            now = time.monotonic()
            if first_failure is None:
                for index, process in enumerate(self.popen):
                    if process.poll() not in (None, 0):
                        first_failure = (index, now)
                        deadline = min(deadline, now + grace_s)
                        break
            if now > deadline:
                for process in self.popen:
                    if process.poll() is None:
                        process.kill()
            time.sleep(0.2)
        for thread in self._threads:
            thread.join(timeout=5)
        codes = [p.returncode for p in self.popen]
        if all(code == 0 for code in codes):
            return codes, None
        return codes, self._summary(codes, first_failure, time.monotonic() - start)

    def _summary(self, codes: list[int], first: tuple[int, float] | None, seconds: float) -> str:
        parts = []
        order = [first[0]] if first else []
        order += [i for i in range(len(codes)) if i not in order]
        for index in order:
            code = codes[index]
            if code == 0:
                continue
            how = f"died of {signal.Signals(-code).name}" if code < 0 else f"exited {code}"
            reason = self._reason(index)
            parts.append(f"process {index} {how}" + (f" ({reason})" if reason else ""))
        return f"multihost: {'; '.join(parts)} after {seconds:.0f} s; logs in {self.log_dir}"

    def _reason(self, index: int) -> str | None:
        """Why a process stopped, from its log: the runtime's fatal line or its last line."""
        path = self.log_dir / f"process-{index}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        fatal = _FATAL.search(text)
        if fatal:
            reason = fatal.group(1).strip()
            if _UNHEALTHY.search(text):
                dead = text[_UNHEALTHY.search(text).end() :].strip().splitlines()[:1]
                reason = f"peers stopped sending heartbeats: {dead[0] if dead else '?'}"
            return reason[:200]
        lines = [
            line.strip()
            for line in text.splitlines()
            if not _NOISE.match(line) and _WORD.search(line)
        ]
        return lines[-1][:200] if lines else None


def check_record(path: Path, processes: int) -> str | None:
    """What is wrong with a finished multi-process record (None: nothing)."""
    record = read_run(path)
    listed = record.environment.processes or []
    if processes > 1 and len(listed) != processes:  # a single process joins nothing
        return f"{path}: environment lists {len(listed)} processes, expected {processes}"
    if record.partial:
        return f"{path}: the record is partial: {record.partial}"
    for row in record.rows:
        if row.status != "ok":
            return f"{path}: {row.architecture} failed: {row.error}"
        if processes > 1 and row.ms_per_step is not None and row.process_spread_ms is None:
            return f"{path}: {row.architecture} has no process_spread_ms"
    if not record.rows:
        return f"{path}: no rows"
    return None


STEP_TOOL = [
    sys.executable,
    "-c",
    "import sys; from dew.bench.sweep.step_command import main; sys.exit(main())",
]


@dataclasses.dataclass(frozen=True)
class Args:
    """Run tools/benchmark_step.py as N processes on loopback (CPU, gloo); the step tool's
    own flags follow `--`."""

    json_out: Path
    """the run's record"""
    tool_args: Annotated[tuple[str, ...], tyro.conf.Positional] = ()
    """benchmark_step.py flags (after --)"""
    processes: int = 2
    """processes"""
    devices_per_process: int | None = None
    """simulated CPU devices each (default 8 / processes)"""
    timeout: float = 1800
    """kill all after this many seconds"""
    heartbeat: int = 20
    """dead-peer timeout in seconds"""
    log_dir: Path | None = None
    """per-process logs (default: a new temporary directory)"""


def devices_per_process(args: Args) -> int:
    if args.processes < 1:
        raise cli.UsageError(f"--processes {args.processes} must be at least 1")
    devices = args.devices_per_process or SIMULATED_DEVICES // args.processes
    if devices < 1 or (args.devices_per_process is None and SIMULATED_DEVICES % args.processes):
        raise cli.UsageError(
            f"--processes {args.processes} does not divide {SIMULATED_DEVICES} "
            "devices; valid: 1, 2, 4, 8, or give --devices-per-process"
        )
    return devices


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    return cli.run("multihost", lambda: launch(cli.parse(Args, argv, prog=PROG)))


PROG = "python -m dew.bench.multihost.launch"


def launch(args: Args) -> int:
    devices = devices_per_process(args)
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="dew-multihost-"))
    command = [*STEP_TOOL, *args.tool_args, "--json-out", str(args.json_out)]
    start = time.monotonic()
    launch = Launch(command, args.processes, devices, log_dir, heartbeat_s=args.heartbeat)
    codes, failure = launch.start().wait(args.timeout)
    seconds = time.monotonic() - start
    sys.stdout.write(
        "".join(line for line in launch.stdout[0].splitlines(True) if not _NOISE.match(line))
    )
    if failure and not (all(code in (0, 1) for code in codes) and args.json_out.exists()):
        print(failure, file=sys.stderr)
        return 1
    problem = check_record(args.json_out, args.processes)
    if problem:
        print(f"multihost: {problem}", file=sys.stderr)
        return 1
    print(
        f"multihost: {args.processes} processes x {devices} devices: record {args.json_out} "
        f"checked, wall {seconds:.1f} s",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
