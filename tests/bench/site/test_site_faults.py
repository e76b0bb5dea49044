"""Faults around `python -m dew.bench.site` (nox -s report): a full disk while the new site
is written leaves the old one in place, in one line and exit 1; an --out another build is
writing is refused in one line, exit 2."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from infra import full_disk

from dew.bench.common.files import one_writer
from dew.bench.site import build

REPO = Path(__file__).resolve().parents[3]
RECORD = REPO / "results" / "published" / "2026-09-02-rtx4080-6b0f119-small.json"
PROG = "python -m dew.bench.site"


def _records(tmp_path: Path) -> Path:
    records = tmp_path / "records"
    records.mkdir()
    shutil.copy(RECORD, records / RECORD.name)
    return records


def _digests(directory: Path) -> dict[str, str]:
    return {
        str(path.relative_to(directory)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


def test_a_full_disk_keeps_the_old_site_in_one_line(tmp_path, capsys):
    records = _records(tmp_path)
    with full_disk.tmpfs(tmp_path / "disk", size="1m") as disk:
        out = disk / "site"
        assert build.main([str(records), "--out", str(out)]) == 0
        before = _digests(out)
        full_disk.fill(disk, leave=2 * full_disk.PAGE)  # the lock file, not a page
        capsys.readouterr()
        assert build.main([str(records), "--out", str(out)]) == 1
        captured = capsys.readouterr()
        assert captured.err.splitlines() == [
            f"{PROG}: error: cannot write {out}: [Errno 28] No space left on device; "
            f"{out} is as it was"
        ]
        assert _digests(out) == before
        assert sorted(p.name for p in disk.iterdir()) == ["filler", "site"]  # no staging


def test_an_out_another_build_is_writing_is_refused_in_one_line(tmp_path, capsys):
    records, out = _records(tmp_path), tmp_path / "site"
    with one_writer(out, flag="--out"):  # this process holds it, as another build would
        assert build.main([str(records), "--out", str(out)]) == 2
    assert capsys.readouterr().err == (
        f"{PROG}: error: --out {out} is being written by another run (pid {os.getpid()}, "
        f"lock {tmp_path / '.site.lock'}); wait for it to end or write elsewhere\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["records"]
