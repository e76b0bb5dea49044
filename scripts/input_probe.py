"""Issue 63's probe: inputs nobody had tried at every entry point, each run as a user types
it, against this checkout or another tree of dew (`--src`: its src/ and tools/, e.g. an
export of ec83e06, for the "before" column).

    JAX_PLATFORMS=cpu python scripts/input_probe.py [--src TREE] [--only TEXT] [--markdown]

An input is ok when it ends with the exit it should, without a traceback, in the lines on
stderr it should (one for a refusal) and saying what it should (`said`). The inputs
(input_probe_cases.py) are paths of the wrong kind or colliding, records that are empty,
cut, edited or partial, numbers past any bound or not numbers, unicode, other folders,
a Python without dew, a damaged bundle and stop signals. Exit 0 when every input is ok or
known (`known`: not fixed, and why); 1 otherwise. With --markdown the table has a row per
input: what, command, exit, the last line, ok.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bad_inputs import scratch
from input_probe_cases import Input, inputs
from input_probe_files import REPO, fill, setup

from dew.bench.common import cli

LIMIT_S = 120  # an input that has not ended by then is killed and counted bad


@dataclasses.dataclass(frozen=True)
class Args:
    """Issue 63's probe: inputs nobody had tried, at every entry point."""

    src: str | None = None
    """a tree of dew (its src/ and tools/) to run instead of this checkout's"""
    only: str | None = None
    """run only the inputs whose description contains this text"""
    markdown: bool = False
    """print the table as Markdown"""
    skip: int = 0
    """leave out the first N inputs (to go on after a run that was cut off)"""


@dataclasses.dataclass(frozen=True)
class Outcome:
    code: int
    last: str
    ok: bool


def run_one(item: Input, d: Path, root: Path, env: dict) -> Outcome:
    argv = [fill(word, sys.executable, root, d) for word in item.argv]
    cwd = Path(fill(item.cwd, sys.executable, root, d)) if item.cwd else d
    env = {**env, **item.env}
    if item.stop is None:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd,
                                  timeout=LIMIT_S)  # fmt: skip
        except subprocess.TimeoutExpired:  # killed: no end, no line of its own
            return Outcome(-9, f"no end after {LIMIT_S} s: killed", False)
        code, out, err = done.returncode, done.stdout, done.stderr
    else:  # a stop signal once the command has said `after` on stderr
        signum, after = item.stop
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, env=env, cwd=cwd)  # fmt: skip
        try:
            err, deadline = "", time.monotonic() + 120
            while after not in err and time.monotonic() < deadline and process.poll() is None:
                err += process.stderr.readline()
            process.send_signal(signum)
            out, rest = process.communicate(timeout=60)
            err += rest
        finally:
            process.kill()
        code = process.returncode
    lines = [line for line in err.splitlines() if line.strip()]
    lines = [line for line in lines if "simulated CPU devices" not in line]
    errors = [line for line in lines if ": error: " in line or "Error" in line]
    ok = code in item.exits and "Traceback" not in err
    if item.lines is not None:
        ok = ok and len(errors if item.exits != (0,) else lines) <= item.lines
    if item.said:
        ok = ok and item.said in (out + err).replace(str(d), "$D")
    if item.unsaid:
        ok = ok and item.unsaid not in out + err
    last = (errors or lines or [f"(stdout) {(out.strip().splitlines() or [''])[-1]}"])[-1]
    return Outcome(code, last.replace(str(d), "$D").replace(str(root) + "/", "")[:220], ok)


def typed(argv: list[str]) -> str:
    """The command as a user types it in a checkout: `dew ...`, `python tools/...`, the
    scratch directory as $D."""
    words = [w.replace("{d}", "$D").replace("{root}/", "") for w in argv]
    if words[:3] == ["{py}", "-m", "dew.commands"]:
        words = ["dew", *words[3:]]
    words = ["python" if w == "{py}" else w for w in words]
    return shlex.join(words)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    prog = "scripts/input_probe.py"
    return cli.run(prog, lambda: probe(cli.parse(Args, argv, prog=prog)))


def probe(args: Args) -> int:
    root = Path(args.src).resolve() if args.src else REPO
    env = dict(os.environ, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu"))
    env.pop("DEW_TYPED_COMMAND", None)
    if args.src:  # the other tree's dew before this checkout's editable install
        env["PYTHONPATH"] = str(root / "src")
    d = scratch()
    setup(d, root)
    chosen = [i for i in inputs()[args.skip :] if args.only is None or args.only in i.what]
    bad = known = 0
    if args.markdown:
        print("| # | input | command | exit | last line | ok |\n|---|---|---|---|---|---|")
    for number, item in enumerate(chosen, args.skip + 1):
        outcome = run_one(item, d, root, env)
        bad += not outcome.ok and not item.known
        known += not outcome.ok and bool(item.known)
        mark = "ok" if outcome.ok else ("known: " + item.known if item.known else "BAD")
        command = typed(item.argv)
        if args.markdown:
            cells = [str(number), item.what, f"`{command}`", str(outcome.code),
                     f"`{outcome.last}`", mark]  # fmt: skip
            print("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
        else:
            print(f"{mark[:3]:3} {outcome.code:>3} {item.what}: {command}\n    {outcome.last}")
    print(f"\n{len(chosen)} inputs: {len(chosen) - bad - known} ok, {known} known, {bad} bad")
    shutil.rmtree(d, ignore_errors=True)
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
