"""Issue 60 on one chip: `dew reproduce` of the committed 18-case v5e record, then `dew ab
--variant tpu-host` of bfloat16 against float32 and of this dew against itself, each verdict
with its exit status and wall time in one table.

From the checkout's root on a TPU host with the bundle installed (docs/tpu-install.md):

    python3.11 dew-bundle/install.py && . dew-bundle/site/env.sh
    timeout 520 python3.11 scripts/chip_replays.py   # again until it prints the table

in this order (--only NAME... picks some), each through `python -m dew.commands`:

    reproduce  dew reproduce RECORD (--record, default the 04f0382 v5e table) --out DIR;
               with --record-dew DIR (the bundle built at the record's commit, installed by
               its install.py --target DIR) as --dew, else --accept-stack-difference (this
               dew reruns it; the new record's note says so)
    ab-dtype   dew ab HEAD HEAD --variant tpu-host --preset small --architectures unet
               simple_dit causal_transformer hybrid_dit --rounds 3 --a-dtype bfloat16
               --b-dtype float32: NOT REPRODUCED (exit 1), every float32 row slower expected
    ab-aa      the same with both sides bfloat16: REPRODUCED (exit 0) expected

Every folder is OUT/<stamp>-<name>-<device>-<commit> (--out, default results/runs), found
again by its name on the next call: a finished step (its done.json) is kept, a cut-off one
continued (reproduce's and ab's own --out). All share dew's kept programs in --cache (the
record's own /tmp/dew-cache by default), so a program compiled once is loaded after. SIGTERM
or SIGINT is passed to the running command, which keeps what it finished; then one line and
exit 128 + the signal. The wall time of each step is summed over the calls (wall.json).
Once every step is done the table goes to stdout and OUT/replays.md. Exit 0: every
expectation met; 1: not; 2: bad input. On a host without a TPU: --preset cpu-smoke
--architectures NAME... --steps N --rounds N and a record of those cases (the tests' way).
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from dew.bench.common import cli
from dew.bench.common.errors import Interrupted, faults
from dew.bench.common.files import REPO_ROOT, check_output_dir
from dew.bench.record.capture import code_identity  # the commit the records will name

PROG = "scripts/chip_replays.py"
RECORD = "results/runs/20261206T162051Z-small-tpu-v5e-04f0382/step.json"
SEED = ("unet", "simple_dit", "causal_transformer", "hybrid_dit")
NAMES = ("reproduce", "ab-dtype", "ab-aa")
EXPECTED = {
    "reproduce": "a verdict (exit 0, 1 or 3)",
    "ab-dtype": "NOT REPRODUCED (exit 1), every float32 row slower",
    "ab-aa": "REPRODUCED (exit 0)",
}


@dataclasses.dataclass(frozen=True)
class Args:
    """Rerun the v5e table with dew reproduce and time two A/Bs on this host's chip, then
    the table of verdicts. Exit 0: every expectation met; 1: not; 2: usage."""

    out: str = "results/runs"
    """the folder the steps' folders are made in (and replays.md)"""
    cache: str = "/tmp/dew-cache"
    """dew's kept programs, shared by every step (--compilation-cache-dir of the A/Bs)"""
    only: tuple[str, ...] | None = None
    """run only these steps (reproduce ab-dtype ab-aa)"""
    record: str = RECORD
    """the TPU record dew reproduce reruns"""
    record_dew: str | None = None
    """a bundle built at the record's commit, installed here (--dew); default this dew"""
    preset: str = "small"
    """the A/Bs' preset"""
    architectures: tuple[str, ...] = SEED
    """the A/Bs' architectures"""
    rounds: int = 3
    """the A/Bs' paired rounds"""
    steps: int | None = None
    """the A/Bs' --steps (default: the preset's)"""


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    return faults(PROG, lambda: cli.run(PROG, lambda: run(argv)))


def run(argv: list[str]) -> int:
    args = cli.parse(Args, argv, prog=PROG)
    check(args)
    code = code_identity(REPO_ROOT, os.environ)
    short = (code.commit or "nocommit")[:7] + ("-dirty" if code.dirty else "")
    out = Path(args.out)
    for name in args.only or NAMES:
        folder = find(out, name, short)
        if folder is not None and (folder / "done.json").is_file():
            say(f"{name}: {folder} is done, kept")
            continue
        if folder is None:
            stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
            folder = out / f"{stamp}-{name}-{device()}-{short}"
        step(name, command(name, args, folder), folder)
    done = {name: find(out, name, short) for name in NAMES}
    waiting = [name for name, folder in done.items()
               if folder is None or not (folder / "done.json").is_file()]  # fmt: skip
    if waiting:
        say(f"done: {', '.join(args.only or NAMES)}; the table waits for {', '.join(waiting)}")
        return cli.EXIT_OK
    return table({name: folder for name, folder in done.items() if folder}, out, argv, code)


def check(args: Args) -> None:
    unknown = [name for name in args.only or () if name not in NAMES]
    if unknown or (args.only is not None and not args.only):
        named = f"; no step named {', '.join(unknown)}" if unknown else ""
        raise cli.UsageError(f"--only takes some of {' '.join(NAMES)}{named}")
    cli.check_count("rounds", args.rounds, 2)
    if args.steps is not None:
        cli.check_count("steps", args.steps, 1)
    if not Path(args.record).is_file():
        raise cli.UsageError(f"--record {args.record} is no file")
    check_output_dir(args.out, flag="--out")
    check_output_dir(args.cache, flag="--cache")


@functools.cache
def device() -> str:
    """This host's device as a folder names it: tpu-v5e, cpu (the device probe, ~10 s)."""
    from dew.commands.on_chip import folder_name, host_stack_here

    return folder_name(host_stack_here())


