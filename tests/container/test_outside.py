"""dew.host.outside_sources without an engine: code from outside dew turned into wheels for
`nox -s ab` and `nox -s reproduce` (a git checkout at a commit, a plain folder, a wheel),
built for real by pip and setuptools from a copy of examples/dew-example committed twice
to a git repository of the test's own; what of a record's outside packages a source
matches; and each bad source as one line."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from container_support import ROOT, example_checkout

from dew.bench.record import stack
from dew.host import outside_sources as outside
from dew.host import replay as reproduce
from dew.host.stack_images import Unreproducible

EXAMPLE = ROOT / "examples" / "dew-example"
PYTHON = sys.executable  # the tests' venv: locks/dev.txt, with setuptools


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> dict:
    """The example in a git repository's subfolder: 0.1.0 committed, then 0.2.0."""
    repo = tmp_path_factory.mktemp("user") / "models"
    project = repo / "packages" / "dew-example"
    first, second = example_checkout(repo, project)
    return {"repo": repo, "project": project, "first": first, "second": second}


def test_a_checkout_is_built_at_head_and_at_any_commit_named(checkout, tmp_path):
    head = outside.prepare(str(checkout["project"]), tmp_path, PYTHON)
    assert (head.distribution, head.version, head.commit) == (
        "dew-example",
        "0.2.0",
        checkout["second"],
    )
    assert head.subdirectory == "packages/dew-example"
    older = outside.prepare(f"{checkout['project']}@HEAD~1", tmp_path, PYTHON)
    assert (older.version, older.commit) == ("0.1.0", checkout["first"])
    assert older.label() == f"dew-example 0.1.0 @ {checkout['first'][:7]}"
    with zipfile.ZipFile(older.wheel) as wheel:  # a real wheel, with the entry point
        names = wheel.namelist()
        (entry_points,) = [name for name in names if name.endswith("entry_points.txt")]
        assert "tiny_mixer = dew_example.models:TinyMixer" in wheel.read(entry_points).decode()
    assert sorted(path.name for path in tmp_path.glob("*.whl")) == [
        "dew_example-0.1.0-py3-none-any.whl", "dew_example-0.2.0-py3-none-any.whl",
    ]  # fmt: skip


def test_a_record_s_commit_is_the_one_built_when_no_rev_is_given(checkout, tmp_path):
    built = outside.prepare(str(checkout["project"]), tmp_path, PYTHON, (checkout["first"][:7],))
    assert (built.version, built.commit) == ("0.1.0", checkout["first"])


def test_uncommitted_changes_are_refused_unless_a_commit_is_named(checkout, tmp_path):
    models = checkout["project"] / "dew_example" / "models.py"
    kept = models.read_text()
    models.write_text(kept + "# an edit\n")
    try:
        with pytest.raises(Unreproducible, match="has uncommitted changes, which no record"):
            outside.prepare(str(checkout["project"]), tmp_path, PYTHON)
        named = outside.prepare(f"{checkout['project']}@HEAD", tmp_path, PYTHON)
        assert named.commit == checkout["second"]
    finally:
        models.write_text(kept)
    (checkout["repo"] / "elsewhere.txt").write_text("untracked, outside the project\n")
    assert outside.prepare(str(checkout["project"]), tmp_path, PYTHON).commit == checkout["second"]


def test_a_plain_folder_and_a_wheel_are_taken_as_they_are(tmp_path):
    ignore = shutil.ignore_patterns("build", "*.egg-info", "__pycache__")
    folder = shutil.copytree(EXAMPLE, tmp_path / "plain", ignore=ignore)
    # The copy lies outside any git work tree only if tmp does; say so rather than assume.
    if subprocess.run(["git", "-C", str(folder), "rev-parse"], capture_output=True).returncode == 0:
        pytest.skip("the temporary folder is inside a git work tree here")
    built = outside.prepare(str(folder), tmp_path / "w1", PYTHON)
    assert (built.version, built.commit) == ("0.2.0", None)  # the example as it is
    again = outside.prepare(str(built.wheel), tmp_path / "w2", PYTHON)
    assert (again.distribution, again.version, again.commit) == ("dew-example", "0.2.0", None)
    assert again.wheel.parent == tmp_path / "w2"


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("{project}@nosuchrev", "has no commit nosuchrev; git fetch it"),
        ("{tmp}/nothing-here", "no such file or folder"),
        ("{project}/pyproject.toml", "a file must be a wheel (.whl)"),
        ("{repo}/packages", "no pyproject.toml or setup.py, no package to build"),
        ("{project}@", "nothing after @"),
    ],
)
def test_bad_sources_are_one_line(checkout, tmp_path, source, message):
    given = source.format(project=checkout["project"], repo=checkout["repo"], tmp=tmp_path)
    with pytest.raises(Unreproducible, match=message.replace("(", r"\(").replace(")", r"\)")):
        outside.prepare(given, tmp_path / "wheels", PYTHON)


