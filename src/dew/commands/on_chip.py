"""`dew reproduce` of a TPU record and `dew ab --variant tpu-host`, on a TPU host: no nox, no
container engine, no network (docs/reproducing.md, "On a TPU host").

A TPU host's stack is its own Python, jax, jaxlib and libtpu with dew's bundle beside them
(docs/tpu-install.md), so nothing is built. What the device probe (a short process that
opens the chip) and this Python read is held against the record's stack; the dew that times
is this one or a bundle installed for another commit (`install.py --target DIR`); every run
is the step tool's own (`dew step`: on a TPU its chip path, dew.bench.sweep.chip, compiles
the programs without holding the chip and times each repeat in a fresh process) in a process
of this host's Python. ab's rounds are dew.host.ab_rounds' (run_rounds), judged by
dew.bench.analysis.ab as everywhere; a reproduction by dew compare.
"""

from __future__ import annotations

import contextlib
import datetime
import io
import json
import os
import platform
import re
import sys
import tempfile
import types
from dataclasses import dataclass
from pathlib import Path

from dew import platforms
from dew.bench.common import cli
from dew.bench.common.errors import Interrupted, faults
from dew.bench.common.files import REPO_ROOT, atomic_write
from dew.bench.record import stack
from dew.bench.record.capture import code_identity, installed_packages
from dew.bench.sweep.preflight import probe_devices
from dew.flags import CACHE_OFF
from dew.host import ab_rounds, replay
from dew.host.bundle_install import INSTALLED
from dew.host.stack_images import on_a_tpu_host, settings_args

# What of a TPU host's stack a rerun holds exact (stack.host_stack's names).
HELD = ("device", "python", "jax", "jaxlib", "libtpu")
ACCEPT = "--accept-stack-difference"
DEFAULT_CACHE = str(Path(tempfile.gettempdir()) / "dew-cache")


@dataclass(frozen=True)
class Dew:
    """The dew that times: this one (folder None), or a bundle's install in `folder`."""

    commit: str | None
    dirty: bool | None
    folder: Path | None = None

    def label(self) -> str:
        said = f"dew {(self.commit or 'of no recorded commit')[:7]}"
        said += " with uncommitted changes" if self.dirty else ""
        return said + (f" (installed in {self.folder})" if self.folder else " (this one)")


def this_dew() -> Dew:
    code = code_identity(REPO_ROOT, os.environ)
    return Dew(code.commit, code.dirty)


def installed_dew(given: str, flag: str) -> Dew:
    """The bundle installed in folder `given` (its dew-bundle.json names the commit its dew's
    wheel was built from); UsageError where it is none."""
    folder = Path(given).resolve()
    manifest = folder / INSTALLED
    if not (folder / "dew" / "__init__.py").is_file() or not manifest.is_file():
        raise cli.UsageError(f"{flag} {given} is no bundle's install (no dew/ and {INSTALLED} "
                             "in it): install the bundle built at that commit with "
                             f"`python3.11 BUNDLE/install.py --target {given}`")  # fmt: skip
    try:
        found = json.loads(manifest.read_text())
    except (OSError, ValueError) as error:
        raise cli.UsageError(f"{flag} {given}: {INSTALLED} is unreadable ({error})") from None
    return Dew(found.get("commit"), found.get("dirty"), folder)


def step_process(dew: Dew, tool_args: list[str], env: dict) -> tuple[list[str], dict]:
    """(argv, environment) of `dew step TOOL_ARGS` run by `dew` with this host's Python: an
    installed bundle's folder replaces every folder on PYTHONPATH that holds a dew (the
    checkout's src/, this bundle's install), after the host's own, and names its commit."""
    env = dict(env)
    if dew.folder is not None:
        path = [entry for entry in env.get("PYTHONPATH", "").split(os.pathsep)
                if entry and not (Path(entry) / "dew" / "__init__.py").is_file()]  # fmt: skip
        env["PYTHONPATH"] = os.pathsep.join([*path, str(dew.folder)])
        env["DEW_COMMIT"], env["DEW_DIRTY"] = dew.commit or "", "1" if dew.dirty else "0"
        env.pop("DEW_DIFF_SHA256", None)
    return [sys.executable, "-m", "dew.commands", "step", *tool_args], env


def host_stack_here() -> dict[str, str | None]:
    """This host's stack as a record made here would name it: the device and libtpu as the
    device probe reads them (a process that opens the chip, ~10 s), this Python, its jax and
    jaxlib; UsageError (one line) where JAX does not start or another process holds the chip."""
    devices = probe_devices(dict(os.environ))
    identity, backend = devices.identity or {}, devices.backend or {}
    packages = installed_packages()
    return {
        "platform": identity.get("platform") or devices.platform,
        "device": identity.get("kind") or devices.kind, "topology": identity.get("topology"),
        "python": platform.python_version(), "jax": packages.get("jax"),
        "jaxlib": packages.get("jaxlib"), "libtpu": backend.get("libtpu"),
    }  # fmt: skip


