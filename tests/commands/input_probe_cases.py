"""The inputs of issue 63's probe, each as a user types it (test_input_probe.py). In argv,
`{py}` is the Python, `{root}` the tree of dew under test, `{d}` the scratch directory
(bad_inputs.scratch's files, then input_probe_files.setup's)."""

from __future__ import annotations

import dataclasses
import signal

from input_probe_files import BUNDLES

DEW = ["{py}", "-m", "dew.commands"]
STEP = ["{py}", "{root}/tools/benchmark_step.py", "--idle-check", "off"]
PREPARE = ["{py}", "{root}/tools/prepare_dataset.py"]
VALIDATE, COMPARE, REPORT = [*DEW, "validate"], [*DEW, "compare"], [*DEW, "report"]
CHECK = [*DEW, "step", "--preset", "cpu-smoke", "--architectures", "uvit", "--compile-only",
         "--idle-check", "off"]  # fmt: skip
DATA = [*DEW, "data", "data:synthetic-images", "--data.path", "{d}/dataset", "--idle-check", "off"]
BIG = "9" * 23


@dataclasses.dataclass(frozen=True)
class Input:
    what: str
    argv: list[str]
    exits: tuple[int, ...] = (2,)  # what it may end with
    lines: int | None = 1  # error lines on stderr at most (all lines for exit 0); None: any
    said: str = ""  # what stdout or stderr must hold ($D: the scratch directory)
    cwd: str | None = None  # default: the scratch directory
    env: dict = dataclasses.field(default_factory=dict)
    stop: tuple[int, str] | None = None  # a signal sent once stderr said the text
    known: str = ""  # not fixed: why
    unsaid: str = ""  # what neither stdout nor stderr may hold


def inputs() -> list[Input]:
    return outputs() + records() + comparisons() + steps() + loaders() + others()


def outputs() -> list[Input]:
    """Every output against every other and against what is there."""
    out = ["--json-out", "{d}/x.json"]
    return [
        Input(
            "step --json-out and --log-dir one path",
            [*CHECK, *out, "--log-dir", "{d}/x.json", "--check-only"],
        ),  # fmt: skip
        Input(
            "step --log-dir inside --json-out",
            [*CHECK, *out, "--log-dir", "{d}/x.json/logs", "--check-only"],
        ),  # fmt: skip
        Input(
            "step --json-out and --profile-dir one path",
            [*CHECK, *out, "--profile-dir", "{d}/x.json", "--check-only"],
        ),  # fmt: skip
        Input(
            "step --json-out and the cache one path",
            [*CHECK, *out, "--compilation-cache-dir", "{d}/x.json", "--check-only"],
        ),  # fmt: skip
        Input(
            "step --log-dir and the cache one folder",
            [*CHECK, "--log-dir", "{d}/c", "--compilation-cache-dir", "{d}/c", "--check-only"],
        ),  # fmt: skip
        Input(
            "step --profile-dir and --log-dir one folder",
            [*CHECK, "--log-dir", "{d}/p", "--profile-dir", "{d}/p", "--check-only"],
        ),  # fmt: skip
        Input(
            "step --json-out an existing folder",
            [*CHECK, "--json-out", "{d}/empty-dir", "--check-only"],
        ),  # fmt: skip
        Input(
            "step --log-dir an existing file", [*CHECK, "--log-dir", "{d}/a-file", "--check-only"]
        ),  # fmt: skip
        Input(
            "step --profile-dir an existing file",
            [*CHECK, "--profile-dir", "{d}/a-file", "--check-only"],
        ),  # fmt: skip
        Input(
            "step --compilation-cache-dir a file",
            [*CHECK, "--compilation-cache-dir", "{d}/a-file", "--check-only"],
        ),  # fmt: skip
        Input(
            "step --json-out under a file",
            [*CHECK, "--json-out", "{d}/a-file/x.json", "--check-only"],
        ),  # fmt: skip
        Input(
            "step --resume a missing record (says so)",
            [*CHECK, "--json-out", "{d}/new.json", "--resume", "--check-only"],
            exits=(0,),
            lines=None,
            said="does not exist yet",
        ),  # fmt: skip
        Input(
            "step --resume an empty file",
            [*CHECK, "--json-out", "{d}/empty.json", "--resume", "--check-only"],
            lines=None,
        ),  # fmt: skip
        Input(
            "step --resume a loader record", [*CHECK, "--json-out", "{d}/w0.json", "--resume"]
        ),  # fmt: skip
        Input(
            "step --resume and --overwrite",
            [*CHECK, "--json-out", "{d}/aa1.json", "--resume", "--overwrite"],
        ),  # fmt: skip
        Input(
            "step --json-out an existing record, no flag",
            [*CHECK, "--json-out", "{d}/aa1.json", "--check-only"],
        ),  # fmt: skip
        Input("step --json-out empty", [*CHECK, "--json-out", "", "--check-only"]),
        Input(
            "step --json-out a symlink loop", [*CHECK, "--json-out", "{d}/loop", "--check-only"]
        ),  # fmt: skip
        Input(
            "step --json-out unicode name",
            [*CHECK, "--json-out", "{d}/résumé ✓ new.json", "--check-only"],
            exits=(0,),
            lines=None,
        ),  # fmt: skip
        Input("data --json-out the dataset folder", [*DATA, "--json-out", "{d}/dataset"]),
        Input(
            "data --json-out == --against",
            [*DATA, "--json-out", "{d}/aa1.json", "--against", "{d}/aa1.json", "--overwrite"],
        ),  # fmt: skip
        Input("prepare --out a file", [*PREPARE, "--synthetic", "3", "--out", "{d}/a-file"]),
        Input(
            "prepare --out the scratch folder (not empty)",
            [*PREPARE, "--synthetic", "3", "--out", "{d}"],
        ),  # fmt: skip
        Input("report --out a file", [*REPORT, "{d}/mine", "--out", "{d}/a-file"]),
        Input("schema --export a file", [*DEW, "schema", "--export", "{d}/a-file"]),
    ]


