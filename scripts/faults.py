"""Faults a run meets, caused for real: each must end in one clear line with nothing lost.

    JAX_PLATFORMS=cpu python scripts/faults.py [--only NAME ...]

Each fault is injected into a real cpu-smoke sweep (tools/benchmark_step.py) or loader run
(tools/benchmark_data.py) in a scratch directory: a case process stopped with SIGSTOP (a
hung case), a record on a full disk (a small tmpfs, root only), a second run on a record
another run holds, SIGTERM and SIGINT to a running sweep, a case under a memory limit, a
damaged compilation cache, and `kill -9` of the run itself. While a run goes, every process
of its tree is noted; afterwards the ones still alive are "left".

One row per fault: the fault, the exit code, the line that names it, the rows the record
kept (ok of all), the processes left, and whether all of that is what the fault should
give (`expect`). Exit 0 when every fault met its expectation, 1 otherwise.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

import psutil

from dew.bench.common import cli

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the tmpfs and the memory cgroup: tests/infra
STEP = [sys.executable, str(REPO / "tools" / "benchmark_step.py"), "--preset", "cpu-smoke",
        "--idle-check", "off", "--steps", "5"]  # fmt: skip
TWO = ["--architectures", "simple_dit", "uvit"]
THREE = ["--architectures", "simple_dit", "uvit", "jepa_encoder"]
WAIT_S = 600  # no fault may take a run longer than this


@dataclasses.dataclass
class Outcome:
    """What one fault gave."""

    fault: str
    exit: int | None
    line: str  # the stderr line that names the fault (or the last one)
    rows: str  # "ok of all" in the record afterwards ("no record": none)
    left: int  # processes of the run's tree alive afterwards
    seconds: float
    met: bool = False
    why: str = ""  # what did not meet the expectation


class Tree:
    """Every process of a run's tree seen while it runs (polled), to count what is left."""

    def __init__(self, pid: int):
        self.root, self.seen = pid, {pid}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(psutil.Error):
                self.seen |= {p.pid for p in psutil.Process(self.root).children(recursive=True)}
            time.sleep(0.1)

    def children(self) -> list[psutil.Process]:
        with contextlib.suppress(psutil.Error):
            return psutil.Process(self.root).children(recursive=True)
        return []

    def left(self, grace_s: float = 5.0) -> int:
        """The tree's processes still alive `grace_s` after the run ended (zombies not)."""
        self._stop.set()
        self._thread.join()
        deadline = time.monotonic() + grace_s
        while True:
            alive = [pid for pid in self.seen if pid != self.root and _alive(pid)]
            if not alive or time.monotonic() > deadline:
                return len(alive)
            time.sleep(0.2)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def start(argv: Sequence[str], env: dict[str, str] | None = None) -> tuple[subprocess.Popen, Tree]:
    process = subprocess.Popen(
        list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu", **(env or {})}, cwd=REPO,
    )  # fmt: skip
    return process, Tree(process.pid)


