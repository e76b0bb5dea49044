"""dew.bench.sweep.allocator: which malloc the cases' processes get, and that they really get it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dew.bench.common.cli import UsageError
from dew.bench.record.schema import is_recordable_env_flag
from dew.bench.sweep import allocator
from dew.bench.sweep.settings import Options
from dew.bench.sweep.step_command import malloc

INSTALLED = allocator.find_tcmalloc()


def _fake_library(tmp_path, monkeypatch, name="libtcmalloc_minimal.so.4"):
    (tmp_path / name).write_bytes(b"")
    monkeypatch.setattr(allocator, "library_dirs", lambda: [tmp_path / "none", tmp_path])
    return tmp_path / name


def test_auto_is_tcmalloc_on_cpu_only(tmp_path, monkeypatch):
    library = _fake_library(tmp_path, monkeypatch)
    assert allocator.resolve("auto", "cpu") == library
    assert allocator.resolve("auto", "gpu") is None
    assert allocator.resolve("system", "cpu") is None
    assert allocator.resolve("tcmalloc", "gpu") == library


def test_missing_tcmalloc(tmp_path, monkeypatch):
    monkeypatch.setattr(allocator, "library_dirs", lambda: [tmp_path])
    assert allocator.resolve("auto", "cpu") is None
    with pytest.raises(ValueError, match="libtcmalloc-minimal4.*--allocator system"):
        allocator.resolve("tcmalloc", "cpu")


def test_preload_goes_first_once_and_keeps_the_users():
    env = {"LD_PRELOAD": "/opt/mine.so"}
    allocator.preload(env, "/usr/lib/libtcmalloc_minimal.so.4")
    allocator.preload(env, "/usr/lib/libtcmalloc_minimal.so.4")
    assert env["LD_PRELOAD"] == "/usr/lib/libtcmalloc_minimal.so.4 /opt/mine.so"


def test_malloc_preloads_for_the_children_and_says_which(tmp_path, monkeypatch):
    library = _fake_library(tmp_path, monkeypatch)
    # setenv first: monkeypatch then restores the variable as it was (an unset variable
    # deleted with raising=False would not be remembered, and the fake library would leak).
    monkeypatch.setenv("LD_PRELOAD", "/opt/mine.so")
    options = malloc(Options(), "cpu")
    assert options.allocator == "tcmalloc"
    assert os.environ["LD_PRELOAD"] == f"{library} /opt/mine.so"
    # The record keeps it: LD_PRELOAD is one of the environment flags a record may hold.
    assert is_recordable_env_flag("LD_PRELOAD")
    monkeypatch.setenv("LD_PRELOAD", "")
    assert malloc(Options(), "gpu").allocator == "system"
    assert malloc(Options(isolate=False), "cpu").allocator == "system"
    assert malloc(Options(allocator="system"), "cpu").allocator == "system"
    assert os.environ["LD_PRELOAD"] == ""
    with pytest.raises(UsageError, match="multi-process"):
        malloc(Options(allocator="tcmalloc"), None)


@pytest.mark.skipif(INSTALLED is None, reason="tcmalloc not installed (.ci/run installs it)")
def test_a_child_process_really_runs_on_tcmalloc():
    env = dict(os.environ)
    allocator.preload(env, INSTALLED)
    maps = subprocess.run(
        [sys.executable, "-c", "print(open('/proc/self/maps').read())"],
        env=env, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "libtcmalloc" in maps