def records() -> list[Input]:
    """Records empty, cut, edited, partial, of the wrong types, read by validate."""

    def v(what, name, **kw):
        return Input(f"validate {what}", [*VALIDATE, f"{{d}}/{name}"], **kw)

    return [
        v("an empty file", "empty.json", said="is empty"),
        v("a file of blanks", "blank.json", said="is empty"),
        v("a record with a UTF-8 BOM", "bom.json", said="BOM"),
        v("a record with a NaN literal", "nan.json", exits=(1, 2), lines=None),
        v("a record cut at 500 bytes", "cut.json"),
        v("JSON nested 100000 deep", "deep.json"),
        v("duplicate keys", "dupkeys.json", exits=(1,), lines=None),
        v("JSON null", "null.json"),
        v("a partial record (says PARTIAL)", "partial.json", exits=(0,), said="PARTIAL"),
        v(
            "kind TPU on platform cpu", "tpukind.json", exits=(1,), said="is no device of platform"
        ),  # fmt: skip
        v(
            "kind NVIDIA on platform cpu",
            "gpukind.json",
            exits=(1,),
            said="is no device of platform",
        ),  # fmt: skip
        v(
            "ms/step 440 beside repeats of ~33", "inflated.json", exits=(1,), said="outside its"
        ),  # fmt: skip
        v("ms/step 1e308", "huge.json", exits=(1,)),
        v("ms/step negative", "negative-ms.json", exits=(1,)),
        v("schema_version a string", "version-str.json", exits=(0, 1), lines=None),
        v("schema_version 99", "version-99.json", exits=(1,)),
        v("rows an object", "rows-object.json", exits=(1,), lines=None),
        v("kind unknown", "kind-nope.json", exits=(1,), lines=None),
        v("created a word", "created-word.json", exits=(1,), lines=None),
        v("status maybe", "status-maybe.json", exits=(1,), lines=None),
        v("device count a string", "count-str.json", exits=(0, 1), lines=None),
        v("a unicode file name", "résumé ✓.json", exits=(0,)),
        v("a name with a space", "with space.json", exits=(0,)),
        Input("validate /dev/null", [*VALIDATE, "/dev/null"], said="is empty"),
        Input("validate a folder without JSON", [*VALIDATE, "{d}/empty-dir"]),
        Input("validate an empty word", [*VALIDATE, ""]),
        Input("validate a symlink loop", [*VALIDATE, "{d}/loop"]),
        Input(
            "validate a relative path from another folder",
            [*VALIDATE, "../aa1.json"],
            exits=(0,),
            cwd="{d}/elsewhere",
        ),  # fmt: skip
        Input(
            "report an empty record among records",
            [*REPORT, "{d}", "--out", "{d}/site-new"],
            exits=(0,),
            lines=None,
        ),  # fmt: skip
        Input("report a missing folder", [*REPORT, "{d}/none", "--out", "{d}/site-2"]),
        Input("report a file, not a folder", [*REPORT, "{d}/aa1.json", "--out", "{d}/site-3"]),
    ]


