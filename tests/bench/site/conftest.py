"""The site of the repository's own records, built once for the files that read it
(test_site.py, test_site_browser.py): one build is 10-20 s of CPU (its charts). Under
xdist the workers of a run share it through their common temporary folder, the first to
ask building it while the others wait on its lock."""

from __future__ import annotations

import fcntl
from pathlib import Path

import pytest

from dew.bench.site import build

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def repository_site(request, tmp_path_factory) -> Path:
    """results/ built as a site by `python -m dew.bench.site results --out SITE` (exit 0)."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if hasattr(request.config, "workerinput") else base
    out, built = shared / "repository-site" / "site", shared / "repository-site" / "built"
    with open(shared / "repository-site.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not built.exists():  # a build that failed its assert left no mark: built again
            out.parent.mkdir(exist_ok=True)
            assert build.main([str(ROOT / "results"), "--out", str(out)]) == 0
            built.write_text("")
    return out
