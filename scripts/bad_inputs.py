"""Bad input at every entry point: one line, a non-zero exit, no traceback, no file changed.

    JAX_PLATFORMS=cpu python scripts/bad_inputs.py [--markdown]

Runs each entry point (the tools and the `python -m dew.bench.*` modules) as a user would,
with inputs a user can type that must be refused, in a scratch directory holding a step
record, a loader record, a text file, a binary file and a prepared dataset. Prints one
row per input: the command, the exit code and the line on stderr. Exit 0 when every input
was refused in exactly one line with exit 2, without a traceback, and every file in the
scratch directory is byte-identical afterwards. A record another run is writing is one
such input: this script holds `held.json` in the scratch directory (its lock, as a running
sweep holds its --json-out; `site` as a site build holds its --out) while the tools are
refused on it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from dew.bench.common import cli
from dew.bench.common.files import one_writer

REPO = Path(__file__).resolve().parents[1]
PUBLISHED = REPO / "results" / "published"
STEP = [sys.executable, str(REPO / "tools" / "benchmark_step.py"), "--idle-check", "off"]
DATA = [sys.executable, str(REPO / "tools" / "benchmark_data.py")]
PREPARE = [sys.executable, str(REPO / "tools" / "prepare_dataset.py")]
COMPARE = [sys.executable, "-m", "dew.bench.analysis.compare_command"]
VALIDATE = [sys.executable, "-m", "dew.bench.record.validate"]
SCHEMA = [sys.executable, "-m", "dew.bench.record.schema"]
LAUNCH = [sys.executable, "-m", "dew.bench.multihost.launch"]
SITE = [sys.executable, "-m", "dew.bench.site"]
# What this script holds while the inputs run, as a running sweep and a site build would.
HELD, HELD_SITE = "held.json", "site"


def inputs(d: Path) -> list[tuple[str, list[str]]]:
    """(what, argv) for every bad input; `d` is the scratch directory."""
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
        ("validate a directory", [*VALIDATE, str(d)]),
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
            [*COMPARE, str(step), str(step), "--plot", str(step)],
        ),
        ("compare --plot under a file", [*COMPARE, str(step), str(step), "--plot", str(blocked)]),
        ("schema --export onto a file", [*SCHEMA, "--export", str(text)]),
        ("site --out another build is writing", [*SITE, str(d), "--out", str(d / HELD_SITE)]),
        ("launch --processes 3", [*LAUNCH, "--processes", "3", "--json-out", str(d / "m.json")]),
    ]


def scratch() -> Path:
    d = Path(tempfile.mkdtemp(prefix="dew-bad-inputs-"))
    shutil.copy(PUBLISHED / "2026-09-02-rtx4080-6b0f119-small.json", d / "step.json")
    shutil.copy(PUBLISHED / "oxford-flowers-loader.json", d / "loader.json")
    (d / "notes.txt").write_text("a text file\n")
    (d / "x.bin").write_bytes(bytes(range(256)))
    subprocess.run([*PREPARE, "--synthetic", "8", "--out", str(d / "dataset")], check=True,
                   capture_output=True)  # fmt: skip
    return d


def snapshot(d: Path) -> dict[str, str]:
    return {
        str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(d.rglob("*"))
        if p.is_file()
    }


@dataclasses.dataclass(frozen=True)
class Args:
    """Bad input at every entry point: one line, a non-zero exit, no traceback."""

    markdown: bool = False
    """print the table as Markdown"""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    return cli.run("bad_inputs", lambda: check(cli.parse(Args, argv, prog="scripts/bad_inputs.py")))


def check(args: Args) -> int:
    d = scratch()
    # Released once the files are compared.
    with one_writer(d / HELD, flag="--json-out"), one_writer(d / HELD_SITE, flag="--out"):
        return check_in(d, args)


def check_in(d: Path, args: Args) -> int:
    before = snapshot(d)
    env = dict(os.environ, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu"))
    bad = 0
    if args.markdown:
        print("| input | exit | stderr |\n|---|---|---|")
    for what, argv in inputs(d):
        done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=d)
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        lines = [line for line in lines if "simulated CPU devices" not in line]
        ok = done.returncode == 2 and len(lines) == 1 and "Traceback" not in done.stderr
        bad += not ok
        shown = " / ".join(lines) if len(lines) < 4 else f"{len(lines)} lines: {lines[-1]}"
        if args.markdown:
            print(f"| {what} | {done.returncode} | `{shown}` |")
        else:
            print(f"{'ok ' if ok else 'BAD'} {done.returncode} {what}: {shown}")
    changed = [name for name, digest in snapshot(d).items() if before.get(name) != digest]
    changed += [name for name in before if name not in snapshot(d)]
    print(f"{len(inputs(d))} inputs, {bad} not refused in one line; files changed: {changed}")
    shutil.rmtree(d)
    return 0 if bad == 0 and not changed else 1


if __name__ == "__main__":
    sys.exit(main())