def comparisons() -> list[Input]:
    def c(what, *args, **kw):
        return Input(f"compare {what}", [*COMPARE, *args], **kw)

    aa1, aa2 = "{d}/aa1.json", "{d}/aa2.json"
    return [
        c(
            "loader 8 workers against 0",
            "{d}/w8.json",
            "{d}/w0.json",
            said="share no comparable row",
        ),  # fmt: skip
        c(
            "a loader pair suggests no dew ab",
            "{d}/w0.json",
            "{d}/w0b.json",
            exits=(0, 1, 3),
            lines=0,
            unsaid="dew ab",
        ),  # fmt: skip
        c("timed against compile-only", aa1, "{d}/co.json", said="is compile-only"),
        c("compile-only against timed (parity)", "{d}/co.json", aa1, exits=(0, 1), lines=0),
        c(
            "a partial run (headline says PARTIAL)",
            "{d}/partial.json",
            aa2,
            exits=(0, 1, 3),
            lines=0,
            said="PARTIAL RUN",
        ),  # fmt: skip
        c(
            "a partial reference",
            aa2,
            "{d}/partial.json",
            exits=(0, 1, 3),
            lines=0,
            said="PARTIAL REFERENCE",
        ),  # fmt: skip
        c("an empty RUN", "{d}/empty.json", aa2, said="is empty"),
        c("a RUN with a TPU kind on cpu", "{d}/tpukind.json", aa2, said="is no device"),
        c("an inflated row", "{d}/inflated.json", aa2, said="outside its"),
        c("step against loader", aa1, "{d}/w0.json"),
        c("--band -1", aa1, aa2, "--band", "-1"),
        c("--band 1e309", aa1, aa2, "--band", "1e309"),
        c("--band inf", aa1, aa2, "--band", "inf"),
        c("--alpha nan", aa1, aa2, "--alpha", "nan"),
        c("--alpha 0.5", aa1, aa2, "--alpha", "0.5"),
        c("--target-mde 0", aa1, aa2, "--target-mde", "0"),
        c("--target-mde nan", aa1, aa2, "--target-mde", "nan"),
        c("--run-noise -0.1", aa1, aa2, "--run-noise", "-0.1"),
        c(
            "--band twice (the last wins)",
            aa1,
            aa2,
            "--band",
            "5",
            "--band",
            "50",
            exits=(0, 1, 3),
            lines=0,
        ),  # fmt: skip
        c("--band a word", aa1, aa2, "--band", "five"),
        c("--format nope", aa1, aa2, "--format", "nope"),
        c("--plot a folder", aa1, aa2, "--plot", "{d}/empty-dir"),
        c("--plot onto RUN", aa1, aa2, "--plot", aa1),
        c("--history a missing folder", aa1, aa2, "--history", "{d}/none"),
        c(
            "--history an empty folder",
            aa1,
            aa2,
            "--history",
            "{d}/empty-dir",
            exits=(0, 1, 3),
            lines=None,
        ),  # fmt: skip
        c("RUN and REFERENCE one file by two names", aa1, "{d}/résumé ✓.json"),
        c(
            "from another folder, relative paths",
            "../aa1.json",
            "../aa2.json",
            exits=(0, 1, 3),
            lines=0,
            cwd="{d}/elsewhere",
        ),  # fmt: skip
    ]


def steps() -> list[Input]:
    def s(what, *args, **kw):
        return Input(f"step {what}", [*CHECK, *args, "--check-only"], **kw)

    return [
        s("--steps -1", "--steps", "-1"),
        s("--steps nan", "--steps", "nan"),
        s("--steps past 64 bits", "--steps", BIG),
        s("--warmup -1", "--warmup", "-1"),
        s("--repeats 0", "--repeats", "0"),
        s("--repeats auto without --target-mde", "--repeats", "auto"),
        s("--repeats auto --target-mde nan", "--repeats", "auto", "--target-mde", "nan"),
        s("--cases []", "--cases", "[]"),
        s("--cases {}", "--cases", "{}"),
        s("--cases [1]", "--cases", "[1]"),
        s("--cases a unicode architecture", "--cases", '[{"architecture": "ünet"}]'),
        s("--architectures empty", "--architectures", ""),
        s("--mesh data -1", "--mesh", '{"data": -1}'),
        s("--mesh a list", "--mesh", "[]"),
        s("--dtype nope", "--dtype", "nope"),
        s("--xla-flags a word", "--xla-flags", "nonsense"),
        s("--preset nope", "--preset", "nope"),
        s("--compile-jobs 0", "--compile-jobs", "0"),
        s("--case-timeout -5", "--case-timeout", "-5"),
        s("--case-timeout nan", "--case-timeout", "nan"),
        s("--idle-check nope", "--idle-check", "nope"),
        s("--steps twice", "--steps", "3", "--steps", "-3"),
        s("from another folder (/)", exits=(0,), lines=None, cwd="/"),
        Input(
            "step JAX_PLATFORMS=nope",
            [*CHECK, "--check-only"],
            env={"JAX_PLATFORMS": "nope"},
            lines=None,
            exits=(1, 2),
        ),  # fmt: skip
        Input(
            "step TMPDIR a missing folder",
            [*CHECK, "--check-only"],
            env={"TMPDIR": "/nonexistent/tmp"},
            exits=(0, 2),
            lines=None,
        ),  # fmt: skip
    ]


