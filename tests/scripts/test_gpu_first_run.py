"""scripts/first_gpu_run.py as a user runs it: bad input is one line and exit 2 before
anything is written (a tree without .git needs --commit); every stage runs under a timeout
from what is left of the budget, a tool past its own is ended; the cases that fit the step
stage's share are chosen from the published figures (scripts/first_gpu_cases.py); on CPU
(`--platform cpu --preset cpu-smoke`) every stage runs and leaves its files in the one
output directory (slow tier)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "first_gpu_run.py"


def run(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *argv],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def one_line(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("first_gpu_run: error: ") and "Traceback" not in done.stderr
    assert done.stdout == ""
    return line.removeprefix("first_gpu_run: error: ")


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--bogus", "1"], "unrecognized argument --bogus; valid: --out, --wheels"),
        (["--preset", "cpu-smoke"], "--preset cpu-smoke runs on CPU: pass --platform cpu"),
        (["--preset", "huge"], "--preset 'huge' is not valid; valid: small, cpu-smoke"),
        (["--platform", "tpu"], "--platform 'tpu' is not valid; valid: cuda, cpu"),
        (["--budget-s", "ten"], "--budget-s 'ten' is not a number of seconds"),
        (["--budget-s", "nan"], "--budget-s must be 60..86400 seconds (got nan)"),
        (["--steps", "0"], "--steps must be a whole number >= 1 (got '0')"),
        (["--repeats", "x"], "--repeats must be a whole number >= 1 (got 'x')"),
        (["--aa-records", "7"], "--aa-records must be a whole number 1..6 (got '7')"),
        (["--aa-records", "0"], "--aa-records must be a whole number 1..6 (got '0')"),
        (["--commit", "main"], "--commit 'main' is not a commit SHA (7 to 40 hex digits)"),
        (["--architectures"], "--architectures needs at least one name"),
        (["--out"], "--out needs a value"),
    ],
)
def test_bad_flags_are_one_line(argv, expected):
    assert one_line(run(*argv)).startswith(expected)


def test_an_existing_output_directory_is_refused_and_left_as_it_was(tmp_path):
    (tmp_path / "step.json").write_text("an earlier run")
    line = one_line(run("--platform", "cpu", "--preset", "cpu-smoke", "--out", str(tmp_path)))
    assert line == f"--out {tmp_path} exists and is not an empty directory; give a new one"
    assert [p.name for p in tmp_path.iterdir()] == ["step.json"]
    assert (tmp_path / "step.json").read_text() == "an earlier run"


def test_an_output_that_cannot_be_made_is_one_line(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    line = one_line(run("--platform", "cpu", "--preset", "cpu-smoke", "--out", str(blocker / "o")))
    assert line.startswith(f"--out {blocker / 'o'}: cannot write there")


def test_help_is_exit_0():
    done = run("--help")
    assert done.returncode == 0 and "first run of dew" in done.stdout


@pytest.mark.slow
def test_every_stage_runs_on_cpu(tmp_path):
    out = tmp_path / "run"
    done = run(
        "--platform", "cpu", "--preset", "cpu-smoke", "--architectures", "simple_dit",
        "--steps", "2", "--aa-records", "1", "--out", str(out), timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    summary = (out / "summary.md").read_text()
    for stage in ("install", "step benchmark", "loader", "compare", "validate"):
        assert f"| {stage} | ok" in summary
    assert "| clocks | skipped: no GPU clocks to lock on CPU |" in summary
    assert "| A/A records | 1 A/A records of " in summary and (out / "aa-1.json").is_file()
    assert not (out / "aa-2.json").exists()  # --aa-records 1: one A/A record, not six
    step = json.loads((out / "step.json").read_text())
    (row,) = step["rows"]
    assert row["gpu"]["note"] == "no NVIDIA GPU: platform cpu"
    assert (
        len(row["repeats"]) == 3 and step["settings"]["options"]["compilation_cache_dir"] == "off"
    )
    logs = [repeat["log"] for repeat in row["repeats"]]
    assert logs == ["simple_dit-1.log", "simple_dit-2.log", "simple_dit-3.log"]
    assert all((out / "step.logs" / log).is_file() for log in logs)
    assert "no NVIDIA GPU: platform cpu" in (out / "gpu.md").read_text()
    assert "| simple_dit | all |" in (out / "fingerprints.md").read_text()
    assert "### Stack differences" in (out / "compare.md").read_text()
    assert {"data-workers-0.json", "data-workers-8.json"} <= {p.name for p in out.iterdir()}
    report = (out / "report.md").read_text()
    assert all(f"## {name}" in report for name in ("summary.md", "step.md", "compare.md"))


# --- in this process: the script's own parts --------------------------------------------------


@pytest.fixture(scope="module")
def script():
    sys.path.insert(0, str(REPO / "scripts"))
    import first_gpu_cases
    import first_gpu_run

    return first_gpu_run, first_gpu_cases


def test_a_tree_without_git_needs_the_commit(tmp_path):
    """A copy of the script and the lock, as the GPU machine gets the tree: no .git."""
    for part in ("scripts/first_gpu_run.py", "scripts/first_gpu_cases.py",
                 "scripts/first_gpu_install.py", "scripts/first_gpu_noise.py",
                 "locks/cuda13.txt"):  # fmt: skip
        (tmp_path / part).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / part).write_bytes((REPO / part).read_bytes())
    done = subprocess.run(
        [sys.executable, str(tmp_path / "scripts/first_gpu_run.py"), "--platform", "cpu",
         "--preset", "cpu-smoke", "--no-install"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert one_line(done) == (
        f"{tmp_path} has no .git and no --commit was given: pass --commit SHA, the commit "
        "this tree was copied from (git rev-parse HEAD where it has .git), so the records "
        "name it"
    )
    assert not (tmp_path / "results").exists()  # nothing written


def test_the_commit_given_reaches_every_stage(script, tmp_path):
    first_gpu_run, _ = script
    assert first_gpu_run.check_commit(tmp_path, "cf98d6a") == "cf98d6a"  # no .git: needed
    args = {"out": tmp_path, "platform": "cuda", "preset": "small", "commit": "cf98d6a"}
    env = first_gpu_run.environment(args)
    assert env["DEW_COMMIT"] == "cf98d6a"  # what dew.bench.record.capture reads without .git
    assert (env["XLA_PYTHON_CLIENT_PREALLOCATE"], env["XLA_PYTHON_CLIENT_MEM_FRACTION"]) == (
        "false",
        "0.8",
    )


def test_a_tool_past_its_timeout_is_ended_and_says_so(script, tmp_path):
    first_gpu_run, _ = script
    sleeper = ["-c", "import os, time; print(os.getpid(), flush=True); time.sleep(120)"]
    code = first_gpu_run.tool(
        {"out": tmp_path}, "sleeper", sleeper, timeout=1, env=dict(os.environ)
    )
    assert code == 124
    pid = int((tmp_path / "sleeper.out").read_text())
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()


def stage_calls(first_gpu_run, monkeypatch, *flags: str) -> list[tuple[str, float]]:
    """The script run on CPU with `flags`, every tool replaced by one that notes (name,
    timeout) and succeeds (the step one writes a record): the calls, in order."""
    calls = []

    def tool(args, name, argv, *, timeout, env=None, table=None):
        calls.append((name, timeout))
        if name == "step":
            published = REPO / "results/published/2026-09-05-rtx4080-9886c20-rerun.json"
            (args["out"] / "step.json").write_text(published.read_text())
        return 0

    monkeypatch.setattr(first_gpu_run, "tool", tool)
    args = first_gpu_run.parse(["--platform", "cpu", "--preset", "cpu-smoke", "--no-install",
                                *flags])  # fmt: skip
    assert first_gpu_run.run(args) == 0
    return calls


def test_every_stage_runs_under_a_timeout_within_the_budget(script, tmp_path, monkeypatch):
    """The tools replaced by one that notes its timeout (the step one writes a record):
    every stage gets one, and together they stay inside the budget."""
    first_gpu_run, _ = script
    calls = stage_calls(first_gpu_run, monkeypatch, "--out", str(tmp_path / "run"),
                        "--budget-s", "560")  # fmt: skip
    names = [name for name, _ in calls]
    aa = [f"aa-{n}" for n in range(1, 7)]  # the A/A records, up to NOISE_MAX_RECORDS
    assert names == ["step", *aa, "prepare", "data-workers-0", "data-workers-8", "compare",
                     "validate"]  # fmt: skip
    assert all(timeout is not None and timeout > 0 for _, timeout in calls)
    # The A/A records share one stage's timeout (each gets what is left of it).
    aa_stage = max(timeout for name, timeout in calls if name.startswith("aa-"))
    assert sum(t for name, t in calls if not name.startswith("aa-")) + aa_stage <= 560
    assert calls[0][1] <= 560 - sum(first_gpu_run.AFTER_STEP_S.values())


def test_aa_records_caps_the_noise_stage(script, tmp_path, monkeypatch):
    """--aa-records 2: the stage makes two A/A records though its share has time for six."""
    first_gpu_run, _ = script
    calls = stage_calls(first_gpu_run, monkeypatch, "--out", str(tmp_path / "run"),
                        "--aa-records", "2")  # fmt: skip
    assert [name for name, _ in calls if name.startswith("aa-")] == ["aa-1", "aa-2"]


def test_a_refused_clock_lock_runs_the_step_stage_again_without_it(script, tmp_path, monkeypatch):
    """On CUDA as root the step stage asks for --lock-clocks max; a host that refuses it
    (one line, exit 2, no record) gets the stage again without the flag, and says so."""
    first_gpu_run, _ = script
    steps = []

    def tool(args, name, argv, *, timeout, env=None, table=None):
        if name == "step":
            steps.append(argv)
            if "--lock-clocks" in argv:
                (args["out"] / "step.log").write_text(
                    "tools/benchmark_step.py: error: no permission\n"
                )
                return 2
            published = REPO / "results/published/2026-09-05-rtx4080-9886c20-rerun.json"
            (args["out"] / "step.json").write_text(published.read_text())
        return 0

    monkeypatch.setattr(first_gpu_run, "tool", tool)
    monkeypatch.setattr(first_gpu_run.os, "geteuid", lambda: 0)
    args = first_gpu_run.parse(["--no-install", "--out", str(tmp_path / "run"),
                                "--budget-s", "560"])  # fmt: skip
    assert first_gpu_run.run(args) == 1  # the refusal is a finding of the run
    assert [("--lock-clocks" in argv) for argv in steps] == [True, False]
    cases = json.loads(steps[1][steps[1].index("--cases") + 1])
    assert cases[0] == {"architecture": "simple_dit", "attention_impl": "cudnn"}
    assert steps[1][steps[1].index("--repeats") + 1] == "3"
    summary = (tmp_path / "run" / "summary.md").read_text()
    refused = (
        "| clocks | refused, the step stage ran again without: tools/benchmark_step.py: error: "
    )
    assert refused in summary
    assert "| step benchmark | ok |" in summary


PUBLISHED = {
    "simple_dit": {"compile_s": 8.0, "ms_per_step": 7.0},
    "unet": {"compile_s": 36.4, "ms_per_step": 16.4},
    "uvit": {"compile_s": 9.4, "ms_per_step": 23.0},
}


def test_the_cases_that_fit_are_chosen_cheapest_first_and_the_rest_said(script):
    _, plan = script
    simple = plan.cost_s(PUBLISHED["simple_dit"], repeats=3, steps=100)
    assert simple == pytest.approx(3 * (8.0 + plan.PER_REPEAT_S + 202 * 0.007 + 1.0))
    seconds = plan.STEP_FIXED_S + 2 * simple + 1  # room for simple_dit twice, no more
    chosen, left_out = plan.choose(PUBLISHED, seconds, repeats=3, steps=100, cudnn=True)
    assert [entry["case"] for entry in chosen] == [
        {"architecture": "simple_dit", "attention_impl": "cudnn"},  # the GPU's own path first
        {"architecture": "simple_dit"},
    ]
    why = {entry["label"]: entry["why"] for entry in left_out}
    assert why["uvit"].startswith("does not fit: 80 s estimated, 1 s left")
    assert why["causal_transformer (moe)"] == "no published figures"
    assert why["flux_transformer"] == "no published figures"
    chosen, _ = plan.choose(PUBLISHED, 1000, repeats=3, steps=100, cudnn=False)
    assert [e["label"] for e in chosen] == ["simple_dit", "uvit", "unet"]  # no cudnn on CPU


def test_the_newest_plain_published_row_is_the_figure(script):
    _, plan = script
    figures = plan.published_figures(REPO / "results" / "published")
    # the 09-05 rerun over the 09-02 table; its head_chunks rows are not the preset's case
    assert figures["simple_dit"]["compile_s"] == 8.0
    assert figures["causal_transformer"]["ms_per_step"] == 88.78
    assert figures["unet"]["record"] == "2026-09-02-rtx4080-6b0f119-small.json"
