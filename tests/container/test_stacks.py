"""dew.host.stack_images, ab_rounds and the stack naming in image.py, bases.py and
runner.py, the parts that need no engine: what can and cannot be reproduced from a record,
the A/B command line and round order, the step tool's flags for a record's settings,
worktrees that never outlive their use, the directories handed to the image's user, and the
base's packages and snapshot."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from container_support import worktrees

from dew.bench.common.errors import UsageError
from dew.bench.record import stack
from dew.host import ab_rounds as ab
from dew.host import bases, handover, runner
from dew.host import image as images
from dew.host import stack_images as stacks

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = ROOT / "results" / "published" / "2026-09-02-rtx4080-6b0f119-small.json"


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True).stdout


def _record(commit: str | None, *, dirty=False, container=None, source="label") -> dict:
    return {
        "kind": "step",
        "settings": {"preset": "cpu-smoke", "steps": 20},
        "environment": {
            "code": {"commit": commit, "dirty": dirty, "source": source},
            "container": container,
            "devices": {"platform": "cpu", "kind": "cpu", "count": 8},
        },
        "rows": [],
    }


# --- what a record's stack is, and what cannot be rebuilt ------------------------------------


def test_a_published_record_says_what_it_matches_and_cannot_be_reproduced():
    record = json.loads(PUBLISHED.read_text())
    matched, unmatched = stacks.stack_parts(record, ROOT)
    assert any(
        line.startswith("packages (as recorded") and "jax 0.11.1" in line for line in matched
    )
    assert any(line.startswith("settings: preset=small, steps=100") for line in matched)
    assert "container: none recorded (no image, lock hash, Dockerfile or base)" in unmatched
    assert "commit 6b0f119: not in this clone" in unmatched
    with pytest.raises(stacks.Unreproducible, match="published record: it states commit 6b0f119"):
        stacks.spec_from_record(record, "record published.json", ROOT)


@pytest.mark.parametrize(
    ("record", "message"),
    [
        (_record(None), "names no commit"),
        (_record("f" * 40), "commit ffffffffff.* is not known to this clone"),
        (_record("HEAD", dirty=True), "ran on a dirty tree at HEAD: the uncommitted change"),
    ],
)
def test_records_whose_stack_cannot_be_built_say_why(record, message):
    with pytest.raises(stacks.Unreproducible, match=message):
        stacks.spec_from_record(record, "record x.json", ROOT)


def test_a_commit_from_before_the_containers_cannot_be_built():
    root_commit = git("rev-list", "--max-parents=0", "HEAD").split()[0]
    with pytest.raises(stacks.Unreproducible, match="from before the containers existed"):
        stacks.resolve_commit(root_commit, "commit first", ROOT)


def test_a_clean_record_at_a_known_commit_names_its_stack():
    head = git("rev-parse", "HEAD").strip()
    container = {"variant": "cpu", "base_image_digest": "sha256:" + "a" * 64}
    spec = stacks.spec_from_record(_record(head[:7], container=container), "record r.json", ROOT)
    assert (spec.commit, spec.variant, spec.from_record) == (head, "cpu", True)
    assert spec.container["base_image_digest"] == "sha256:" + "a" * 64


def test_the_worktree_is_removed_whatever_happens():
    before = worktrees()
    head = git("rev-parse", "HEAD").strip()
    with pytest.raises(RuntimeError), stacks.worktree(head, ROOT) as tree:
        assert (tree / "docker" / "Dockerfile").exists()
        assert f"worktree {tree}" in worktrees()
        raise RuntimeError("a failed build")
    assert worktrees() == before and not tree.exists()


def test_the_record_settings_become_the_tools_own_flags_only_when_set():
    settings = {
        "preset": "cpu-smoke", "steps": 20, "warmup": 2, "dtype": "bfloat16",
        "cases": [{"architecture": "causal_transformer", "head_chunks": 1}],
        "architectures": ["causal_transformer"], "mesh": {"fsdp": 8}, "repeats": 1,
        "options": {"xla_flags": "--xla_cpu_foo=1", "attention_impl": None},
    }  # fmt: skip
    args = stacks.settings_args(settings)
    assert args[:8] == ["--preset", "cpu-smoke", "--steps", "20", "--warmup", "2", "--dtype",
                        "bfloat16"]  # fmt: skip
    assert (
        args[args.index("--cases") + 1]
        == '[{"architecture": "causal_transformer", "head_chunks": 1}]'
    )
    assert "--architectures" not in args and "--repeats" not in args  # cases say it; 1 is default
    assert "--attention-impl" not in args and "--xla-flags=--xla_cpu_foo=1" in args
    assert stacks.settings_args({"preset": "small", "repeats": 3})[-2:] == ["--repeats", "3"]


# --- nox -s ab: the command line and the rounds ----------------------------------------------


def test_the_issue_command_line_parses():
    args = ab.parse_ab(["HEAD~3", "HEAD", "--preset", "cpu-smoke", "--architectures",
                            "simple_dit", "uvit", "--a-env", "XLA_FLAGS=--x=1",
                            "--b-xla-flags", "--xla_cpu_y=2"])  # fmt: skip
    assert (args.a, args.b, args.rounds, args.preset) == ("HEAD~3", "HEAD", 7, "cpu-smoke")
    assert args.architectures == ["simple_dit", "uvit"]
    env = {"XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    assert ab.side_env(env, args, "A")["XLA_FLAGS"] == "--x=1"
    assert ab.side_env(env, args, "B")["XLA_FLAGS"].endswith("count=8 --xla_cpu_y=2")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["A", "B", "--architectures", "uvit", "--rounds", "0"], "--rounds must be at least 2"),
        # a verdict needs two paired rounds: refused here, not after both images are built
        (["A", "B", "--architectures", "uvit", "--rounds", "1"], "--rounds must be at least 2"),
        # 0 is refused, not read as "the preset's steps"
        (["A", "B", "--architectures", "uvit", "--steps", "0"], "--steps must be at least 1"),
        (
            ["A", "B", "--architectures", "uvit", "--steps", "-3"],
            r"--steps must be at least 1 \(got -3\)",
        ),
        (["A", "B", "--architectures", "uvit", "--warmup", "-1"], "--warmup must be at least 0"),
        (["A", "B", "--architectures", "uvit", "--steps", str(2**40)], "--steps must be at most"),
        (["A", "--architectures", "uvit"], "ab takes two stacks A and B, got 1"),
        (["A", "B"], "ab needs --architectures, --cases or --step"),
        (["A", "B", "--cases", "{"], "--cases: not valid JSON"),
        (["A", "B", "--cases", '{"a": 1}'], "--cases: must be a JSON list of objects"),
        (["A", "B", "--architectures", "uvit", "--rounds", "x"], "invalid int value: 'x'"),
        (["A", "B", "--architectures", "uvit", "--a-env", "NOEQUALS"], "is not KEY=VALUE"),
        (["A", "B", "--architectures", "uvit", "--bogus", "1"], "unrecognized arguments: --bogus"),
        (["A", "B", "--architectures", "uvit", "--variant", "rocm"], "invalid choice: 'rocm'"),
        (["A", "B", "--architectures", "uvit", "--a-xla-flags"], "--a-xla-flags: expected one"),
        # each flag blamed alone (--alpha 5 blamed --band too); TOST needs alpha under 0.5
        (["A", "B", "--architectures", "uvit", "--alpha", "5"], r"^--alpha 5 is not a signif"),
        (["A", "B", "--architectures", "uvit", "--alpha", "0.5"], r"in \(0, 0.5\)"),
        (["A", "B", "--architectures", "uvit", "--band", "0"], r"^--band 0 is not a percentage"),
    ],
)
def test_bad_ab_input_is_one_line(argv, message):
    with pytest.raises(UsageError, match=message) as error:
        ab.parse_ab(argv)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--architectures", "nope"], "unknown architecture 'nope' for preset 'cpu-smoke'"),
        (["--preset", "big", "--architectures", "uvit"], "--preset 'big' is not valid"),
        (
            ["--cases", '[{"architecture": "uvit", "batch": 0}]'],
            r"--cases\[0\]: invalid Case.batch",
        ),
        (["--step", "no_such_module:make_step"], "--step no_such_module:make_step"),
    ],
)
def test_the_cases_are_checked_by_this_checkouts_tool_before_any_image(argv, message):
    """What only dew knows (its architectures, presets, configs) is checked by the step
    tool's --check-only in a Python with dew, the session's venv, before any image."""
    args = ab.parse_ab(["A", "B", *argv])
    with pytest.raises(UsageError, match=message) as error:
        ab.check_cases(sys.executable, args)
    assert "\n" not in str(error.value) and "tools/benchmark_step.py" not in str(error.value)
    ab.check_cases(sys.executable, ab.parse_ab(["A", "B", "--architectures", "uvit"]))


def test_an_unknown_side_is_neither_record_commit_nor_image():
    with pytest.raises(stacks.Unreproducible, match="'nosuchthing' is neither a record file"):
        ab.resolve_side(None, "A", "nosuchthing", "cpu")
    with pytest.raises(stacks.Unreproducible, match="published record"):
        ab.resolve_side(None, "B", str(PUBLISHED), "cpu")


def test_the_side_going_first_alternates_by_round_and_by_case():
    firsts = [[ab.order(r, u)[0] for u in range(3)] for r in range(4)]
    assert firsts == [["A", "B", "A"], ["B", "A", "B"], ["A", "B", "A"], ["B", "A", "B"]]
    for r in range(4):  # every case runs A and B once a round
        assert all(sorted(ab.order(r, u)) == ["A", "B"] for u in range(3))


def test_units_are_one_process_per_architecture_or_case():
    cases = '[{"architecture": "uvit"}, {"architecture": "causal_transformer", "head_chunks": 1}]'
    args = ab.parse_ab(["A", "B", "--cases", cases])
    units = ab.units(args)
    assert [u["label"] for u in units] == ["uvit", "causal_transformer"]
    assert units[1]["args"] == [
        "--cases",
        '[{"architecture": "causal_transformer", "head_chunks": 1}]',
    ]


# --- the image's name, its base, and what the image's user may write ---------------------------


def test_a_stack_image_tag_holds_its_commit():
    commit = "fea970e9c19efb9b385bc8977af1d38661d38c60"
    tag = images.image_tag("cpu", "localhost/base@sha256:" + "a" * 64, commit=commit)
    assert tag.startswith("localhost/dew-stack:cpu-fea970e9c19e-")
    assert images.image_tag("cpu", "localhost/base@sha256:" + "a" * 64).startswith(
        "localhost/dew:cpu-"
    )


def test_the_base_packages_and_snapshot_are_read_and_differences_named():
    status = (
        "Package: libc6\nStatus: install ok installed\nVersion: 2.41-12\n\n"
        "Package: gone\nStatus: deinstall ok config-files\nVersion: 1\n\n"
        "Package: python3\nStatus: install ok installed\nVersion: 3.13.5-1\n"
    )
    assert bases.dpkg_status_packages(status) == ["libc6=2.41-12", "python3=3.13.5-1"]
    assert bases._release_date("Origin: Debian\nDate: Sat, 21 Nov 2026 09:15:44 UTC\n") == (
        "2026-11-21T09:15:44Z"
    )
    assert stack.package_differences(["a=1", "b=2"], ["a=1", "b=3", "c=1"]) == [
        "b: 2 -> 3",
        "c: absent -> 1",
    ]


def test_how_a_base_comes_back_or_why_it_cannot():
    pulled = bases._rebuild_statement(
        "docker.io/library/ubuntu:24.04", "docker.io/library/ubuntu@sha256:" + "b" * 64, {},
        "noble", None,
    )  # fmt: skip
    assert pulled == "pull docker.io/library/ubuntu@sha256:" + "b" * 64
    offline = bases._rebuild_statement(
        bases.OFFLINE_BASE_IMAGE, "localhost/dew-base@sha256:" + "c" * 64, {}, "trixie",
        "2026-11-21T09:15:44Z",
    )  # fmt: skip
    assert offline.startswith("debootstrap --variant=minbase --include=python3")
    assert "trixie from the Debian archive as of 2026-11-21T09:15:44Z" in offline
    unknown = bases._rebuild_statement("localhost/mine:1", "sha256:" + "d" * 64, {}, None, None)
    assert unknown.startswith("cannot be rebuilt: localhost/mine:1 is a local image")


def test_the_directories_a_command_writes_into_are_named_from_its_arguments(tmp_path):
    run = tmp_path / "results" / "runs" / "r1"
    run.mkdir(parents=True)
    cache = tmp_path / "xla"
    cache.mkdir()
    volumes = [(tmp_path / "results", "/opt/dew/results"), (cache, "/cache/xla")]
    command = [
        "python", "tools/benchmark_step.py", "--json-out", "/opt/dew/results/runs/r1/step.json",
        "--plot=/opt/dew/results/runs/r1/new/chart.png", "--compilation-cache-dir", "/cache/xla",
        "--preset", "cpu-smoke",
    ]  # fmt: skip
    assert runner.written_dirs(command, volumes) == [cache, run]
    assert runner.written_dirs(["python", "-c", "print(1)"], volumes) == []


def test_hand_over_lends_the_directories_and_gives_everything_back(tmp_path):
    # As root the directories go to another uid for the command and come back with what it
    # wrote; as another user chown is refused and only the command runs.
    import os

    (tmp_path / "sub").mkdir()
    probe = [
        sys.executable,
        "-c",
        "import os, sys; print(os.stat(sys.argv[1]).st_uid)",
        str(tmp_path),
    ]
    write = "import pathlib, sys; pathlib.Path(sys.argv[1], 'w').write_text('x')"
    script = [sys.executable, "-c", write, str(tmp_path / "sub")]
    code = handover.hand_over(["12345:12345", str(tmp_path), "--", *script])
    assert code == 0 and (tmp_path / "sub" / "w").read_text() == "x"
    caller = os.getuid()
    for path in (tmp_path, tmp_path / "sub", tmp_path / "sub" / "w"):
        assert path.stat().st_uid == caller
    if caller == 0:
        lent = subprocess.run(
            [sys.executable, handover.__file__, "hand-over", "12345:12345",
             str(tmp_path), "--", *probe], capture_output=True, text=True,
        )  # fmt: skip
        assert lent.stdout.strip() == "12345" and tmp_path.stat().st_uid == 0
