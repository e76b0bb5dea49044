"""tools/benchmark_data.py keeps its raw samples and measures --repeats N in N processes:
every row holds its per-batch intervals and a 95% interval (schema 2); --repeats 2 runs
two child processes and the row is their median; a bad --repeats, bad input found in a
child, a child that dies and a child past its deadline (killed with its workers) are each
one line."""

import os
import sys
import threading
import time

import pytest
from infra.processes import gone

from dew.bench.loader import data_command as data
from dew.bench.loader import measure
from dew.bench.loader.data_command import main, measure_loader
from dew.bench.record.schema import SCHEMA_VERSION, BenchmarkRun, DataRow, read_run
from dew.data.spec import SyntheticImages

# One worker-less, thread-less configuration of a tiny in-memory or prepared set: each child
# process costs its imports (~3 s), not the loading.
FAST = ["--data.loading.workers", "0", "--data.loading.threads", "0", "--idle-check", "off"]
TINY = ["--batch", "2", "--steps", "4", "--warmup", "1", *FAST]
REAL_SPAWN = measure.spawn  # every repeat's process starts there


def is_child(command) -> bool:
    return list(command[-2:]) == ["-m", "dew.bench.loader.measure"]


def one_error_line(capsys) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("tools/benchmark_data.py: error: "), lines[0]
    return lines[0].removeprefix("tools/benchmark_data.py: error: ")


def test_a_row_keeps_its_per_batch_intervals():
    spec = SyntheticImages(num_records=8, loading={"workers": 0, "threads": 0})
    row = measure_loader(spec, batch=2, steps=5, warmup=1, notify=lambda line: None)
    assert len(row.repeats) == 1
    (repeat,) = row.repeats
    assert len(repeat.intervals_ms) == 5 and all(value >= 0 for value in repeat.intervals_ms)
    assert repeat.first_batch_s == row.first_batch_s > 0
    # one process says nothing of the next one's: no interval (the steps feed the warnings)
    assert row.samples_per_s_ci95 is None
    assert row.samples_per_s == pytest.approx(repeat.samples_per_s, rel=1e-3)
    assert DataRow.model_validate_json(row.model_dump_json()) == row


def test_one_repeat_runs_in_this_process_and_writes_schema_2(tmp_path, monkeypatch, capsys):
    def no_child(name, command, *args, **kwargs):
        assert not is_child(command), "--repeats 1 must not start a process"
        return REAL_SPAWN(name, command, *args, **kwargs)

    monkeypatch.setattr(measure, "spawn", no_child)
    out = tmp_path / "data.json"
    argv = ["data:synthetic-images", "--data.num-records", "8", *TINY, "--json-out", str(out)]
    assert main(argv) == 0
    record = read_run(out)
    assert record.schema_version == SCHEMA_VERSION >= 3
    assert record.settings.repeats == 1
    (row,) = record.rows
    assert len(row.repeats) == 1 and len(row.repeats[0].intervals_ms) == 4
    assert row.samples_per_s_ci95 is None
    assert "median of" not in capsys.readouterr().out  # one repeat: no interval printed


def test_two_repeats_are_two_processes(prepared_synthetic, tmp_path, monkeypatch, capsys):
    children = []

    def counting_spawn(name, command, *args, **kwargs):
        if is_child(command):
            children.append(command)
        return REAL_SPAWN(name, command, *args, **kwargs)

    monkeypatch.setattr(measure, "spawn", counting_spawn)
    out = tmp_path / "data.json"
    argv = ["data:synthetic-images", "--data.path", str(prepared_synthetic), *TINY]
    assert main(argv + ["--repeats", "2", "--json-out", str(out)]) == 0

    assert len(children) == 2
    record = BenchmarkRun.model_validate_json(out.read_text())  # validates as schema 2
    assert record.schema_version == SCHEMA_VERSION and record.settings.repeats == 2
    (row,) = record.rows
    assert len(row.repeats) == 2
    assert all(r.first_batch_s > 0 and len(r.intervals_ms) == 4 for r in row.repeats)
    # A host-probe reading of its own before each repeat (dew.bench.runtime.hostprobe).
    probes = [r.host_probe_ms for r in row.repeats]
    assert all(probe is not None and probe > 0 for probe in probes) and len(set(probes)) == 2
    assert row.samples_per_s_ci95 is not None
    assert "2 repeats: their spread is a guess (3 or more)" in row.warnings
    captured = capsys.readouterr()
    low, high = row.samples_per_s_ci95
    assert f"[{low:.1f}, {high:.1f}] (median of 2 repeats)" in captured.out
    assert "  warning: 2 repeats: their spread is a guess" in captured.out
    assert "repeat 1/2: " in captured.err and "repeat 2/2: " in captured.err