def differences(record: dict, here: dict, dew: Dew) -> list[str]:
    """What of the record's stack this host and `dew` are not: HELD, then dew's commit."""
    recorded = stack.host_stack(record)
    found = []
    for name in HELD:
        was, now = recorded.get(name), here.get(name)
        same = stack.same_device(was or "", now or "") if name == "device" else was == now
        if not same:
            found.append(f"{name} {now or 'none'} here, {was or 'unrecorded'} in the record")
    code = (record.get("environment") or {}).get("code") or {}
    commit = code.get("commit")
    if not commit or not dew.commit or not (commit.startswith(dew.commit)
                                            or dew.commit.startswith(commit)):  # fmt: skip
        found.append(f"{dew.label()}, the record's dew {(commit or 'unrecorded')[:7]}")
    elif dew.dirty and not code.get("dirty"):
        found.append(f"{dew.label()}, the record's clean")
    return found


def on_its_host(here: dict) -> bool:
    """Whether the device probe found a platform whose records run on its host's own stack
    (dew.platforms: a TPU's is stack.TPU_HOST), which this command replays."""
    return platforms.get(here["platform"]).stack_variant == stack.TPU_HOST


def folder_name(here: dict) -> str:
    """tpu-v5e, as chip_verdicts and the committed records name the device."""
    topology = here.get("topology") or ""
    name = f"tpu-{topology.split(':')[0]}" if topology else str(here.get("device") or "tpu")
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def new_folder(kind: str, here: dict, dew: Dew) -> Path:
    """results/runs/<stamp>-<kind>-<device>-<dew's commit>, under this directory."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    short = (dew.commit or "nocommit")[:7] + ("-dirty" if dew.dirty else "")
    folder = Path("results") / "runs" / f"{stamp}-{kind}-{folder_name(here)}-{short}"
    folder.mkdir(parents=True)
    return folder


# --- dew reproduce ---------------------------------------------------------------------------


def reproduce(argv: list[str]) -> int:
    prog = "dew reproduce"
    return faults(prog, lambda: cli.run(prog, lambda: _reproduce(argv, prog)))


def _reproduce(argv: list[str], prog: str) -> int:
    args = replay.reproduce_parser(prog).parse(argv)
    record_path = Path(args.record[0])
    if args.outside or args.interleaved:
        raise cli.UsageError(
            "--outside and --interleaved rebuild stacks as images; on a TPU host, dew ab "
            "--variant tpu-host times two dews in paired rounds"
        )
    record = json.loads(record_path.read_text())
    here = host_stack_here()
    if not on_its_host(here):
        raise cli.UsageError(on_a_tpu_host(record, f"RECORD {record_path}", "and this host has "
                             f"no TPU (the device probe found {here['device']})"))  # fmt: skip
    dew = installed_dew(args.dew, "--dew") if args.dew else this_dew()
    found = differences(record, here, dew)
    commit = ((record.get("environment") or {}).get("code") or {}).get("commit") or "?"
    if found and not args.accept_stack_difference:
        raise cli.UsageError(
            f"RECORD {record_path} ran on {stack.host_stack_line(record)}; not here: "
            f"{'; '.join(found)}: rerun it where they match (for dew: the bundle built at "
            f"{commit[:7]}, `nox -s bundle -- --out BUNDLE` in a checkout at {commit[:7]}, "
            f"installed by `python3.11 BUNDLE/install.py --target DIR`, then --dew DIR), or "
            f"give {ACCEPT} to rerun it on this stack (the differences go into its note)"
        )
    run_dir = Path(args.out) if args.out else new_folder("reproduce", here, dew)
    run_dir.mkdir(parents=True, exist_ok=True)
    step = run_dir / "step.json"
    settings = record.get("settings") or {}
    cache = (settings.get("options") or {}).get("compilation_cache_dir")
    tool = [*settings_args(settings), "--format", "md", "--json-out", str(step)]
    tool += ["--compilation-cache-dir", cache] if cache and cache != CACHE_OFF else []
    tool += ["--resume"] if step.exists() else []
    say(prog, f"{dew.label()} reruns {record_path} on {here['device']}: dew step "
              f"{' '.join(tool)}")  # fmt: skip
    argv_, env = step_process(dew, tool, dict(os.environ))
    try:
        with open(run_dir / "table.md", "a") as table:
            code = ab_rounds.run_passing_stops(argv_, table, env, errors=None)  # progress: stderr
    except Interrupted as stop:
        stop.message = (f"interrupted: {step} keeps every whole row; the same command with "
                        f"--out {run_dir} continues it")  # fmt: skip
        raise
    if code not in (0, 1):
        raise cli.UsageError(
            f"the rerun stopped (dew step exited {code}, its line above says why): the same "
            f"command with --out {run_dir} continues it"
        )
    if found:
        note(step, f"dew reproduce of {record_path.name} with {ACCEPT}: {'; '.join(found)}")
        atomic_write(run_dir / "not-matched.txt", "".join(f"{line}\n" for line in found))
    reference = run_dir / "reference.json"  # kept beside the rerun it judges
    reference.write_text(record_path.read_text())
    return judged(step, reference, run_dir)


def note(path: Path, line: str) -> None:
    """`line` added to the record's note (what the run itself noted kept before it)."""
    record = json.loads(path.read_text())
    record["note"] = "; ".join(filter(None, [record.get("note"), line]))
    atomic_write(path, json.dumps(record, indent=2) + "\n")


