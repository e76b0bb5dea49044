"""What a case's process leaves and what it ran with (dew.bench.sweep.case_process): its log
kept beside the record, named by its row; a per-case XLA_PYTHON_CLIENT_PREALLOCATE set
inside the child, over the run's environment, and the allocator setting in its row."""

from __future__ import annotations

import os
import signal

import pytest
from infra.processes import gone

from dew.bench.sweep import presets
from dew.bench.sweep.case_process import CaseProcess, allocator_fields, case_environment
from dew.bench.sweep.presets import Case
from dew.bench.sweep.settings import Options, case_log_dir
from dew.bench.sweep.waves import keep_log


@pytest.mark.parametrize(
    "log_dir, json_out, expected",
    [
        (None, "runs/step.json", "runs/step.logs"),
        (None, "step.json", "step.logs"),
        (None, "runs/record", "runs/record.logs"),
        ("elsewhere", "runs/step.json", "elsewhere"),
        ("off", "runs/step.json", None),
        (None, None, None),  # no record: nothing kept
    ],
)
def test_the_logs_go_beside_the_record_unless_told(log_dir, json_out, expected):
    assert case_log_dir(log_dir, json_out) == expected


def test_each_repeat_gets_its_own_log_file_numbered_on(tmp_path):
    case = Case(architecture="causal_transformer", batch=8, moe=True)
    first, second = keep_log(str(tmp_path / "logs"), case), keep_log(str(tmp_path / "logs"), case)
    assert [os.path.basename(p) for p in (first, second)] == [
        "causal_transformer-moe-1.log",
        "causal_transformer-moe-2.log",
    ]


@pytest.mark.parametrize(
    "environ, expected",
    [
        ({}, (True, None)),  # unset: XLA's GPU client preallocates (0.75 of the card)
        ({"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}, (False, None)),
        ({"XLA_PYTHON_CLIENT_PREALLOCATE": "0", "XLA_PYTHON_CLIENT_MEM_FRACTION": ".8"},
         (False, 0.8)),
        ({"XLA_PYTHON_CLIENT_PREALLOCATE": "true", "XLA_CLIENT_MEM_FRACTION": "0.5"}, (True, 0.5)),
        ({"XLA_PYTHON_CLIENT_MEM_FRACTION": "lots"}, (True, None)),
    ],
)  # fmt: skip
def test_the_allocator_setting_is_read_as_jaxlib_reads_it(environ, expected):
    fields = allocator_fields(environ)
    assert (fields["xla_preallocate"], fields["xla_mem_fraction"]) == expected


def test_the_small_presets_moe_case_preallocates_and_only_it():
    settings = {case.label(): case_environment(case) for case in presets.SMALL.cases}
    assert settings.pop("causal_transformer (moe)") == {"XLA_PYTHON_CLIENT_PREALLOCATE": "true"}
    assert set(map(len, settings.values())) == {0}


def _options(tmp_path, **more) -> Options:
    return Options(
        preset="cpu-smoke", steps=1, warmup=0, mesh={"fsdp": 8, "min_shard_size": 256},
        compilation_cache_dir=str(tmp_path / "cache"), **more,
    )  # fmt: skip


@pytest.mark.slow  # two cpu-smoke compiles: 25 s here
def test_a_cases_log_is_kept_and_its_row_names_it_and_the_child_got_its_setting(
    tmp_path, monkeypatch
):
    """The run's environment says no preallocation, the case says preallocate: the row,
    read inside the child from its own environment, says which ran."""
    monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    monkeypatch.setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.8")
    logs = tmp_path / "step.logs"
    options = _options(tmp_path, log_dir=str(logs))
    case = Case(architecture="simple_dit", batch=8, xla_preallocate=True)
    child = CaseProcess(case, options)
    assert child.wait()
    row = child.go()
    assert row.status == "ok", row.error
    assert (row.xla_preallocate, row.xla_mem_fraction) == (True, 0.8)
    assert [repeat.log for repeat in row.repeats] == ["simple_dit-1.log"]
    assert (logs / "simple_dit-1.log").is_file()  # kept after the case ended

    plain = CaseProcess(Case(architecture="simple_dit", batch=8), options)
    try:
        assert plain.wait()
        os.kill(plain.pid, signal.SIGKILL)  # dies before its row: the parent makes it
        row = plain.go()
    finally:
        plain.kill()
    assert gone(plain.pid) and row.status == "failed"
    assert row.error.endswith(f"(its log: {logs / 'simple_dit-2.log'})"), row.error
    assert (row.xla_preallocate, row.xla_mem_fraction) == (False, 0.8)
    assert sorted(p.name for p in logs.iterdir()) == ["simple_dit-1.log", "simple_dit-2.log"]


def test_without_a_log_dir_the_log_is_removed(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where mkstemp puts the log
    child = CaseProcess(Case(architecture="simple_dit", batch=8), _options(tmp_path))
    assert list(tmp_path.glob("dew-case-*.log"))  # while it runs
    child.kill()  # no compile needed: its row fails either way
    row = child.go()
    assert row.status == "failed" and "its log" not in row.error
    assert not list(tmp_path.glob("dew-case-*.log"))
