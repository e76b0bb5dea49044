"""dew.bench.runtime.progress: plain lines off a terminal (no escape codes, result lines
verbatim), the
ETA arithmetic, thread safety, and the live region drawn by real rich into a StringIO."""

import io
import re
import threading
import time

import pytest

from dew.bench.runtime.progress import Progress, format_duration, stage_eta

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
CLOSED = re.compile(r"\x1b\[\?25h\r(\x1b\[1A\x1b\[2K)+\Z")  # cursor shown, region erased
# Result lines that rich would mangle if it read them as markup, emoji codes or highlights.
TRICKY = [
    "[1/3] unet: ok (14.9 s) 33.47 ms/step, 0.0273 GFLOP, compile 6.1 s",
    "[2/3] dit [bold]x[/bold]: error (0.2 s): :smile: ValueError('bad') http://x.y/z",
    "[3/3] flux: ok (1.0 s) " + "w" * 150,
]


class Clock:
    """A clock the test moves by hand."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_format_duration():
    assert [format_duration(s) for s in (None, 0, 41.6, 80, 3599, 7500)] == [
        "?", "0s", "42s", "1m20s", "59m59s", "2h05m",
    ]  # fmt: skip


def test_stage_eta_is_the_mean_times_the_cases_left_over_the_cases_at_once():
    assert stage_eta([], 5, 2) is None  # nothing finished: unknown
    assert stage_eta([10.0, 30.0], 6, 2) == pytest.approx(60.0)  # 20 x 6 / 2
    assert stage_eta([10.0, 30.0], 6, 1) == pytest.approx(120.0)
    # The last case of a 4-wide stage takes one case's time, not a quarter of it.
    assert stage_eta([8.0], 1, 4) == pytest.approx(8.0)
    assert stage_eta([8.0], 0, 4) == 0.0


def test_plain_mode_writes_no_escape_codes_and_every_finish_line_verbatim():
    out, clock = io.StringIO(), Clock()
    labels = ["unet", "dit", "flux"]
    with Progress(labels, stream=out, live=None, clock=clock) as progress:  # StringIO: no tty
        assert progress.live is False
        progress.stage("compile", [0, 1, 2], parallel=2)
        progress.set(0, "compiling")
        progress.set(0, "compiling")  # no change, no line
        progress.set(1, "compiling")
        clock.now += 10
        progress.finish(0, TRICKY[0])
        progress.set(2, "compiling")
        progress.note("a note [red]as is[/red]")
        progress.finish(1, TRICKY[1], ok=False)
        progress.finish(2, TRICKY[2])
        progress.finish(2, TRICKY[2])  # twice: printed again, counted once
    text = out.getvalue()
    assert "\x1b" not in text
    assert text.splitlines() == [
        "[compile] 3 cases, 2 at a time",
        "[compile 1/3] unet: compiling (ETA ?)",
        "[compile 2/3] dit: compiling (ETA ?)",
        TRICKY[0],
        "[compile 3/3] flux: compiling (ETA 10s)",  # 10 s x 2 left / 2 at once
        "a note [red]as is[/red]",
        TRICKY[1],
        TRICKY[2],
        "[compile] 3 done, 1 failed in 10s",
        TRICKY[2],
    ]


def test_eta_of_a_stage_from_the_cases_it_finished():
    out, clock = io.StringIO(), Clock()
    progress = Progress(["a", "b", "c", "d"], stream=out, live=False, clock=clock)
    progress.stage("compile", [0, 1, 2, 3], parallel=2)
    progress.set(0, "compiling")
    progress.set(1, "compiling")
    clock.now += 10
    progress.finish(0, "a done")  # took 10 s
    progress.set(2, "compiling")  # 10 x 3 left / 2 = 15 s
    clock.now += 20
    progress.finish(1, "b done")  # took 30 s: mean 20
    progress.set(3, "compiling")  # 20 x 2 / 2
    clock.now += 20
    progress.finish(2, "c done")  # took 40 s: mean 26.7
    progress.set(3, "compiled")  # one left, one at a time: 26.7
    progress.close()
    lines = [line for line in out.getvalue().splitlines() if "ETA" in line]
    assert [line.rsplit(" ", 1)[-1] for line in lines] == ["?)", "?)", "15s)", "20s)", "27s)"]

    # One at a time, no phase given: a case's time runs from the previous finish.
    out = io.StringIO()
    progress = Progress(["a", "b", "c"], stream=out, live=False, clock=clock)
    progress.stage("time", [0, 1, 2])
    clock.now += 5
    progress.finish(0, "a timed")
    clock.now += 7
    progress.finish(1, "b timed")
    progress.set(2, "timing")  # mean 6 s x 1 left
    assert out.getvalue().splitlines()[-1] == "[time 3/3] c: timing (ETA 6s)"


def test_a_case_outside_the_stage_joins_it_and_an_unknown_index_is_an_error():
    out = io.StringIO()
    progress = Progress(["a", "b"], stream=out, live=False)
    progress.set(1, "loading")  # no stage yet: one over every case
    progress.stage("time", [0])
    progress.set(1, "timing")
    assert out.getvalue().splitlines()[-1] == "[time 2/2] b: timing (ETA ?)"
    with pytest.raises(IndexError, match="case 2 is not one of the 2 cases"):
        progress.set(2, "timing")


class Trickle(io.StringIO):
    """A stream that takes a write a character at a time, letting other threads run in
    between, as a pipe may split a long write: unguarded writers would interleave."""

    def write(self, text: str) -> int:
        for char in text:
            super().write(char)
            time.sleep(0)
        return len(text)


def test_many_threads_at_once_leave_whole_lines_each_finish_once():
    out = Trickle()
    count, workers = 64, 8
    progress = Progress([f"case{i}" for i in range(count)], stream=out, live=False)
    progress.stage("compile", range(count), parallel=workers)
    start, errors = threading.Barrier(workers), []

    def work(indices):
        start.wait()
        try:
            for i in indices:
                for phase in ("compiling", "compiled", "writing"):
                    progress.set(i, phase)
                progress.finish(i, f"result of case{i}")
        except Exception as error:  # an error in a thread would otherwise pass unseen
            errors.append(error)

    threads = [
        threading.Thread(target=work, args=(range(k, count, workers),)) for k in range(workers)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    progress.close()
    assert errors == []
    lines = out.getvalue().splitlines()
    assert sorted(line for line in lines if line.startswith("result")) == sorted(
        f"result of case{i}" for i in range(count)
    )
    assert sum(": compiling (ETA" in line for line in lines) == count
    assert sum(line.startswith("[compile] ") for line in lines) == 2  # begun, done
    assert lines[-1].startswith(f"[compile] {count} done in ")
    assert all(re.fullmatch(r"(\[compile[^\]]*\] .*|result of case\d+)", line) for line in lines)


def test_live_mode_draws_the_stage_and_its_cases_and_keeps_the_result_lines():
    out, clock = io.StringIO(), Clock()
    with Progress(["unet", "dit", "flux"], stream=out, live=True, clock=clock) as progress:
        progress.stage("compile", [0, 1, 2], parallel=2)
        progress.set(0, "compiling")
        clock.now += 12
        progress.set(1, "compiling")
        progress.finish(0, TRICKY[0])
        clock.now += 3
        progress.set(1, "loading")
        progress.finish(1, TRICKY[1], ok=False)
        progress.note(TRICKY[2])  # longer than the 80 columns: not broken
    raw = out.getvalue()
    assert "\x1b[1A" in raw and "\x1b[2K" in raw  # a real live region: cursor up, erase line
    assert CLOSED.search(raw)  # closed: the cursor back, the region erased
    text = ANSI.sub("", raw)
    assert re.search(r"compile  0/3 done  elapsed 0s  ETA \?", text)
    assert re.search(r"unet +compiling +12s", text)  # label, phase, seconds in it
    assert re.search(r"flux +queued +15s", text)
    assert re.search(r"compile  1/3 done  elapsed 12s  ETA 12s", text)
    assert re.search(r"dit +loading +0s", text)
    # 12 s and 3 s (dit from its first phase): 7.5 s x 1 left.
    assert re.search(r"compile  2/3 done, 1 failed  elapsed 15s  ETA 8s", text)
    for line in TRICKY:  # above the erased region, verbatim and unstyled, a line each
        assert f"\x1b[2K{line}\n" in raw
    assert "[compile] 3 done" not in text  # flux never finished


def test_live_mode_sums_up_the_queued_cases_a_short_terminal_has_no_room_for(monkeypatch):
    monkeypatch.setenv("LINES", "7")
    out = io.StringIO()
    with Progress([f"case{i}" for i in range(10)], stream=out, live=True) as progress:
        progress.stage("time", range(10))
        progress.set(0, "timing")
    text = ANSI.sub("", out.getvalue())
    last = text[text.rindex("time  0/10 done") :]
    # 7 lines: the header, the running case, three queued, and the rest summed up.
    assert re.search(r"case0 +timing", last)
    assert "case3" in last and "case4" not in last
    assert "+ 6 more" in last


def test_an_error_inside_closes_the_live_region():
    out = io.StringIO()
    with pytest.raises(RuntimeError, match="boom"):
        with Progress(["unet"], stream=out, live=True) as progress:
            progress.stage("compile", [0])
            progress.set(0, "compiling")
            raise RuntimeError("boom")
    assert CLOSED.search(out.getvalue())
    assert progress._live.is_started is False


def test_a_case_can_leave_a_stage_without_a_line_and_still_count_for_the_eta():
    out, clock = io.StringIO(), Clock()
    with Progress(["unet", "dit"], stream=out, live=False, clock=clock) as progress:
        progress.stage("compile", [0, 1])
        progress.set(0, "compiling")
        clock.now += 8
        progress.set(0, "compiled, waiting")
        progress.finish(0, None)  # compiled: it waits for the time stage, nothing to print
        progress.set(1, "compiling")
    assert out.getvalue().splitlines() == [
        "[compile] 2 cases",
        "[compile 1/2] unet: compiling (ETA ?)",
        "[compile 1/2] unet: compiled, waiting (ETA ?)",
        "[compile 2/2] dit: compiling (ETA 8s)",
    ]


def test_the_silent_default_takes_the_whole_interface_and_says_nothing(capsys):
    from dew.bench.runtime.progress import SilentProgress

    with SilentProgress() as progress:
        progress.stage("compile", [0, 1], parallel=2)
        progress.set(0, "compiling")
        progress.finish(0, "[1/2] unet: ok")
        progress.note("a note")
    assert capsys.readouterr() == ("", "")
    assert issubclass(Progress, SilentProgress)  # what a round takes, drawn
