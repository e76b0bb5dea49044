"""Every command speaks dew (issue 52): its error and usage lines name the command as typed
(`dew compare`, `tools/benchmark_step.py`), bad input is one line and exit 2 before any
work, a usage mistake is never dressed as a verdict, and no output ends in a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "results"
SMALL = RESULTS / "published" / "2026-09-02-rtx4080-6b0f119-small.json"
LOADER = RESULTS / "published" / "oxford-flowers-loader.json"
SMOKE = RESULTS / "runs" / "20261203T072630Z-cpu-smoke-two-cpu-d90a3f0" / "step.json"


def run(argv: list[str], cwd: Path = REPO) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "JAX_PLATFORMS": "cpu"}
    env.pop("DEW_TYPED_COMMAND", None)
    return subprocess.run(argv, capture_output=True, text=True, cwd=cwd, env=env)


def dew(*argv: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "dew.commands", *argv], cwd)


def one_line(done: subprocess.CompletedProcess, code: int = 2) -> str:
    assert done.returncode == code, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    (line,) = done.stderr.splitlines()
    return line


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["compare", "--frob", "a.json"], "dew compare: error: unrecognized argument --frob;"),
        (["compare", "-x", "a.json"], "dew compare: error: unrecognized argument -x;"),
        (["compare"], "dew compare: error: missing RUN"),
        (["validate", "--frob", "a.json"], "dew validate: error: unrecognized argument --frob;"),
        (["schema"], "dew schema: error: missing --export"),
        (["step", "--preset", "big"], "dew step: error: --preset 'big' is not valid"),
        (["data", "data:imagenet"], "dew data: error: unknown dataset 'data:imagenet'"),
        (["report", "--frob"], "dew report: error: unrecognized argument --frob;"),
        (["ab", "A", "B", "--architectures", "uvit", "--steps", "0"], "dew ab: error: --steps"),
        (["reproduce"], "dew reproduce: error: takes one step record"),
    ],
)
def test_an_error_names_the_command_typed(argv, said):
    assert one_line(dew(*argv)).startswith(said)


@pytest.mark.parametrize(
    ("tool", "argv"),
    [
        ("tools/benchmark_step.py", ["--preset", "big"]),
        ("tools/benchmark_data.py", ["data:imagenet"]),
        ("tools/prepare_dataset.py", ["--synthetic", "0", "--out", "x"]),
    ],
)
def test_a_tool_names_its_path(tool, argv):
    line = one_line(run([sys.executable, str(REPO / tool), *argv]))
    assert line.startswith(f"{tool}: error: ")


def test_the_usage_lines_say_what_each_command_takes():
    compare = dew("compare", "--help").stdout
    assert compare.splitlines()[0] == "usage: dew compare [-h] [OPTIONS] RUN [REFERENCE]"
    validate = dew("validate", "--help").stdout
    assert validate.startswith("usage: dew validate [-h] PATH [PATH ...]")
    assert "(default: )" not in validate
    reproduce = dew("reproduce", "--help").stdout.splitlines()[0]
    assert reproduce.endswith(" RECORD.json") and "..." not in reproduce.split("]")[-1]


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        ([str(SMOKE), str(SMOKE)], "are one file: a record against itself shows nothing"),
        ([str(SMOKE), str(SMALL)], "share no comparable row"),  # cpu-smoke vs the RTX 4080's
    ],
)
def test_a_comparison_that_cannot_be_one_is_a_usage_mistake(argv, said):
    line = one_line(dew("compare", *argv, "--strict"))
    assert line.startswith("dew compare: error: RUN ") and said in line


@pytest.mark.parametrize(
    "argv",
    [
        ["step", "--preset", "cpu-smoke", "--steps", "9" * 23, "--compile-only"],
        ["step", "--preset", "cpu-smoke", "--warmup", "9" * 23],
        ["data", "data:synthetic-images", "--data.path", "x", "--steps", "9" * 23],
    ],
)
def test_a_count_past_32_bits_is_refused_before_any_work(argv):
    assert "must be at most 2,147,483,647" in one_line(dew(*argv))


def bad_records(tmp_path: Path) -> dict[str, Path]:
    def write(name: str, text: str) -> Path:
        (tmp_path / name).write_text(text)
        return tmp_path / name

    return {
        "a list": write("list.json", "[1]"),
        "no settings": write("kind.json", '{"kind": "step"}'),
        "settings a list": write("s.json", json.dumps({"kind": "step", "settings": []})),
        "not JSON": write("bad.json", "{"),
        "missing": tmp_path / "missing.json",
        "a folder": tmp_path,
        "a loader record": LOADER,
        "noise.json": RESULTS / "noise.json",
    }


@pytest.mark.parametrize(
    "kind",
    ["a list", "no settings", "settings a list", "not JSON", "missing", "a folder",
     "a loader record", "noise.json"],
)  # fmt: skip
def test_reproduce_refuses_a_bad_record_in_dews_words(tmp_path, kind):
    """Before nox starts: no Python exception text (TypeError(...), KeyError('settings'))."""
    line = one_line(dew("reproduce", str(bad_records(tmp_path)[kind])))
    assert line.startswith("dew reproduce: error: RECORD ")
    assert "Error(" not in line and "Error:" not in line and "KeyError" not in line


@pytest.mark.parametrize("argv", [["--help"], ["compare", "--help"], ["validate", str(SMALL)]])
def test_a_reader_that_left_is_no_traceback(argv):
    """`dew compare --help | head -1`: the reader may be gone before the first write."""
    read, write = os.pipe()
    os.close(read)  # every write now fails with EPIPE
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    command = [sys.executable, "-m", "dew.commands", *argv]
    done = subprocess.run(command, stdout=write, stderr=subprocess.PIPE, text=True, env=env)
    os.close(write)
    assert "Traceback" not in done.stderr and done.returncode == 1, done.stderr[-2000:]


# Every word a verdict can be (besides judge's own, read from it), and the source that
# prints it: a word renamed there without the docs fails here.
PRINTED = {
    "PARITY": "analysis/parity.py",
    "NO PARITY": "analysis/parity.py",
    "equal": "analysis/parity.py",
    "failed in this run": "analysis/comparison.py",
    "failed in the reference": "analysis/comparison.py",
    "failed in both": "analysis/comparison.py",
    "no reference row": "analysis/comparison.py",
    "failed; no reference row": "analysis/comparison.py",
    "not in this run": "analysis/comparison.py",
    "different model, not comparable": "analysis/comparison.py",
    "no timing to compare": "analysis/comparison.py",
    "no pair": "analysis/ab.py",
    "keeps up": "loader/data_command.py",
    "starves the model": "loader/data_command.py",
}


def test_every_verdict_word_is_documented_with_its_exit_status():
    from dew.bench.analysis import judge

    table = (REPO / "docs" / "conventions.md").read_text().split("### Every word of a verdict")
    assert len(table) == 2, "docs/conventions.md has lost its table of verdict words"
    rows = [line for line in table[1].split("\n## ")[0].splitlines() if line.startswith("| `")]
    documented = {}
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split(" | ")]
        for word in cells[0].split("`")[1::2]:
            documented[word] = cells[-1]
    for word, source in PRINTED.items():
        assert f'"{word}"' in (REPO / "src" / "dew" / "bench" / source).read_text(), word
    for word in [*judge.WORDS, *PRINTED]:
        assert word in documented, f"{word!r} is printed but not in the docs' table"
    for outcome, code in judge.EXIT_CODES.items():
        assert documented[outcome].startswith(str(code)), outcome
    assert documented["PARITY"] == "0" and documented["NO PARITY"] == "1"


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["validate", ""], "dew validate: error: PATH is empty"),
        (["report", ""], "dew report: error: DIRS holds an empty path"),
        (["schema", "--export", ""], "dew schema: error: --export is empty"),
        (["step", "--preset", "cpu-smoke", "--json-out", ""], "dew step: error: --json-out is "),
        (["step", "--preset", "cpu-smoke", "--log-dir", ""], "dew step: error: --log-dir is "),
    ],
)
def test_an_empty_word_is_refused_not_read_as_this_folder(tmp_path, argv, said):
    """Path("") is ".": `--export ""` wrote four files here, `report ""` a whole site."""
    (tmp_path / "step.json").write_text(SMALL.read_text())
    assert one_line(dew(*argv, cwd=tmp_path)).startswith(said)
    assert [p.name for p in tmp_path.iterdir()] == ["step.json"]
