"""An output path the file system cannot look up is one line, exit 2, before any work: a
symbolic link loop, a name longer than the file system takes (also under a folder that does
not exist yet), an empty path, a link to nowhere (issue 52: FileExistsError, RuntimeError
and OSError tracebacks from `dew schema --export` and `dew report --out`). And an export
never replaces a file of someone else's without --overwrite."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dew.bench.common.errors import UsageError
from dew.bench.common.files import check_output_dir, check_output_file
from dew.bench.record.schema import json_schemas

REPO = Path(__file__).resolve().parents[3]


def bad_paths(tmp_path: Path) -> dict[str, tuple[str, str]]:
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    return {
        "loop": (str(loop), "a symbolic link loop"),
        "long name": (str(tmp_path / ("a" * 300)), "a name longer than the file system takes"),
        "long name under a new folder": (
            str(tmp_path / "new" / ("b" * 300) / "c"),
            "a name longer than the file system takes",
        ),
        "empty": ("", "--out is empty; give a path"),
        "link to nowhere": (str(dangling), "is a symbolic link to"),
    }


KINDS = ["loop", "long name", "long name under a new folder", "empty", "link to nowhere"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("check", [check_output_dir, check_output_file])
def test_a_path_that_cannot_be_looked_up_is_one_usage_line(tmp_path, kind, check):
    path, message = bad_paths(tmp_path)[kind]
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(UsageError, match=message) as caught:
        check(path, flag="--out")
    assert "\n" not in str(caught.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing made


def dew(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    command = [sys.executable, "-m", "dew.commands", *argv]
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd, env=env)


@pytest.mark.parametrize("kind", ["loop", "long name", "empty"])
def test_schema_export_and_report_out_refuse_them_in_one_line(tmp_path, kind):
    path, message = bad_paths(tmp_path)[kind]
    for argv, prog in (
        (["schema", "--export", path], "dew schema"),
        (["report", str(REPO / "results" / "published"), "--out", path], "dew report"),
    ):
        done = dew(*argv, cwd=tmp_path)
        assert done.returncode == 2, done.stderr[-2000:]
        (line,) = done.stderr.splitlines()
        assert line.startswith(f"{prog}: error: ")
        # report's --out is a Path: "" is ".", refused as a folder it did not write
        assert message.split("--out ")[-1] in line or (prog, kind) == ("dew report", "empty")
    assert not list(tmp_path.glob("*.schema.json"))  # `--export ""` wrote nothing here


def test_an_export_replaces_an_earlier_export_but_no_file_of_someone_elses(tmp_path):
    folder = tmp_path / "schema"
    assert dew("schema", "--export", str(folder), cwd=tmp_path).returncode == 0
    assert dew("schema", "--export", str(folder), cwd=tmp_path).returncode == 0  # a re-export
    mine = folder / "environment.schema.json"
    mine.write_text("my notes\n")
    done = dew("schema", "--export", str(folder), cwd=tmp_path)
    assert done.returncode == 2 and mine.read_text() == "my notes\n"
    assert done.stderr == (
        f"dew schema: error: --export {folder} holds environment.schema.json, not an earlier "
        "export of the schema; pass --overwrite to replace it, or give another folder\n"
    )
    assert dew("schema", "--export", str(folder), "--overwrite", cwd=tmp_path).returncode == 0
    assert json.loads(mine.read_text()) == json.loads(json_schemas()[mine.name])
