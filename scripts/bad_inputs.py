"""Bad input at every entry point: one line, a non-zero exit, no traceback, no file changed.

    JAX_PLATFORMS=cpu python scripts/bad_inputs.py [--markdown] [--only TEXT]

Runs each entry point as a user would type it (the `dew` command, the tools, `python -m
dew.bench.multihost.launch`), with inputs that must be refused, in a scratch directory
holding a step record, a loader record, a cpu-smoke record, dew's other JSON, a text file,
a binary file, a symbolic link loop, a folder with a file of the user's named like an
exported schema, and a prepared dataset. Prints one row per input: what it is, the command
(scratch paths as `$D/...`), the exit code and the line on stderr (the last of several).
Exit 0 when every input ended as expected (exit 2 in exactly one line naming the command
typed, without a traceback, unless the row expects otherwise) and every file in the
scratch directory is byte-identical afterwards. A record another run is writing is one
such input: this script holds `held.json` in the scratch directory (its lock, as a running
sweep holds its --json-out; `site` as a site build holds its --out) while the tools are
refused on it. The inputs of issue 52 come first.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bad_input_cases import HELD, HELD_SITE, PREPARE, PUBLISHED, REPO, RESULTS, inputs

from dew.bench.common import cli
from dew.bench.common.files import one_writer


def scratch() -> Path:
    d = Path(tempfile.mkdtemp(prefix="dew-bad-inputs-"))
    shutil.copy(PUBLISHED / "2026-09-02-rtx4080-6b0f119-small.json", d / "step.json")
    shutil.copy(PUBLISHED / "2026-09-02-rtx4080-6b0f119-small.json", d / "copy.json")
    shutil.copy(PUBLISHED / "oxford-flowers-loader.json", d / "loader.json")
    smoke = RESULTS / "runs" / "20261203T072630Z-cpu-smoke-two-cpu-d90a3f0" / "step.json"
    shutil.copy(smoke, d / "smoke.json")
    shutil.copy(RESULTS / "noise.json", d / "noise.json")
    plan = RESULTS / "runs" / "20261204T174405Z-ab-cpu-smoke-cpu-cbb6b2f" / "ab-plan.json"
    shutil.copy(plan, d / "ab-plan.json")
    (d / "notes.txt").write_text("a text file\n")
    (d / "x.bin").write_bytes(bytes(range(256)))
    (d / "list.json").write_text("[1]\n")
    (d / "kind.json").write_text('{"kind": "step"}\n')
    (d / "loop").symlink_to(d / "loop")
    (d / "mine").mkdir()
    (d / "mine" / "environment.schema.json").write_text("the user's own notes\n")
    (d / "empty").mkdir()
    subprocess.run([*PREPARE, "--synthetic", "8", "--out", str(d / "dataset")], check=True,
                   capture_output=True)  # fmt: skip
    return d


def snapshot(d: Path) -> dict[str, str]:
    return {
        str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(d.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def shown(argv: list[str], d: Path) -> str:
    """The command as a user types it: `dew ...`, `tools/...`, scratch paths as $D/...;
    a long list of files (validate $(find ...)) as its first and a count."""
    words = [str(word) for word in argv]
    if words[:3] == [sys.executable, "-m", "dew.commands"]:
        words = ["dew", *words[3:]]
    elif words[:2] == [sys.executable, "-m"]:
        words = ["python", *words[1:]]
    elif words and words[0] == sys.executable:
        words = ["python", *words[1:]]
    words = [word.replace(str(REPO) + "/", "") for word in words]  # as typed in a checkout
    words = [word if len(word) < 80 else word[:30] + "…" + word[-12:] for word in words]
    if len(words) > 12:
        words = [*words[:4], f"… ({len(words) - 4} more)"]
    return shlex.join(words).replace(str(d), "$D")


@dataclasses.dataclass(frozen=True)
class Args:
    """Bad input at every entry point: one line, a non-zero exit, no traceback."""

    markdown: bool = False
    """print the table as Markdown"""
    only: str | None = None
    """run only the inputs whose description contains this text"""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    prog = "scripts/bad_inputs.py"
    return cli.run(prog, lambda: check(cli.parse(Args, argv, prog=prog)))


def check(args: Args) -> int:
    # Before the scratch directory is made: its dataset costs a prepare_dataset run.
    if args.only is not None and not any(args.only in i.what for i in inputs(Path("D"))):
        raise cli.UsageError(f"--only {args.only!r} is in no input's description (the inputs "
                             "and their descriptions: scripts/bad_input_cases.py)")  # fmt: skip
    d = scratch()
    # Released once the files are compared.
    with one_writer(d / HELD, flag="--json-out"), one_writer(d / HELD_SITE, flag="--out"):
        return check_in(d, args)


def check_in(d: Path, args: Args) -> int:
    before = snapshot(d)
    env = dict(os.environ, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu"))
    env.pop("DEW_TYPED_COMMAND", None)
    chosen = [i for i in inputs(d) if args.only is None or args.only in i.what]
    bad = 0
    if args.markdown:
        print("| input | command | exit | stderr |\n|---|---|---|---|")
    for item in chosen:
        done = subprocess.run(item.argv, capture_output=True, text=True, env=env, cwd=d)
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        lines = [line for line in lines if "simulated CPU devices" not in line]
        ok = done.returncode == item.exit and "Traceback" not in done.stderr
        ok = ok and (item.lines is None or len(lines) == item.lines)
        bad += not ok
        said = " / ".join(lines) if len(lines) < 4 else f"{len(lines)} lines: {lines[-1]}"
        said = said.replace(str(d), "$D").replace(str(REPO) + "/", "")
        if item.exit == 0 and not lines:
            out = done.stdout.strip().splitlines()
            said = f"(stdout, {len(out)} lines: {out[-1] if out else ''})"
        command = shown(item.argv, d)
        if args.markdown:
            cells = [item.what, f"`{command}`", str(done.returncode), f"`{said}`"]
            print("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
        else:
            print(f"{'ok ' if ok else 'BAD'} {done.returncode} {item.what}: {command}\n    {said}")
    after = snapshot(d)
    changed = [name for name, digest in after.items() if before.get(name) != digest]
    changed += [name for name in before if name not in after]
    print(f"\n{len(chosen)} inputs, {bad} not ended as expected; files changed: {changed}")
    shutil.rmtree(d)
    return 0 if bad == 0 and not changed else 1


if __name__ == "__main__":
    sys.exit(main())