def test_a_project_whose_backend_is_missing_asks_for_its_wheel(tmp_path):
    project = tmp_path / "hatched"
    project.mkdir()
    (project / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["no-such-backend"]\nbuild-backend = "no_such_backend"\n'
        '[project]\nname = "hatched"\nversion = "1"\n'
    )
    with pytest.raises(Unreproducible, match=r"cannot build its wheel here .*give the \.whl"):
        outside.build_wheel(project, tmp_path / "wheels", PYTHON, str(project))


def test_the_commit_is_written_where_the_record_reads_it(checkout, tmp_path):
    built = outside.prepare(str(checkout["project"]), tmp_path / "wheels", PYTHON)
    site = tmp_path / "site"
    dist_info = site / "dew_example-0.2.0.dist-info"
    dist_info.mkdir(parents=True)  # as the image's pip leaves it
    outside._write_direct_url(site, built)
    origin = json.loads((dist_info / "direct_url.json").read_text())
    assert origin["vcs_info"] == {"vcs": "git", "commit_id": checkout["second"]}
    assert origin["subdirectory"] == "packages/dew-example"
    assert origin["url"] == checkout["repo"].resolve().as_uri()


# --- a record's outside packages against the sources given ----------------------------------------


def recorded(version="0.1.0", commit="c" * 40, dirty=False) -> dict:
    return {"outside_code": [
        {"distribution": "dew-example", "version": version, "module": "dew_example.models",
         "used_by": ["tiny_mixer"], "commit": commit, "dirty": dirty, "source": "direct_url"},
        {"distribution": "dew-example", "version": version, "module": "dew_example.steps",
         "used_by": ["dew_example.steps:make_step"], "commit": commit, "dirty": dirty},
    ]}  # fmt: skip


def given(version="0.1.0", commit="c" * 40, name="dew-example") -> dict:
    return {"distribution": name, "version": version, "commit": commit}


def test_the_same_package_at_the_same_commit_matches():
    assert stack.outside_differences(recorded(), [given(commit="c" * 7)]) == ([], [])


def test_another_version_commit_or_package_is_a_line_each():
    missing, lines = stack.outside_differences(
        recorded(dirty=True), [given("0.2.0", "d" * 40), given(name="other")]
    )
    assert missing == []
    assert lines == [
        "package dew-example: the record's 0.1.0, given 0.2.0",
        "package dew-example commit: the record's ccccccc, given ddddddd",
        "package dew-example: the record ran it from a dirty tree, not in the record",
        "package other: given, but the record used no such package",
    ]
    _, lines = stack.outside_differences(recorded(), [given(commit=None)])
    assert lines == [
        "package dew-example commit: the record's ccccccc, given none (not built from a commit)"
    ]


def test_a_module_of_no_package_is_a_line_not_a_refusal():
    item = {"distribution": None, "version": None, "module": "my_steps", "used_by": ["x"]}
    environment = {"outside_code": [item]}
    assert stack.outside_differences(environment, []) == ([], [
        "module my_steps: from no installed package, so no --outside gives it; the rerun "
        "finds it only if the commit's own tree holds it"
    ])  # fmt: skip


def test_reproduce_says_so_of_a_record_whose_only_outside_code_is_a_module_of_no_package(
    tmp_path,
):
    item = {"distribution": None, "version": None, "module": "my_steps", "used_by": ["x"]}
    packages, lines = reproduce.outside_wheels(
        None, "reproduce", [], {"outside_code": [item]}, "record x.json", tmp_path
    )  # no source: nothing is built, so no session's Python is asked for
    assert packages == [] and [line.split(":")[0] for line in lines] == ["module my_steps"]