def find(out: Path, name: str, short: str) -> Path | None:
    pattern = re.compile(rf"\d{{8}}T\d{{6}}Z-{re.escape(name)}-[a-z0-9-]+-{re.escape(short)}")
    found = sorted(p for p in out.iterdir() if pattern.fullmatch(p.name)) if out.is_dir() else []
    if len(found) > 1:
        raise cli.UsageError(f"--out {out} holds {len(found)} folders of {name} at {short}; "
                             "give --out a folder of one set")  # fmt: skip
    return found[0] if found else None


def command(name: str, args: Args, folder: Path) -> list[str]:
    """The dew command line of step `name`, writing into `folder`."""
    if name == "reproduce":
        dew = ["--dew", args.record_dew] if args.record_dew else ["--accept-stack-difference"]
        return ["reproduce", args.record, *dew, "--out", str(folder)]
    steps = ["--steps", str(args.steps)] if args.steps is not None else []
    b = "float32" if name == "ab-dtype" else "bfloat16"
    return ["ab", "HEAD", "HEAD", "--variant", "tpu-host", "--preset", args.preset,
            "--architectures", *args.architectures, *steps, "--rounds", str(args.rounds),
            "--a-dtype", "bfloat16", "--b-dtype", b, "--compilation-cache-dir", args.cache,
            "--out", str(folder)]  # fmt: skip


def step(name: str, dew_argv: list[str], folder: Path) -> None:
    """Run one step (its output on stderr and in folder/dew.log); its wall time added to
    wall.json whatever ends it; done.json once the command gave a verdict."""
    folder.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "dew.commands", *dew_argv]
    say(f"{name}: {shlex.join(['python', *argv[1:]])}")
    started, child, status = time.monotonic(), None, None
    try:
        with open(folder / "dew.log", "ab") as log:
            child = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
            status = child.wait()
    except Interrupted as stop:
        if child is not None:
            child.send_signal(stop.signum)  # it keeps what it finished and ends
            child.wait()
        stop.message = (f"interrupted while running {name}; {folder} keeps what it finished: "
                        "run the same command again to continue")  # fmt: skip
        raise
    finally:
        wall = folder / "wall.json"
        spent = json.loads(wall.read_text()) if wall.is_file() else {"calls": []}
        spent["calls"].append(round(time.monotonic() - started, 1))
        spent["wall_s"] = round(sum(spent["calls"]), 1)
        wall.write_text(json.dumps(spent) + "\n")
    if status not in (0, 1, 3):
        raise cli.UsageError(f"{name}: dew exited {status}; {folder / 'dew.log'} says why")
    (folder / "done.json").write_text(json.dumps({"exit": status}) + "\n")


def verdict(name: str, folder: Path) -> tuple[str, str]:
    """(outcome, headline) of a step, from compare.json or ab.md."""
    if name == "reproduce":
        found = json.loads((folder / "compare.json").read_text())
        return found["outcome"], found.get("headline") or found.get("summary", "")
    lines = [line for line in (folder / "ab.md").read_text().splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    outcome = next((o for o in ("NOT REPRODUCED", "REPRODUCED", "INCONCLUSIVE")
                    if last.startswith(o)), "?")  # fmt: skip
    return outcome, last


def slower(folder: Path) -> str:
    """Each case's B / A of ms/step, from the sides' records (ab's medians over the rounds,
    their rows in the same order)."""
    a, b = (json.loads((folder / f"{side}.json").read_text())["rows"] for side in "ab")
    return ", ".join(
        f"{x['architecture']}{' moe' if x.get('moe') else ''} "
        + (f"{y['ms_per_step'] / x['ms_per_step']:.3f}"
           if x.get("ms_per_step") and y.get("ms_per_step") else "?")
        for x, y in zip(a, b, strict=False)
    )  # fmt: skip


def met(name: str, status: int, folder: Path) -> bool:
    if name == "reproduce":
        return status in (0, 1, 3)
    if name == "ab-aa":
        return status == 0
    ratios = [float(part.rsplit(" ", 1)[1]) for part in slower(folder).split(", ")
              if not part.endswith("?")]  # fmt: skip
    return status == 1 and bool(ratios) and all(ratio > 1 for ratio in ratios)


def table(folders: dict[str, Path], out: Path, argv: list[str], code) -> int:
    lines = [f"## Issue 60 on the chip: `{shlex.join(['python3.11', PROG, *argv])}`", "",
             f"dew {code.commit or 'commit unknown'}" + (" with a diff" if code.dirty else ""),
             "", "| step | folder | expected | outcome | exit | met | wall s | B/A | headline |",
             "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    held = 0
    for name, folder in folders.items():
        status = json.loads((folder / "done.json").read_text())["exit"]
        outcome, headline = verdict(name, folder)
        wall = json.loads((folder / "wall.json").read_text())
        ok = met(name, status, folder)
        held += ok
        ratio = slower(folder) if name != "reproduce" else "—"
        calls = "+".join(f"{s:.0f}" for s in wall["calls"])
        cells = [name, f"`{folder}`", EXPECTED[name], outcome, str(status),
                 "met" if ok else "**not met**", f"{wall['wall_s']:.0f} ({calls})", ratio,
                 headline.replace("|", "\\|")]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", f"{held} of {len(folders)} expectations met."]
    text = "\n".join(lines) + "\n"
    print(text, end="", flush=True)
    (out / "replays.md").write_text(text)
    say(f"the table: {out / 'replays.md'}")
    return cli.EXIT_OK if held == len(folders) else cli.EXIT_CHANGED


def say(line: str) -> None:
    print(f"{PROG}: {line}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
