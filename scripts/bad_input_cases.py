"""The bad inputs of scripts/bad_inputs.py, each as a user types it: issue 52's findings,
the more tried for it, and the earlier ones. `d` is the scratch directory the runner makes
(its files: bad_inputs.scratch)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "results"
PUBLISHED = RESULTS / "published"
DEW = [sys.executable, "-m", "dew.commands"]
STEP = [sys.executable, str(REPO / "tools" / "benchmark_step.py"), "--idle-check", "off"]
DATA = [sys.executable, str(REPO / "tools" / "benchmark_data.py")]
PREPARE = [sys.executable, str(REPO / "tools" / "prepare_dataset.py")]
COMPARE = [*DEW, "compare"]
VALIDATE = [*DEW, "validate"]
SCHEMA = [*DEW, "schema"]
SITE = [*DEW, "report"]
AB = [*DEW, "ab", "HEAD", "HEAD"]
REPRODUCE = [*DEW, "reproduce"]
LAUNCH = [sys.executable, "-m", "dew.bench.multihost.launch"]
HUGE = "9" * 23  # 99999999999999999999999: past every 32-bit counter
# What this script holds while the inputs run, as a running sweep and a site build would.
HELD, HELD_SITE = "held.json", "site"


@dataclasses.dataclass(frozen=True)
class Input:
    what: str
    argv: list[str]
    exit: int = 2  # what it must end with
    lines: int | None = 1  # lines on stderr; None: any number (only no traceback)


def issue_52(d: Path) -> list[Input]:
    """The findings of issue 52, each as it was reported."""
    step, smoke, loop = d / "step.json", d / "smoke.json", d / "loop"
    smoke_steps = ["--preset", "cpu-smoke", "--architectures", "uvit"]
    return [
        Input(
            "--steps past 32 bits, --compile-only",
            [*DEW, "step", *smoke_steps, "--steps", HUGE, "--compile-only"],
        ),  # fmt: skip
        Input("schema --export a symlink loop", [*SCHEMA, "--export", str(loop)]),
        Input("report --out a symlink loop", [*SITE, str(d), "--out", str(loop)]),
        Input("schema --export a 300-character name", [*SCHEMA, "--export", str(d / ("a" * 300))]),
        Input("schema --export onto a file of the user's", [*SCHEMA, "--export", str(d / "mine")]),
        Input('schema --export ""', [*SCHEMA, "--export", ""]),
        Input("compare cpu-smoke against the RTX 4080's small", [*COMPARE, str(smoke), str(step)]),
        Input("compare X X", [*COMPARE, str(step), str(step)]),
        Input(
            "validate $(find results -name '*.json')",
            [*VALIDATE, *map(str, sorted(RESULTS.rglob("*.json")))],
            exit=0,
            lines=0,
        ),
        Input("validate results/", [*VALIDATE, str(RESULTS)], exit=0, lines=0),
        Input("compare --frob a.json", [*COMPARE, "--frob", "a.json"]),
        Input("compare -x a.json", [*COMPARE, "-x", "a.json"]),
        Input("ab --steps 0", [*AB, "--architectures", "uvit", "--steps", "0"]),
        Input("ab --steps -3", [*AB, "--architectures", "uvit", "--steps", "-3"]),
        Input("ab an unknown architecture", [*AB, "--architectures", "nope"]),
        Input("ab --rounds 1", [*AB, "--architectures", "uvit", "--rounds", "1"]),
        Input("reproduce a list", [*REPRODUCE, str(d / "list.json")]),
        Input("reproduce a record without settings", [*REPRODUCE, str(d / "kind.json")]),
    ]


def own(d: Path) -> list[Input]:
    """More of the same kinds, tried for issue 52."""
    step, loader, text, binary = d / "step.json", d / "loader.json", d / "notes.txt", d / "x.bin"
    loop, long, empty = d / "loop", d / ("b" * 300), d / "empty"
    smoke = [*DEW, "step", "--preset", "cpu-smoke", "--architectures", "uvit"]
    synthetic = [*DEW, "data", "data:synthetic-images", "--data.path", str(d / "dataset")]
    return [
        Input("dew with no command", DEW, lines=None),
        Input("dew an unknown command", [*DEW, "bench"]),
        Input("compare three records", [*COMPARE, str(step), str(step), str(loader)]),
        Input("compare --band nan", [*COMPARE, str(step), "--band", "nan"]),
        Input("compare --alpha 0", [*COMPARE, str(step), "--alpha", "0"]),
        Input("compare --alpha 1.5", [*COMPARE, str(step), "--alpha", "1.5"]),
        Input("compare --history not a folder", [*COMPARE, str(step), "--history", str(text)]),
        Input("compare --run-noise 100", [*COMPARE, str(step), "--run-noise", "100"]),
        Input("compare noise.json", [*COMPARE, str(d / "noise.json")]),
        Input("compare an A/B plan", [*COMPARE, str(d / "ab-plan.json"), str(step)]),
        Input("compare a missing file", [*COMPARE, str(d / "none.json")]),
        Input("compare a folder", [*COMPARE, str(d)]),
        Input('compare --plot ""', [*COMPARE, str(step), str(d / "copy.json"), "--plot", ""]),
        Input(
            "compare --plot a symlink loop",
            [*COMPARE, str(step), str(d / "copy.json"), "--plot", str(loop)],
        ),  # fmt: skip
        Input(
            "compare --plot a 300-character name",
            [*COMPARE, str(step), str(d / "copy.json"), "--plot", str(long)],
        ),  # fmt: skip
        Input("compare --format terminal", [*COMPARE, str(step), "--format", "terminal"]),
        Input("validate a folder with no JSON", [*VALIDATE, str(empty)]),
        Input("validate a symlink loop", [*VALIDATE, str(loop)]),
        Input("validate --strict", [*VALIDATE, "--strict", str(step)]),
        Input('validate ""', [*VALIDATE, ""]),
        Input("validate with nothing", VALIDATE),
        Input("schema --export with no value", [*SCHEMA, "--export"]),
        Input("schema --export under a file", [*SCHEMA, "--export", str(text / "sub")]),
        Input("schema --overwrite alone", [*SCHEMA, "--overwrite"]),
        Input("report a missing folder", [*SITE, str(d / "none")]),
        Input("report a file", [*SITE, str(text)]),
        Input("report --out a 300-character name", [*SITE, str(d), "--out", str(long)]),
        Input("step --steps -1", [*smoke, "--steps", "-1"]),
        Input("step --steps abc", [*smoke, "--steps", "abc"]),
        Input("step --warmup past 32 bits", [*smoke, "--warmup", HUGE]),
        Input("step --repeats past 32 bits", [*smoke, "--repeats", HUGE]),
        Input("step --json-out a symlink loop", [*smoke, "--json-out", str(loop)]),
        Input('step --json-out ""', [*smoke, "--json-out", ""]),
        Input('step --log-dir ""', [*smoke, "--log-dir", ""]),
        Input('data --json-out ""', [*synthetic, "--json-out", ""]),
        Input('report ""', [*SITE, ""]),
        Input("step --json-out a 300-character name", [*smoke, "--json-out", str(long)]),
        Input("step --profile-dir a symlink loop", [*smoke, "--profile-dir", str(loop)]),
        Input("step an unknown flag before a value", [*smoke, "--frob", "3"]),
        Input(
            "step --check-only of an unknown architecture",
            [*DEW, "step", "--preset", "cpu-smoke", "--architectures", "nope", "--check-only"],
        ),  # fmt: skip
        Input("data --steps past 32 bits", [*synthetic, "--steps", HUGE]),
        Input("data --batch 0", [*synthetic, "--batch", "0"]),
        Input("data --json-out a symlink loop", [*synthetic, "--json-out", str(loop)]),
        Input("data -x", [*DEW, "data", "-x"]),
        Input("ab one stack", [*DEW, "ab", "HEAD", "--architectures", "uvit"]),
        Input("ab no cases", AB),
        Input("ab --warmup -1", [*AB, "--architectures", "uvit", "--warmup", "-1"]),
        Input("ab --rounds abc", [*AB, "--architectures", "uvit", "--rounds", "abc"]),
        Input("ab --steps past 32 bits", [*AB, "--architectures", "uvit", "--steps", HUGE]),
        Input("ab a case of batch 0", [*AB, "--cases", '[{"architecture":"uvit","batch":0}]']),
        Input("ab --band 0", [*AB, "--architectures", "uvit", "--band", "0"]),
        Input("ab --variant rocm", [*AB, "--architectures", "uvit", "--variant", "rocm"]),
        Input("ab --step of no module", [*AB, "--step", "no_such_module:make_step"]),
        Input("ab --preset big", [*AB, "--preset", "big", "--architectures", "uvit"]),
        Input("reproduce two records", [*REPRODUCE, str(step), str(step)]),
        Input("reproduce nothing", REPRODUCE),
        Input("reproduce a loader record", [*REPRODUCE, str(loader)]),
        Input("reproduce noise.json", [*REPRODUCE, str(d / "noise.json")]),
        Input("reproduce a missing file", [*REPRODUCE, str(d / "none.json")]),
        Input("reproduce a folder", [*REPRODUCE, str(d)]),
        Input("reproduce a binary file", [*REPRODUCE, str(binary)]),
        Input("reproduce not JSON", [*REPRODUCE, str(text)]),
        Input("reproduce --interleaved 1", [*REPRODUCE, str(step), "--interleaved", "1"]),
        Input("reproduce --interleaved x", [*REPRODUCE, str(step), "--interleaved", "x"]),
        Input("reproduce --frob", [*REPRODUCE, str(step), "--frob"]),
        Input("prepare --out a symlink loop", [*PREPARE, "--synthetic", "8", "--out", str(loop)]),
        Input(
            "tool: an unknown flag before a value", [*STEP, "--preset", "cpu-smoke", "--frob", "3"]
        ),  # fmt: skip
    ]


def inputs(d: Path) -> list[Input]:
    """Every bad input; `d` is the scratch directory."""
    return issue_52(d) + own(d) + [Input(what, argv) for what, argv in earlier(d)]


def earlier(d: Path) -> list[tuple[str, list[str]]]:
    """The inputs before issue 52, as (what, argv)."""
    step, loader, text, binary = d / "step.json", d / "loader.json", d / "notes.txt", d / "x.bin"
    data, blocked = d / "dataset", d / "notes.txt" / "sub" / "out.json"
    smoke = [*STEP, "--preset", "cpu-smoke"]
    flowers = [*DATA, "data:oxford-flowers", "--data.path", str(data)]
    return [
        ("unknown architecture", [*smoke, "--architectures", "nope"]),
        ("bare --architectures", [*smoke, "--architectures"]),
        ("--cases not JSON", [*smoke, "--cases", "not json"]),
        ("--cases unknown field", [*smoke, "--cases", '[{"architecture":"uvit","heads":5}]']),
        (
            "--cases depth -1",
            [*smoke, "--cases", '[{"architecture":"simple_dit","model":{"depth":-1}}]'],
        ),
        ("--cases batch 0", [*smoke, "--cases", '[{"architecture":"uvit","batch":0}]']),
        (
            "--cases with --architectures",
            [*smoke, "--architectures", "uvit", "--cases", '[{"architecture":"unet"}]'],
        ),
        ("--mesh not JSON", [*smoke, "--mesh", "{"]),
        ("--mesh unknown field", [*smoke, "--mesh", '{"fsdpp":2}']),
        (
            "--mesh larger than the devices",
            [*smoke, "--architectures", "uvit", "--mesh", '{"fsdp":16}'],
        ),
        ("--steps 0", [*smoke, "--steps", "0"]),
        ("--compile-jobs 0", [*smoke, "--compile-jobs", "0"]),
        ("--compile-jobs -1", [*smoke, "--compile-jobs", "-1"]),
        ("--compile-jobs 2 --no-isolate", [*smoke, "--compile-jobs", "2", "--no-isolate"]),
        ("--allocator jemalloc", [*smoke, "--allocator", "jemalloc"]),
        ("--allocator tcmalloc --no-isolate", [*smoke, "--allocator", "tcmalloc", "--no-isolate"]),
        ("--repeats 0", [*smoke, "--repeats", "0"]),
        ("--repeats auto without --target-mde", [*smoke, "--repeats", "auto"]),
        ("--target-mde 0", [*smoke, "--repeats", "auto", "--target-mde", "0"]),
        ("--target-mde abc", [*smoke, "--repeats", "auto", "--target-mde", "abc"]),
        (
            "--repeats auto with a cap of 2",
            [*smoke, "--repeats", "auto", "--target-mde", "20", "--max-repeats", "2"],
        ),
        ("--warmup -1", [*smoke, "--warmup", "-1"]),
        ("--case-timeout 0", [*smoke, "--case-timeout", "0"]),
        ("--case-timeout -5", [*smoke, "--case-timeout", "-5"]),
        ("--case-timeout nan", [*smoke, "--case-timeout", "nan"]),
        ("--case-timeout abc", [*smoke, "--case-timeout", "abc"]),
        ("--dtype float16", [*smoke, "--dtype", "float16"]),
        ("--lock-clocks fast", [*smoke, "--lock-clocks", "fast"]),
        ("--lock-clocks max on CPU", [*smoke, "--lock-clocks", "max"]),
        ("--step not MODULE:FACTORY", [*smoke, "--step", "nothing"]),
        ("--step of no module", [*smoke, "--step", "no_such_module:make_step"]),
        ("--step of no factory", [*smoke, "--step", "json:no_such_factory"]),
        ("--step factory not callable", [*smoke, "--step", "json:__version__"]),
        ("--preset big", [*STEP, "--preset", "big"]),
        ("unknown flag", [*smoke, "--no-such-flag"]),
        ("--resume without --json-out", [*smoke, "--resume"]),
        (
            "--json-out another run is writing",
            [*smoke, "--architectures", "uvit", "--json-out", str(d / HELD)],
        ),
        (
            "--resume of a record another run is writing",
            [*smoke, "--architectures", "uvit", "--json-out", str(d / HELD), "--resume"],
        ),
        (
            "--json-out onto a step record",
            [*smoke, "--architectures", "uvit", "--json-out", str(step)],
        ),
        (
            "--json-out onto a text file",
            [*smoke, "--architectures", "uvit", "--json-out", str(text)],
        ),
        ("--json-out a directory", [*smoke, "--architectures", "uvit", "--json-out", str(d)]),
        (
            "--json-out under a file",
            [*smoke, "--architectures", "uvit", "--json-out", str(blocked)],
        ),
        (
            "--resume onto a binary file",
            [*smoke, "--architectures", "uvit", "--json-out", str(binary), "--resume"],
        ),
        (
            "--resume onto a loader record",
            [*smoke, "--architectures", "uvit", "--json-out", str(loader), "--resume"],
        ),
        (
            "--profile-dir under a file",
            [*smoke, "--architectures", "uvit", "--profile-dir", str(blocked)],
        ),
        (
            "--compilation-cache-dir a file",
            [*smoke, "--architectures", "uvit", "--compilation-cache-dir", str(text)],
        ),
        (
            "unknown XLA flag",
            [*smoke, "--architectures", "uvit", "--xla-flags", "--xla_no_such_flag=1"],
        ),
        (
            "cudnn attention on CPU",
            [*smoke, "--architectures", "uvit", "--attention-impl", "cudnn"],
        ),
        ("unknown dataset subcommand", [*DATA, "data:imagenet"]),
        ("negative workers", [*flowers, "--data.loading.workers", "-1"]),
        ("image size 0", [*flowers, "--data.image-size", "0"]),
        ("loader --case-timeout 0", [*flowers, "--case-timeout", "0"]),
        ("loader --case-timeout nan", [*flowers, "--case-timeout", "nan"]),
        ("loader --case-timeout abc", [*flowers, "--case-timeout", "abc"]),
        ("missing --data.path", [*DATA, "data:oxford-flowers", "--data.path", str(d / "none")]),
        (
            "loader --json-out another run is writing",
            [*DATA, "data:synthetic-images", "--data.path", str(data), "--json-out", str(d / HELD)],
        ),
        ("a synthetic set as oxford-flowers", flowers),
        (
            "loader --json-out onto a step record",
            [
                *flowers[:2],
                "data:synthetic-images",
                "--data.path",
                str(data),
                "--json-out",
                str(step),
            ],
        ),
        (
            "loader --against a directory",
            [*DATA, "data:synthetic-images", "--data.path", str(data), "--against", str(d)],
        ),
        (
            "loader --against bad JSON",
            [*DATA, "data:synthetic-images", "--data.path", str(data), "--against", str(text)],
        ),
        (
            "loader --against S --json-out S",
            [
                *DATA,
                "data:synthetic-images",
                "--data.path",
                str(data),
                "--against",
                str(step),
                "--json-out",
                str(step),
            ],
        ),
        ("prepare --out an existing dataset", [*PREPARE, "--synthetic", "8", "--out", str(data)]),
        ("prepare --out under a file", [*PREPARE, "--synthetic", "8", "--out", str(blocked)]),
        ("prepare --synthetic 0", [*PREPARE, "--synthetic", "0", "--out", str(d / "new")]),
        ("prepare without --out", [*PREPARE, "--synthetic", "8"]),
        ("validate a binary file", [*VALIDATE, str(binary)]),
        ("validate a missing file", [*VALIDATE, str(d / "none.json")]),
        ("compare a binary file", [*COMPARE, str(binary)]),
        ("compare step with loader", [*COMPARE, str(step), str(loader)]),
        ("compare --band -5", [*COMPARE, str(step), "--band", "-5"]),
        ("compare --format yaml", [*COMPARE, str(step), str(step), "--format", "yaml"]),
        ("compare --target-mde 0", [*COMPARE, str(step), str(step), "--target-mde", "0"]),
        ("compare --target-mde abc", [*COMPARE, str(step), str(step), "--target-mde", "abc"]),
        ("compare --run-noise -1", [*COMPARE, str(step), str(step), "--run-noise", "-1"]),
        (
            "compare --plot onto the reference",
            [*COMPARE, str(step), str(d / "copy.json"), "--plot", str(d / "copy.json")],
        ),
        (
            "compare --plot under a file",
            [*COMPARE, str(step), str(d / "copy.json"), "--plot", str(blocked)],
        ),
        ("schema --export onto a file", [*SCHEMA, "--export", str(text)]),
        ("site --out another build is writing", [*SITE, str(d), "--out", str(d / HELD_SITE)]),
        ("launch --processes 3", [*LAUNCH, "--processes", "3", "--json-out", str(d / "m.json")]),
    ]