@pytest.mark.parametrize("value", ["0", "-1"])
def test_repeats_below_one_is_one_line(tmp_path, capsys, value):
    out = tmp_path / "data.json"
    argv = ["data:synthetic-images", *TINY, "--repeats", value, "--json-out", str(out)]
    assert main(argv) == 2
    assert one_error_line(capsys) == f"--repeats must be at least 1 (got {value})"
    assert not out.exists()


def test_bad_input_found_in_a_child_is_one_line(prepared_synthetic, tmp_path, capsys):
    # The set's name is checked when the source opens, in the child: still exit 2, one line.
    out = tmp_path / "data.json"
    argv = ["data:oxford-flowers", "--data.path", str(prepared_synthetic), *TINY]
    assert main(argv + ["--repeats", "2", "--json-out", str(out)]) == 2
    assert one_error_line(capsys).startswith(
        f"--data.path {prepared_synthetic} holds the prepared dataset 'synthetic_images'"
    )
    assert not out.exists()


# A repeat's process that says what it was doing on stderr, then is killed (the OOM killer).
DIES = "import os, sys; print('loading'); print('Killed', file=sys.stderr, flush=True); " \
    "os.kill(os.getpid(), 9)"  # fmt: skip
# One that starts a worker (in its process group), writes both pids, then stops: a hang.
HANGS = """
import os, signal, subprocess, sys
worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
open(sys.argv[1], "w").write(f"{os.getpid()} {worker.pid}")
os.kill(os.getpid(), signal.SIGSTOP)
"""


def test_a_child_that_dies_is_one_line_and_exit_1(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(measure, "CHILD", [sys.executable, "-c", DIES])
    out = tmp_path / "data.json"
    argv = ["data:synthetic-images", *TINY, "--repeats", "2", "--json-out", str(out)]
    assert main(argv) == 1
    assert one_error_line(capsys) == "repeat 1 of 2: the loader's process died of SIGKILL: Killed"
    assert not out.exists()


def test_a_child_past_its_deadline_is_killed_with_its_workers_and_one_line(
    tmp_path, monkeypatch, capsys
):
    pids = tmp_path / "pids"
    monkeypatch.setattr(measure, "CHILD", [sys.executable, "-c", HANGS, str(pids)])
    out = tmp_path / "data.json"
    argv = ["data:synthetic-images", *TINY, "--repeats", "2", "--json-out", str(out)]
    argv += ["--case-timeout", "3"]
    start = time.monotonic()
    # Should the deadline not work, the stopped child is killed at 60 s: the test then fails
    # (a death, not a timeout) rather than hang.
    watchdog = threading.Timer(60, lambda: os.killpg(int(pids.read_text().split()[0]), 9))
    watchdog.start()
    try:
        assert main(argv) == 1
    finally:
        watchdog.cancel()
    assert time.monotonic() - start < 60  # not the 30 min default
    assert one_error_line(capsys) == (
        "repeat 1 of 2: the loader's process timed out after 3 s in the repeat, waiting for its row"
    )
    assert not out.exists()
    child, worker = (int(pid) for pid in pids.read_text().split())
    assert gone(child)  # reaped
    waited = time.monotonic() + 10  # a SIGKILL to its group reaches the worker soon after
    while not gone(worker) and time.monotonic() < waited:
        time.sleep(0.05)
    assert gone(worker), "the repeat's worker outlived it"


def test_a_repeat_has_a_deadline_by_default():
    # 30 min, and 0.1 s more for every sample read: the defaults' 105 batches of 8, 84 s.
    assert measure.protocol.LOADER_REPEAT_S == 30 * 60
    assert measure.repeat_deadline(batch=8, steps=100, warmup=5) == 30 * 60 + 84


def test_the_repeat_in_this_process_has_a_host_probe_reading_taken_before_it(monkeypatch):
    order = []
    real_probe, real_loader = data.hostprobe.measure, data.measure_loader

    def probe():
        order.append("probe")
        return real_probe()

    def loader(*args, **kwargs):
        order.append("loader")
        return real_loader(*args, **kwargs)

    monkeypatch.setattr(data.hostprobe, "measure", probe)
    monkeypatch.setattr(data, "measure_loader", loader)
    args = data.parse_args(["data:synthetic-images", "--data.num-records", "8", *TINY])
    row = data.measure_repeats(args, notify=lambda line: None)
    assert order == ["probe", "loader"]
    (repeat,) = row.repeats
    assert repeat.host_probe_ms is not None and repeat.host_probe_ms > 0
    assert repeat.host_busy is None