def finish(process: subprocess.Popen, tree: Tree) -> tuple[int | None, str, str, int]:
    try:
        out, err = process.communicate(timeout=WAIT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
    return process.returncode, out, err, tree.left()


def rows(record: Path) -> str:
    try:
        found = json.loads(record.read_text())["rows"]
    except (OSError, ValueError, KeyError):
        return "no record"
    ok = sum(1 for row in found if row.get("status") == "ok")
    return f"{ok} ok of {len(found)}"


def wait_for(condition: Callable[[], bool], timeout_s: float = WAIT_S) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return False


def naming(stderr: str, *words: str) -> str:
    """The stderr line holding every word, else the last line."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    for line in lines:
        if all(word in line for word in words):
            return line.strip()
    return lines[-1].strip() if lines else ""


def case_children(tree: Tree) -> list[psutil.Process]:
    """The case processes of a sweep: the forkserver's children (forked, they share its
    command line)."""
    found = []
    for process in tree.children():
        with contextlib.suppress(psutil.Error):
            parent = process.parent()
            if (
                parent is not None
                and parent.pid != tree.root
                and "forkserver" in " ".join(parent.cmdline())
            ):
                found.append(process)
    return found


def traceback_in(stderr: str) -> bool:
    return "Traceback (most recent call last)" in stderr


# --- the faults ------------------------------------------------------------------------------


def hung_case(d: Path) -> Outcome:
    """A case process stopped in its compile (what a stuck collective looks like from
    outside): its row fails at --case-timeout and the sweep goes on."""
    record = d / "hung.json"
    timeout_s = 30
    argv = [*STEP, *TWO, "--compile-jobs", "1", "--case-timeout", str(timeout_s),
            "--compilation-cache-dir", "off", "--json-out", str(record)]  # fmt: skip
    begin = time.monotonic()
    process, tree = start(argv)
    wait_for(lambda: bool(case_children(tree)) or process.poll() is not None)
    stopped = time.monotonic()
    for child in case_children(tree)[:1]:
        child.send_signal(signal.SIGSTOP)
    failed_at: list[float] = []
    watcher = threading.Thread(target=lambda: wait_for(
        lambda: '"failed"' in _text(record) and not failed_at.append(time.monotonic())
    ), daemon=True)  # fmt: skip
    watcher.start()
    code, _, err, left = finish(process, tree)
    line = naming(err, "timed out")
    moved = f"; moved on {failed_at[0] - stopped:.0f} s after the stop" if failed_at else ""
    outcome = Outcome("hung case (SIGSTOP, --case-timeout 30)", code, line + moved, rows(record),
                      left, time.monotonic() - begin)  # fmt: skip
    return expect(outcome, err, code=1, words=(f"timed out after {timeout_s} s",),
                  kept="1 ok of 2")  # fmt: skip


def two_writers(d: Path) -> Outcome:
    """A second run on a record another run holds is refused; the first keeps its row."""
    record = d / "shared.json"
    begin = time.monotonic()
    first, first_tree = start([*STEP, "--architectures", "simple_dit", "--json-out", str(record)])
    wait_for(lambda: bool(first_tree.children()) or first.poll() is not None)
    time.sleep(1.0)  # the first run holds the record's lock from its start
    second = subprocess.run(
        [*STEP, "--architectures", "uvit", "--json-out", str(record), "--overwrite"],
        capture_output=True, text=True, env={**os.environ, "JAX_PLATFORMS": "cpu"}, cwd=REPO,
        timeout=WAIT_S,
    )  # fmt: skip
    code, _, _, left = finish(first, first_tree)
    line = naming(second.stderr, "error")
    outcome = Outcome("two runs on one --json-out", second.returncode, line, rows(record), left,
                      time.monotonic() - begin)  # fmt: skip
    if code != 0:
        outcome.why = f"the first run exited {code}"
    return expect(outcome, second.stderr, code=2, words=("error",), kept="1 ok of 1")


def stop_signal(d: Path, which: signal.Signals) -> Outcome:
    """SIGTERM or SIGINT once the first row is in the record: one line, the rows kept."""
    record = d / f"{which.name.lower()}.json"
    begin = time.monotonic()
    process, tree = start([*STEP, *THREE, "--compile-jobs", "1", "--json-out", str(record)])
    wait_for(lambda: rows(record).startswith(("1 ok", "2 ok")) or process.poll() is not None)
    process.send_signal(which)
    code, _, err, left = finish(process, tree)
    outcome = Outcome(f"{which.name} during the sweep", code, naming(err, "interrupted"),
                      rows(record), left, time.monotonic() - begin)  # fmt: skip
    exit_code = 128 + int(which) if which == signal.SIGTERM else 130
    return expect(outcome, err, code=exit_code, words=("interrupted", "--resume"), kept=None)


def killed_run(d: Path) -> Outcome:
    """`kill -9` of the run: nothing can be said, but no case process may outlive it."""
    record = d / "killed.json"
    begin = time.monotonic()
    process, tree = start([*STEP, *TWO, "--compilation-cache-dir", "off", "--json-out",
                           str(record)])  # fmt: skip
    wait_for(lambda: bool(case_children(tree)) or process.poll() is not None)
    process.kill()
    code, _, err, left = finish(process, tree)
    outcome = Outcome("kill -9 of the run", code, "(none: SIGKILL cannot be caught)",
                      rows(record), left, time.monotonic() - begin)  # fmt: skip
    return expect(outcome, err, code=-9, words=(), kept=None, traceback_ok=True)


def damaged_cache(d: Path) -> Outcome:
    """A compilation cache whose entries are truncated or garbage: the case recompiles."""
    cache, record = d / "cache", d / "cache.json"
    argv = [*STEP, "--architectures", "simple_dit", "--compilation-cache-dir", str(cache)]
    first = subprocess.run([*argv, "--json-out", str(d / "warm.json")], capture_output=True,
                           text=True, cwd=REPO, timeout=WAIT_S)  # fmt: skip
    entries = [p for p in cache.rglob("*") if p.is_file()]
    for index, path in enumerate(entries):  # half truncated, half garbage
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 3] if index % 2 else os.urandom(len(data)))
    begin = time.monotonic()
    process, tree = start([*argv, "--json-out", str(record)])
    code, _, err, left = finish(process, tree)
    line = naming(err, "cache")
    outcome = Outcome(f"damaged compilation cache ({len(entries)} entries)", code, line,
                      rows(record), left, time.monotonic() - begin)  # fmt: skip
    if first.returncode != 0:
        outcome.why = f"the warming run exited {first.returncode}"
    return expect(outcome, err, code=0, words=("cache",), kept="1 ok of 1")


def full_disk(d: Path) -> Outcome:
    """The record's folder on a disk with room for the first rows only (a 64 KiB tmpfs,
    filled): one line naming the path and ENOSPC, the row on stdout, nothing started after."""
    from infra import full_disk as disk_tools

    disk = d / "disk"
    begin = time.monotonic()
    with disk_tools.tmpfs(disk) as mounted:
        disk_tools.fill(mounted, leave=4 * disk_tools.PAGE)  # the lock and the first row
        record = mounted / "run.json"
        process, tree = start([*STEP, *THREE, "--compile-jobs", "1", "--json-out", str(record)])
        code, out, err, left = finish(process, tree)
        kept = rows(record)
    line = naming(err, "No space left")
    outcome = Outcome("full disk under --json-out (tmpfs)", code, line, kept, left,
                      time.monotonic() - begin)  # fmt: skip
    if "\t" not in out:
        outcome.why = "no row on stdout"
    return expect(outcome, err, code=1, words=("cannot write", "No space left"), kept="1 ok of 1")


def out_of_memory(d: Path) -> Outcome:
    """The run in a 600 MiB memory cgroup, where a case's compile needs ~800 MiB: the
    kernel kills each case's process, its row says so, and the sweep goes on."""
    from infra.memory_cgroup import memory_cgroup

    record = d / "memory.json"
    begin = time.monotonic()
    with memory_cgroup(600 * 1024**2) as cgroup:
        argv = [*cgroup.argv, *STEP, *TWO, "--compile-jobs", "1", "--compilation-cache-dir",
                "off", "--json-out", str(record)]  # fmt: skip
        process, tree = start(argv)
        code, _, err, left = finish(process, tree)
        left += len(cgroup.left())
    found = json.loads(_text(record) or '{"rows": []}')["rows"]
    errors = [row.get("error") or "" for row in found]
    line = next((e for e in errors if e.startswith("out of memory")), naming(err, "memory"))
    outcome = Outcome("a case out of memory (600 MiB cgroup)", code, line, rows(record), left,
                      time.monotonic() - begin)  # fmt: skip
    if len(found) != 2:
        outcome.why = f"{len(found)} rows: the sweep did not go on to the second case"
    return expect(outcome, err, code=1, words=("out of memory",), kept="0 ok of 2")