def judged(step: Path, reference: Path, run_dir: Path) -> int:
    """dew compare of the rerun against the record (this dew's, the judge of today): the
    table to compare.md and stdout, the JSON to compare.json; compare's exit status."""
    from dew.commands.compare import main as compare

    for name, extra in (("compare.json", ["--format", "json"]), ("compare.md", [])):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            status = compare([str(step), str(reference), *extra])
        atomic_write(run_dir / name, out.getvalue())
    print(out.getvalue(), end="")
    say("dew reproduce", f"the rerun: {step}; compare.md, compare.json beside it")
    return status


# --- dew ab --variant tpu-host ---------------------------------------------------------------


def ab(argv: list[str]) -> int:
    prog = "dew ab"
    return faults(prog, lambda: cli.run(prog, lambda: _ab(argv, prog)))


def chip_side(name: str, given: str) -> tuple[ab_rounds.Side, Dew]:
    """A side on a TPU host: this dew (HEAD, or its commit) or a bundle's install folder."""
    mine = this_dew()
    if Path(given).is_dir():
        dew = installed_dew(given, name)
    elif given == "HEAD" or (len(given) >= 7 and (mine.commit or "").startswith(given)):
        dew = mine
    else:
        raise cli.UsageError(
            f"{name} {given!r}: on a TPU host a side is this dew (HEAD, or its commit "
            f"{(mine.commit or '?')[:7]}) or the folder of a bundle installed for another "
            "commit (`python3.11 BUNDLE/install.py --target DIR`)"
        )
    side = ab_rounds.Side(name, given, "commit")
    side.image = types.SimpleNamespace(
        commit=dew.commit, ref=f"{stack.TPU_HOST}: {dew.label()}", id=None
    )  # no image: the host's stack
    return side, dew


def _ab(argv: list[str], prog: str) -> int:
    args = ab_rounds.parse_ab(argv)
    chosen = {name: chip_side(name, given) for name, given in (("A", args.a), ("B", args.b))}
    if (ab_rounds.ROOT / ab_rounds.TOOL).is_file():  # a checkout: its tool checks the cases
        ab_rounds.check_cases(sys.executable, args)
    here = host_stack_here()
    if not on_its_host(here):
        raise cli.UsageError(
            f"--variant {stack.TPU_HOST} times on this host's TPU, and the device probe found "
            f"{here['device']}: run it on a TPU host"
        )
    args.cache = args.cache or DEFAULT_CACHE  # round 1 compiles; the later rounds load
    run_dir = Path(args.out) if args.out else new_folder(f"ab-{args.preset}", here, this_dew())
    run_dir.mkdir(parents=True, exist_ok=True)
    sides = {name: side for name, (side, _) in chosen.items()}
    dews = {name: dew for name, (_, dew) in chosen.items()}
    for name, dew in dews.items():
        say(prog, f"{name}: {dew.label()}")

    def on_host(side, tool_args: list[str], env: dict) -> tuple[list[str], dict]:
        return step_process(dews[side.name], tool_args, {**os.environ, **env})

    try:
        ab_rounds.run_rounds(None, sides, args, run_dir, {}, log=lambda line: say(prog, line),
                             on_host=on_host)  # fmt: skip
    except Interrupted as stop:
        stop.message = (f"interrupted: {run_dir} keeps every finished run; the same command "
                        f"with --out {run_dir} continues it")  # fmt: skip
        raise
    from dew.bench.analysis.ab import main as pair

    return pair([str(run_dir), "--overwrite"])


def say(prog: str, line: str) -> None:
    print(f"{prog}: {line}", file=sys.stderr, flush=True)