def loaders() -> list[Input]:
    def l(what, *args, **kw):  # noqa: E743
        return Input(f"data {what}", [*DATA, *args], **kw)

    return [
        l("--batch 0", "--batch", "0"),
        l("--batch -1", "--batch", "-1"),
        l("--steps 0", "--steps", "0"),
        l("--warmup -1", "--warmup", "-1"),
        l("--repeats 0", "--repeats", "0"),
        l("--case-timeout nan", "--case-timeout", "nan"),
        l("--against an empty file", "--against", "{d}/empty.json"),
        l("--against a loader record", "--against", "{d}/w0.json"),
        l("--against a folder", "--against", "{d}/empty-dir"),
        Input(
            "data --data.path a file",
            [*DEW, "data", "data:synthetic-images", "--data.path", "{d}/a-file"],
            lines=None,
        ),  # fmt: skip
        Input("data an unknown dataset", [*DEW, "data", "data:nope"]),
    ]


def others() -> list[Input]:
    synth = [*PREPARE, "--out", "{d}/ds"]
    return [
        Input(
            "prepare --synthetic 99999999999",
            [*synth, "--synthetic", "99999999999"],
            said="needs about",
        ),  # fmt: skip
        Input("prepare --synthetic a word", [*synth, "--synthetic", "many"]),
        Input("prepare --synthetic 1e3", [*synth, "--synthetic", "1e3"]),
        Input("prepare --seed -1", [*synth, "--synthetic", "3", "--seed", "-1"]),
        Input("prepare --seed past 64 bits", [*synth, "--synthetic", "3", "--seed", BIG]),
        Input("prepare --out empty", [*PREPARE, "--synthetic", "3", "--out", ""]),
        Input(
            "prepare --source a file", [*PREPARE, "--source", "{d}/a-file", "--out", "{d}/ds2"]
        ),  # fmt: skip
        Input(
            "prepare Ctrl-C mid-write",
            [*PREPARE, "--synthetic", "50000", "--out", "{d}/ds3"],
            exits=(130,),
            lines=1,
            stop=(signal.SIGINT, "records written"),
        ),  # fmt: skip
        Input(
            "prepare SIGTERM mid-write",
            [*PREPARE, "--synthetic", "50000", "--out", "{d}/ds4"],
            exits=(143,),
            lines=1,
            stop=(signal.SIGTERM, "records written"),
        ),  # fmt: skip
        Input(
            "benchmark_step --help without dew",
            ["{py}", "-S", "{root}/tools/benchmark_step.py", "--help"],
        ),  # fmt: skip
        Input(
            "benchmark_data --help without dew",
            ["{py}", "-S", "{root}/tools/benchmark_data.py", "--help"],
        ),  # fmt: skip
        Input(
            "prepare_dataset --help without dew",
            ["{py}", "-S", "{root}/tools/prepare_dataset.py", "--help"],
        ),  # fmt: skip
        *[
            Input(
                f"install.py bundle.json {name}",
                ["{py}", f"{{d}}/bundle-{name}/install.py"],
                exits=(1,),
            )
            for name in BUNDLES
        ],  # fmt: skip
        Input(
            "install.py --target twice",
            ["{py}", "{d}/bundle-cut/install.py", "--target", "{d}/t1", "--target", "{d}/t2"],
            exits=(1,),
        ),  # fmt: skip
        Input(
            "install.py --target a file",
            ["{py}", "{d}/bundle-cut/install.py", "--target", "{d}/a-file"],
            exits=(1, 2),
        ),  # fmt: skip
        Input("dew with a flag only", [*DEW, "--nope"]),
        Input(
            "dew validate --help from /", [*VALIDATE, "--help"], exits=(0,), lines=None, cwd="/"
        ),  # fmt: skip
        Input(
            "dew ab --help from another folder",
            [*DEW, "ab", "--help"],
            exits=(0,),
            lines=None,
            cwd="{d}/elsewhere",
        ),  # fmt: skip
        Input(
            "dew reproduce an empty record", [*DEW, "reproduce", "{d}/empty.json"], said="is empty"
        ),  # fmt: skip
        Input(
            "dew reproduce a partial record",
            [*DEW, "reproduce", "{d}/partial.json", "--help"],
            exits=(0,),
            lines=None,
        ),  # fmt: skip
        Input("dew schema --export empty", [*DEW, "schema", "--export", ""]),
    ]