def test_a_package_the_record_used_and_none_gives_is_missing():
    missing, _ = stack.outside_differences(recorded(), [])
    assert missing == ["dew-example 0.1.0 ccccccc"]
    expected = r"record x.json used dew-example 0.1.0 ccccccc from outside dew, which dew's image"
    with pytest.raises(Unreproducible, match=expected + r" lacks: give it with --outside"):
        outside.prepare_all([], Path("/nonexistent"), PYTHON, recorded(), "record x.json")


def test_a_package_given_twice_is_refused(checkout, tmp_path):
    source = str(checkout["project"])
    with pytest.raises(Unreproducible, match="gives dew-example more than once"):
        outside.prepare_all([source, f"{source}@HEAD~1"], tmp_path, PYTHON)


# --- the sessions' command lines ----------------------------------------------------------------


def test_reproduce_takes_a_record_and_its_outside_sources(capsys):
    record, sources, rounds = reproduce.parse_reproduce(
        ["r.json", "--outside", "a@HEAD", "--outside=b.whl"]
    )
    assert (record, sources, rounds) == (Path("r.json"), ["a@HEAD", "b.whl"], None)
    assert reproduce.parse_reproduce(["r.json", "--interleaved", "5"])[2] == 5
    for argv, message in [
        ([], "takes one step record (a JSON file), got 0"),
        (["r.json", "--outside"], "argument --outside: expected one argument"),
        (["r.json", "--interleaved", "1"], "--interleaved: '1' is not a number of rounds >= 2"),
        (["r.json", "--other", "x"], "unrecognized arguments: --other"),
        (["a.json", "b.json"], "takes one step record (a JSON file), got 2"),
    ]:
        with pytest.raises(SystemExit) as exit_:
            reproduce.parse_reproduce(argv)
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err


def test_reproduce_interleaved_is_ab_of_the_records_stack_and_todays():
    """reproduce --interleaved N: A the record (its stack), B HEAD, the record's cases,
    steps and XLA flags on both sides, its outside sources on both, N rounds."""
    from dew.host import ab_rounds as ab

    settings = {"preset": "cpu-smoke", "steps": 20, "warmup": 2,
                "cases": [{"architecture": "uvit", "batch": 8}],
                "options": {"xla_flags": "--xla_backend_optimization_level=0"}}  # fmt: skip
    argv = reproduce.interleaved_args(Path("r.json"), settings, ["pkg@HEAD"], 5)
    args = ab.parse_ab(argv)
    assert (args.a, args.b, args.rounds, args.preset) == ("r.json", "HEAD", 5, "cpu-smoke")
    assert args.cases == settings["cases"] and (args.steps, args.warmup) == (20, 2)
    assert args.xla_flags == {"A": "--xla_backend_optimization_level=0"} | {
        "B": "--xla_backend_optimization_level=0"
    }
    assert args.outside == {"A": ["pkg@HEAD"], "B": ["pkg@HEAD"]}


def test_ab_gives_outside_sources_to_both_sides_or_one_and_takes_steps():
    from dew.host import ab_rounds as ab

    args = ab.parse_ab(["HEAD", "HEAD", "--outside", "shared", "--a-outside", "old@v1",
                        "--b-outside", "new", "--step", "pkg.steps:make",
                        "--architectures", "m"])  # fmt: skip
    assert args.outside == {"A": ["shared", "old@v1"], "B": ["shared", "new"]}
    assert [unit["label"] for unit in ab.units(args)] == ["m", "pkg.steps:make"]
    assert ab.units(args)[1]["args"] == ["--step", "pkg.steps:make"]
    alone = ab.parse_ab(["A", "B", "--step", "pkg.steps:make"])
    assert [unit["args"] for unit in ab.units(alone)] == [["--step", "pkg.steps:make"]]
    side = ab.Side("A", "HEAD", "commit", site=Path("/somewhere"))
    assert (
        ab.side_env({"JAX_PLATFORMS": "cpu"}, args, "A", side)["PYTHONPATH"] == outside.OUTSIDE_SITE
    )
    assert "PYTHONPATH" not in ab.side_env({}, args, "A", ab.Side("A", "HEAD", "commit"))
