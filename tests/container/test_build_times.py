"""dew.host.engine's build-time bookkeeping: how long the last build of each kind took, kept
in a small JSON file and said before the next build. No engine and no build needed."""

import json

from dew.host import engine as containers


def test_the_times_live_in_the_cache_dir():
    assert containers.BUILD_TIMES == containers.CACHE / "build-times.json"


def test_no_build_timed_yet(tmp_path):
    times = tmp_path / "build-times.json"
    assert containers.last_build_seconds("cpu image", times) is None
    assert containers.last_build_note("cpu image", times) == (
        "no earlier cpu image build timed on this host"
    )


def test_the_last_build_of_each_kind_is_kept_apart(tmp_path):
    times = tmp_path / "cache" / "build-times.json"  # the directory is made on the way
    containers.record_build_seconds("cpu image", 300.0, times)
    containers.record_build_seconds("offline base trixie", 95.26, times)
    containers.record_build_seconds("cpu image", 252.04, times)  # the last one counts
    assert containers.last_build_seconds("cpu image", times) == 252.0
    assert containers.last_build_seconds("offline base trixie", times) == 95.3
    assert containers.last_build_seconds("cuda12 image", times) is None
    assert containers.last_build_note("cpu image", times) == "the last cpu image build took 252 s"
    known = json.loads(times.read_text())
    assert sorted(known) == ["cpu image", "offline base trixie"]
    assert known["cpu image"]["finished"].endswith("Z")
    assert [p.name for p in times.parent.iterdir()] == ["build-times.json"]  # no temp left


def test_a_damaged_file_reads_as_no_time_and_is_replaced(tmp_path):
    times = tmp_path / "build-times.json"
    for text in ("{not json", "[1, 2]", '{"cpu image": 5}', '{"cpu image": {"s": 1}}'):
        times.write_text(text)
        assert containers.last_build_seconds("cpu image", times) is None, text
    times.write_text("[1, 2]")
    containers.record_build_seconds("cpu image", 61.0, times)
    assert containers.last_build_seconds("cpu image", times) == 61.0


def test_a_place_that_cannot_be_written_is_skipped_not_an_error(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    times = blocker / "build-times.json"  # under a regular file: unwritable even for root
    containers.record_build_seconds("cpu image", 10.0, times)
    assert containers.last_build_seconds("cpu image", times) is None
    assert blocker.read_text() == ""
