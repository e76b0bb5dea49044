"""dew.bench.analysis.levels.history_scope: the fit a comparison uses changes only when the user
names records. The committed records are the history (a record that merely appears under
results/runs is not read, and the noise line says so); the records compared and their
copies leave it; the superseded ones leave it unless --with-superseded names them, and
listing a compared record there no longer switches the fit."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from dew.bench.analysis.levels import fit, history, history_records, history_scope
from dew.commands.main import main as dew

REPO = Path(__file__).resolve().parents[3]
RUNS = REPO / "results" / "runs"
TPU = "TPU v5 lite"
# The v5e's committed A/A records since the collector was frozen: two groups.
FROZEN = [p.relative_to(REPO) for pattern in ("*-tpu-v5e-04f0382", "*-tpu-v5e-4a3ac6a")
          for p in sorted(RUNS.glob(f"{pattern}/step.json"))]  # fmt: skip
AA1, AA2, AA3 = (REPO / f"results/runs/20261206T1{t}-small-aa{n}-tpu-v5e-04f0382/step.json"
                 for t, n in (("61309Z", 1), ("61750Z", 2), ("63653Z", 3)))  # fmt: skip
SUPERSEDED_AA2 = RUNS / "20261206T100200Z-small-aa2-tpu-v5e-3c38d48" / "step.json"
AB = RUNS / "20261204T175944Z-ab-cpu-smoke-cpu-cbb6b2f"


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t",
                    *args], check=True, capture_output=True)  # fmt: skip


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    """A git checkout whose results/ commits the v5e's frozen-collector records, and the
    history read from it."""
    root = tmp_path / "checkout"
    for path in FROZEN:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / path, root / path)
    git(root, "init", "-q")
    git(root, "add", "results")
    git(root, "commit", "-q", "-m", "records")
    monkeypatch.setattr(history_records, "RESULTS_ROOT", root)
    monkeypatch.setattr(fit, "HISTORY", root / "results")
    monkeypatch.setattr(fit, "TABLE", root / "results" / "noise.json")
    monkeypatch.setattr(fit, "SUPERSEDED", root / "results" / "superseded.json")
    return root


def compare(capsys, *argv) -> dict:
    code = dew(["compare", *map(str, argv), "--format", "json"])
    out, err = capsys.readouterr()
    assert code in (0, 1, 3), err
    return json.loads(out)


def test_a_record_git_does_not_track_never_enters_the_default_fit(checkout, capsys):
    """Issue 59: one stray record under results/runs (git-ignored, a user's new run) entered
    the fit of a committed TPU A/A pair and moved its verdict."""
    run, ref = (checkout / p.relative_to(REPO) for p in (AA1, AA2))
    before = compare(capsys, run, ref)
    stray = checkout / "results" / "runs" / "stray" / "step.json"
    stray.parent.mkdir(parents=True)
    record = json.loads(AA3.read_text())
    rng = np.random.default_rng(0)
    for row in record["rows"]:  # the same stack, another host's hour: 20% either way a row
        factor = float(np.exp(rng.normal(0, 0.2)))
        for repeat in row["repeats"]:
            repeat["ms_per_step"] *= factor
    stray.write_text(json.dumps(record))
    after = compare(capsys, run, ref)
    assert before["noise"]["source"].startswith(f"{TPU}: 5 records in 2 A/A groups")
    assert {k: after["noise"][k] for k in ("process", "run", "shift")} == \
        {k: before["noise"][k] for k in ("process", "run", "shift")}  # fmt: skip
    assert after["outcome"] == before["outcome"]  # REPRODUCED at ec83e06, stray or not
    assert (
        "; not read: 1 uncommitted record under results/ (--history results/runs reads it)"
    ) in after["noise"]["source"]
    table = history.kinds_table(None, exclude=(run, ref))
    assert not any("stray" in p for group in table[TPU]["groups"] for p in group)
    # Named, it is read: every record under the folder (at ec83e06 the pair then reads
    # INCONCLUSIVE, as it did unasked before).
    named = compare(capsys, run, ref, "--history", checkout / "results" / "runs")
    assert named["noise"]["source"].startswith(f"{TPU}: 6 records in 2 A/A groups")
    assert named["noise"]["shift"] > before["noise"]["shift"]
    assert f"fitted from the records under {checkout / 'results' / 'runs'}" in named["noise"][
        "source"]  # fmt: skip


def test_listing_a_compared_record_as_superseded_does_not_switch_the_fit(checkout, capsys):
    run, ref = (checkout / p.relative_to(REPO) for p in (AA1, AA2))
    before = compare(capsys, run, ref)
    reason = {"why": "a test's cause", "removed_by": "4a3ac6a", "device_kind": TPU}
    listed = {str(ref.relative_to(checkout)): "cause"}
    (checkout / "results" / "superseded.json").write_text(
        json.dumps({"reasons": {"cause": reason}, "records": listed}))  # fmt: skip
    after = compare(capsys, run, ref)
    assert {k: after["noise"][k] for k in ("process", "run", "shift")} == \
        {k: before["noise"][k] for k in ("process", "run", "shift")}  # fmt: skip
    assert after["outcome"] == before["outcome"] and after["exit"] == before["exit"]
    assert (f"{ref} is superseded (cause: its cause removed by 4a3ac6a) and judged at the "
            "noise of the records made since; --with-superseded judges it at the noise of its "
            "time") in after["noise"]["source"]  # fmt: skip


def test_outside_a_checkout_the_cache_is_the_history(tmp_path, monkeypatch):
    results = tmp_path / "results"
    for path in FROZEN:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / path, tmp_path / path)
    assert history_scope.committed(results) is None  # git answers: no checkout here
    monkeypatch.setattr(history_records, "RESULTS_ROOT", tmp_path)
    monkeypatch.setattr(fit, "HISTORY", results)
    monkeypatch.setattr(fit, "SUPERSEDED", results / "superseded.json")
    monkeypatch.setattr(fit, "TABLE", results / "noise.json")
    fitted = history.kinds_table(None)
    assert fitted.left_out.history == "the records under results/"
    cached = {TPU: {**fitted[TPU], "process": 0.5}}  # told apart from a fit of the folder
    (results / "noise.json").write_text(json.dumps({"command": "c", "kinds": cached}))
    assert history.kinds_table(None)[TPU]["process"] == 0.5
    assert history.kinds_table(None).left_out.history == "results/noise.json"
    # Its groups hold a record compared: the folder is fitted again without it.
    member = tmp_path / fitted[TPU]["groups"][0][0]
    again = history.kinds_table(None, exclude=[member])
    assert again[TPU]["records"] == fitted[TPU]["records"] - 1
    assert again.left_out.history == "the records under results/"


def test_the_copies_of_the_compared_records_leave_their_fit():
    """Issue 59: an A/B run's per-round records re-entered their own pair's fit once the
    sides were left out (the CPU shift 7.0% over 2 df instead of 13.6% over 7)."""
    table = history.kinds_table(None, exclude=(AB / "a.json", AB / "b.json"))
    assert not any(AB.name in p for group in table["cpu"]["groups"] for p in group)
    assert table.left_out.copies == len(list((AB / "rounds").glob("*.json")))
    assert table["cpu"]["shift_df"] > 5
    assert (
        f"left out: the two records compared and {table.left_out.copies} copies of them "
        "(records whose every figure one of them holds)"
    ) in table.left_out.words("cpu")


def test_a_byte_copy_of_a_compared_record_leaves_the_history_it_is_in(tmp_path):
    for n, path in enumerate(FROZEN):
        (tmp_path / f"r{n}.json").write_text((REPO / path).read_text())
    shutil.copyfile(tmp_path / "r0.json", tmp_path / "copy.json")
    all_of_them = history.kinds_table(tmp_path)
    table = history.kinds_table(tmp_path, exclude=(tmp_path / "r0.json", tmp_path / "r1.json"))
    assert table[TPU]["records"] == all_of_them[TPU]["records"] - 2
    assert table.left_out.copies == 1
    assert not any("copy.json" in p for group in table[TPU]["groups"] for p in group)


def test_superseded_records_leave_the_fit_unless_the_user_names_them(capsys):
    gone = history.superseded(history.SUPERSEDED)
    shown = str(SUPERSEDED_AA2.relative_to(REPO))
    assert shown in gone
    pair = (SUPERSEDED_AA2, RUNS / "20261206T131744Z-small-aa2-tpu-v5e-4a3ac6a" / "step.json")
    table = history.kinds_table(None, exclude=pair)
    members = [p for group in table[TPU]["groups"] for p in group]
    assert not set(members) & set(gone) and len(table[TPU]["superseded"]) == len(gone) - 1
    words = table.left_out.words(TPU)
    assert (
        f"{len(gone) - 1} superseded records (collector-not-frozen: its cause removed by "
        "4a3ac6a), listed in results/superseded.json"
    ) in words
    assert f"{SUPERSEDED_AA2} is superseded (collector-not-frozen" in words
    named = history.kinds_table(None, exclude=pair, with_superseded=True)
    assert set(p for group in named[TPU]["groups"] for p in group) & set(gone)
    assert "as --with-superseded asks: the noise of their time" in named.left_out.words(TPU)
    # Through the command: the flag, and only the flag, moves the fit.
    plain = compare(capsys, *pair)
    flagged = compare(capsys, *pair, "--with-superseded")
    assert plain["noise"]["process"] < flagged["noise"]["process"]
    assert "--with-superseded judges it at the noise of its time" in plain["noise"]["source"]


def test_a_record_rewritten_in_place_is_read_again(tmp_path):
    """history_records.parse keeps each file's parse while the file stays as it was: a
    record changed under the same name is read anew, one that stops being a record leaves."""
    source = REPO / "results/runs/20261207T084715Z-small-aa1-tpu-v5e-8a5f874/step.json"
    copy = tmp_path / "step.json"
    record = json.loads(source.read_text())
    copy.write_text(json.dumps(record))
    first = history_records.parse([copy])
    assert [r["rows"][0]["ms_per_step"] for _, r in first] == [record["rows"][0]["ms_per_step"]]
    record["rows"][0]["ms_per_step"] *= 2
    copy.write_text(json.dumps(record))
    again = history_records.parse([copy])
    assert again[0][1]["rows"][0]["ms_per_step"] == record["rows"][0]["ms_per_step"]
    copy.write_text(json.dumps({**record, "kind": "not a kind"}))
    assert history_records.parse([copy]) == []


def test_a_record_rewritten_within_one_clock_tick_at_the_same_size_is_read_again(tmp_path):
    """An atomic rewrite (dew's way: a new file renamed over the old) of the same length and
    modification time is still told apart, by its inode."""
    import os

    from dew.bench.common.files import atomic_write

    source = REPO / "results/runs/20261207T084715Z-small-aa1-tpu-v5e-8a5f874/step.json"
    copy = tmp_path / "step.json"
    text = source.read_text()
    atomic_write(copy, text)
    before = os.stat(copy)
    first = history_records.parse([copy])[0][1]["rows"][0]["ms_per_step"]
    digits = len(str(first).split(".")[1])
    changed = text.replace(f'"ms_per_step": {first}', f'"ms_per_step": {first + 1:.{digits}f}', 1)
    assert len(changed) == len(text) and changed != text
    atomic_write(copy, changed)
    os.utime(copy, ns=(before.st_atime_ns, before.st_mtime_ns))  # the same tick
    after = os.stat(copy)
    assert (after.st_mtime_ns, after.st_size) == (before.st_mtime_ns, before.st_size)
    again = history_records.parse([copy])[0][1]["rows"][0]["ms_per_step"]
    assert again == pytest.approx(first + 1)