def _text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def expect(outcome: Outcome, stderr: str, *, code: int, words: Sequence[str],
           kept: str | None, traceback_ok: bool = False) -> Outcome:  # fmt: skip
    """Whether the outcome is what the fault should give; `why` says what is not."""
    problems = [outcome.why] if outcome.why else []
    if outcome.exit != code:
        problems.append(f"exit {outcome.exit}, not {code}")
    missing = [word for word in words if word not in outcome.line]
    if missing:
        problems.append(f"no line naming {', '.join(missing)}")
    if kept is not None and outcome.rows != kept:
        problems.append(f"record {outcome.rows}, not {kept}")
    if outcome.left:
        problems.append(f"{outcome.left} processes left")
    if traceback_in(stderr) and not traceback_ok:
        problems.append("a traceback")
    outcome.met, outcome.why = not problems, "; ".join(problems)
    return outcome


# --- the table ------------------------------------------------------------------------------

FAULTS: dict[str, Callable[[Path], Outcome]] = {
    "hung-case": hung_case,
    "full-disk": full_disk,
    "two-writers": two_writers,
    "sigterm": lambda d: stop_signal(d, signal.SIGTERM),
    "sigint": lambda d: stop_signal(d, signal.SIGINT),
    "out-of-memory": out_of_memory,
    "damaged-cache": damaged_cache,
    "kill-9": killed_run,
}


def run_fault(name: str, scratch: Path) -> Outcome:
    """One fault in its own scratch folder; a fault this host cannot cause (not root, no
    memory controller) is reported as not met, with the reason."""
    folder = scratch / name
    folder.mkdir()
    try:
        return FAULTS[name](folder)
    except BaseException as error:  # noqa: BLE001 - pytest.skip (infra) is a BaseException
        if type(error).__name__ != "Skipped":
            raise
        return Outcome(name, None, f"cannot be caused here: {error}", "—", 0, 0.0, False,
                       "not caused")  # fmt: skip


def table(outcomes: Sequence[Outcome]) -> str:
    lines = ["| fault | exit | the line | rows kept | processes left | s | met |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for o in outcomes:
        met = "yes" if o.met else f"NO: {o.why}"
        line = o.line.replace("|", "\\|")
        lines.append(f"| {o.fault} | {o.exit} | {line} | {o.rows} | {o.left} | "
                     f"{o.seconds:.0f} | {met} |")  # fmt: skip
    return "\n".join(lines) + "\n"


FaultName = Literal["hung-case", "full-disk", "two-writers", "sigterm", "sigint",
                   "out-of-memory", "damaged-cache", "kill-9"]  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Args:
    """Cause each fault in a real run and print what happened. Exit 0: every fault met
    its expectation; 1: one did not."""

    only: tuple[FaultName, ...] = ()
    """these faults only (default: all)"""


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    return cli.run("faults", lambda: check(cli.parse(Args, argv, prog="scripts/faults.py")))


def check(args: Args) -> int:
    names = list(args.only) or list(FAULTS)
    with tempfile.TemporaryDirectory(prefix="dew-faults-") as scratch:
        outcomes = []
        for name in names:
            print(f"[{name}] ...", file=sys.stderr, flush=True)
            outcomes.append(run_fault(name, Path(scratch)))
            print(f"[{name}] {'met' if outcomes[-1].met else outcomes[-1].why}", file=sys.stderr)
    print(table(outcomes), end="")
    return 0 if all(o.met for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
