"""`nox -s ab`: two stacks, each a commit, a record or an image, timed side by side on this
host in paired, interleaved rounds; the records and the plan dew.bench.analysis.ab pairs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dew import platforms
from dew.bench.common.arguments import OneLineParser, check_xla_flags
from dew.bench.common.errors import UsageError, check_count
from dew.bench.record.stack import TPU_HOST
from dew.host.engine import ROOT, VARIANTS, image_exists
from dew.host.image import image_from_ref
from dew.host.outside_sources import site_env, site_mounts
from dew.host.runner import run_argv, to_image_path
from dew.host.stack_images import StackSpec, Unreproducible, git, resolve_commit, spec_from_record

TOOL = "tools/benchmark_step.py"
DEFAULT_ROUNDS = 7  # the fewest whose signed-rank test can reach p < 0.05 over two cases
MIN_ROUNDS = 2  # dew.bench.analysis.ab: a verdict needs two paired rounds or more


@dataclass
class AbArgs:
    a: str
    b: str
    rounds: int = DEFAULT_ROUNDS
    preset: str | None = None
    architectures: list[str] = field(default_factory=list)
    cases: list[dict] = field(default_factory=list)
    step_factories: list[str] = field(default_factory=list)  # --step, one unit each
    steps: int | None = None
    warmup: int | None = None
    variant: str = "cpu"
    env: dict = field(default_factory=lambda: {"A": {}, "B": {}})
    xla_flags: dict = field(default_factory=lambda: {"A": "", "B": ""})
    dtype: dict = field(default_factory=lambda: {"A": None, "B": None})
    outside: dict = field(default_factory=lambda: {"A": [], "B": []})  # outside_sources.py
    band: float = 5.0
    alpha: float = 0.05
    out: str | None = None  # the run's folder; one with an ab-plan.json is continued
    cache: str | None = None  # --compilation-cache-dir of every run (tpu-host: the kept programs)


def ab_parser(prog: str, description: str = "") -> OneLineParser:
    """`ab A B [flags]`: the flags of AbArgs."""
    parser = OneLineParser(prog=prog, description=description)
    add = parser.add_argument
    add("stacks", nargs="*", metavar="STACK", help="A, then B: each a commit, a record (its "
        "stack) or an image")  # fmt: skip
    add("--rounds", type=int, default=DEFAULT_ROUNDS, help=f"paired rounds, {MIN_ROUNDS} or "
        f"more (a verdict needs {MIN_ROUNDS}); default {DEFAULT_ROUNDS}, the fewest whose "
        "signed-rank test can reach p < 0.05 over two cases")  # fmt: skip
    add("--preset", help="the cases' preset (default: cpu-smoke on cpu, small on a GPU)")
    add("--architectures", nargs="+", default=[], metavar="NAME", help="one case each")
    add("--cases", type=_cases, default=[], metavar="JSON", help="a JSON list of case fields")
    add("--step", action="append", default=[], dest="step_factories", metavar="MODULE:FACTORY",
        help="a step of your own (docs/own-models.md), one case each")  # fmt: skip
    add("--steps", type=int, help="timed steps per case (default: the preset's)")
    add("--warmup", type=int, help="warmup steps per case (default: the preset's)")
    add("--variant", choices=(*VARIANTS, TPU_HOST), default="cpu", help="the images' stack; "
        f"{TPU_HOST}: no image, this TPU host's own Python and JAX, each side this dew or a "
        "bundle installed for another commit (docs/reproducing.md)")  # fmt: skip
    add("--out", metavar="DIR", help="the run's folder (default: a new one under results/runs); "
        "one that holds this plan's ab-plan.json is continued, its finished runs kept")  # fmt: skip
    add("--compilation-cache-dir", dest="cache", metavar="DIR", help="every run's (the step "
        f"tool's flag); {TPU_HOST}: where round 1 keeps each side's compiled programs for the "
        "later rounds to load (default: /tmp/dew-cache)")  # fmt: skip
    add("--outside", action="append", default=[], metavar="SRC", help="code from outside dew "
        "on both sides: PATH[@REV], a folder or a wheel")  # fmt: skip
    for side in ("a", "b"):
        add(f"--{side}-outside", action="append", default=[], metavar="SRC",
            help=f"code from outside dew on side {side.upper()} only")  # fmt: skip
        add(f"--{side}-env", action="append", default=[], type=_key_value, metavar="KEY=VALUE",
            help=f"an environment variable of side {side.upper()}'s cases")  # fmt: skip
        add(f"--{side}-xla-flags", default="", metavar="FLAGS",
            help=f"XLA flags added to side {side.upper()}'s")  # fmt: skip
        add(f"--{side}-dtype", metavar="DTYPE", help=f"side {side.upper()}'s --dtype (the step "
            "tool's: bfloat16, float32)")  # fmt: skip
    add("--band", type=float, default=5.0, metavar="PCT", help="the change called none, in %%")
    add("--alpha", type=float, default=0.05, help="the test's level")
    return parser


def _cases(value: str) -> list[dict]:
    try:
        cases = json.loads(value)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"not valid JSON: {error}") from None
    if not isinstance(cases, list) or not all(isinstance(c, dict) for c in cases):
        raise argparse.ArgumentTypeError("must be a JSON list of objects of case fields")
    return cases


def _key_value(value: str) -> tuple[str, str]:
    key, sep, setting = value.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{value!r} is not KEY=VALUE")
    return key, setting


def parse_ab(argv: Sequence[str]) -> AbArgs:
    """`nox -s ab -- A B [flags]` (ab_parser); bad input raises UsageError, one line."""
    parsed = ab_parser("ab").parse(argv)
    if len(parsed.stacks) != 2:
        raise UsageError(f"ab takes two stacks A and B, got {len(parsed.stacks)}")
    sides = {"A": "a", "B": "b"}
    args = AbArgs(
        *parsed.stacks,
        rounds=parsed.rounds, preset=parsed.preset, architectures=parsed.architectures,
        cases=parsed.cases, step_factories=parsed.step_factories, steps=parsed.steps,
        warmup=parsed.warmup, variant=parsed.variant, band=parsed.band, alpha=parsed.alpha,
        env={name: dict(getattr(parsed, f"{s}_env")) for name, s in sides.items()},
        xla_flags={name: getattr(parsed, f"{s}_xla_flags") for name, s in sides.items()},
        dtype={name: getattr(parsed, f"{s}_dtype") for name, s in sides.items()},
        out=parsed.out, cache=parsed.cache,
        outside={name: [*parsed.outside, *getattr(parsed, f"{s}_outside")]
                 for name, s in sides.items()},
    )  # fmt: skip
    for name in ("A", "B"):
        check_xla_flags(f"--{name.lower()}-xla-flags", args.xla_flags[name])
    check_count("rounds", args.rounds, MIN_ROUNDS)
    if args.steps is not None:  # 0 is refused, not read as "the preset's"
        check_count("steps", args.steps, 1)
    if args.warmup is not None:
        check_count("warmup", args.warmup, 0)
    if not args.architectures and not args.cases and not args.step_factories:
        raise UsageError(
            "ab needs --architectures, --cases or --step: each case runs in its own process"
        )
    if args.architectures and args.cases:
        raise UsageError("--architectures and --cases exclude each other")
    if not 0 < args.band < 100:  # a NaN fails these too
        raise UsageError(f"--band {args.band:g} is not a percentage in (0, 100)")
    if not 0 < args.alpha < 0.5:
        raise UsageError(
            f"--alpha {args.alpha:g} is not a significance level in (0, 0.5): the "
            "equivalence test holds the 1 - 2 alpha interval inside the band"
        )
    on_host = platforms.of_variant(args.variant).host_cores
    args.preset = args.preset or ("cpu-smoke" if on_host else "small")
    return args


@dataclass
class Side:
    name: str  # "A" or "B"
    given: str
    kind: str  # commit | record | image
    spec: StackSpec | None = None  # commit and record sides
    image: object = None  # engine.Image once materialised
    environment: dict | None = None  # a record side's: the outside code it used
    packages: list = field(default_factory=list)  # outside.Package: code from outside dew
    site: Path | None = None  # where the image's pip installed them

    def describe(self) -> dict:
        image = self.image
        return {
            "given": self.given, "kind": self.kind,
            "commit": getattr(image, "commit", None) or (self.spec and self.spec.commit),
            "image": getattr(image, "ref", None), "image_id": getattr(image, "id", None),
            "outside": [package.describe() for package in self.packages],
        }  # fmt: skip


def resolve_side(engine, name: str, given: str, variant: str) -> Side:
    """A record file, a commit of this clone, or an image here (in that order)."""
    path = Path(given)
    if given.endswith(".json") or path.is_file():
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            raise Unreproducible(f"{name} {given}: not a readable JSON record ({error})") from None
        if not isinstance(record, dict):
            raise Unreproducible(f"{name} {given}: not a results record")
        spec = spec_from_record(record, f"{name} record {given}")
        return Side(name, given, "record", spec, environment=record.get("environment") or {})
    known = git("rev-parse", "--verify", "--quiet", f"{given}^{{commit}}").returncode == 0
    if known:
        commit = resolve_commit(given, f"{name} {given}")
        return Side(name, given, "commit", StackSpec(commit, variant, f"{name} commit {given}"))
    if engine is not None and image_exists(engine, given):
        return Side(name, given, "image", image=image_from_ref(engine, given))
    raise Unreproducible(
        f"{name} {given!r} is neither a record file, a commit of this clone nor an image here"
    )


def check_side(name: str, given: str, variant: str) -> None:
    """A side's stack checked with no engine, before any is chosen: a record file or a
    commit resolves as resolve_side resolves it (a missing commit, a dirty or TPU record
    refused); a name that looks like a commit (hex, 7 to 40 digits) and is none is refused;
    anything else is left to the engine to find as an image."""
    path = Path(given)
    looks_like_commit = re.fullmatch(r"[0-9a-fA-F]{7,40}", given) is not None
    known = git("rev-parse", "--verify", "--quiet", f"{given}^{{commit}}").returncode == 0
    if given.endswith(".json") or path.is_file() or known:
        resolve_side(None, name, given, variant)
    elif looks_like_commit:
        raise Unreproducible(f"{name} {given} is not a commit of this clone (git fetch the "
                             "history that has it), nor a record file")  # fmt: skip


def units(args: AbArgs) -> list[dict]:
    """One process each: an architecture (the preset's cases of it), one case or one step.
    On a TPU host one process holds every case, as each of the step tool's rounds there
    does (dew.bench.sweep.chip: one holder opens the chip, ~10 s, and times them in turn)."""
    if args.variant == TPU_HOST and (args.architectures or args.cases):
        cases = ["--cases", json.dumps(args.cases)] if args.cases else []
        names = ["--architectures", *args.architectures] if args.architectures else []
        label = " ".join(args.architectures) or f"{len(args.cases)} cases"
        return [{"label": label, "args": cases or names}] + [
            {"label": spec, "args": ["--step", spec]} for spec in args.step_factories
        ]
    steps = [{"label": spec, "args": ["--step", spec]} for spec in args.step_factories]
    if args.cases:
        return [
            {"label": case.get("architecture") or case.get("step") or "?",
             "args": ["--cases", json.dumps([case])]}
            for case in args.cases
        ] + steps  # fmt: skip
    named = [{"label": name, "args": ["--architectures", name]} for name in args.architectures]
    return named + steps


def tool_flags(args: AbArgs) -> list[str]:
    """The step tool's flags every unit shares."""
    tool = ["--preset", args.preset, "--idle-check", "off", "--format", "md"]
    tool += ["--steps", str(args.steps)] if args.steps is not None else []
    tool += ["--compilation-cache-dir", args.cache] if args.cache else []
    return tool + (["--warmup", str(args.warmup)] if args.warmup is not None else [])


def side_flags(args: AbArgs, name: str) -> list[str]:
    """The step tool's flags of one side only."""
    return ["--dtype", args.dtype[name]] if args.dtype[name] else []


def check_cases(python: str, args: AbArgs) -> None:
    """Every unit's cases checked by this checkout's step tool (--check-only: the names, the
    preset, each model's config; each side's XLA flags, which JAX must start with) in
    `python`, a venv with dew, before any image is built;
    UsageError with the tool's line. Skipped with code from outside dew: its architectures
    and steps are known only once it is installed beside a side's stack."""
    if any(args.outside.values()):
        return
    names = [arg for unit in units(args) if unit["args"][0] == "--architectures"
             for arg in unit["args"][1:]]  # fmt: skip
    checks = [["--architectures", *names]] if names else []
    checks += [["--cases", json.dumps(args.cases)]] if args.cases else []
    checks += [["--step", spec] for spec in args.step_factories]
    # a side's XLA flags, checked by JAX starting with them (garbage ends its start)
    runs = [(unit_args, "", "") for unit_args in checks] + [
        ([*checks[0], *side_flags(args, name)], f"--{name.lower()}-xla-flags: ",
         args.xla_flags[name])
        for name in ("A", "B") if args.xla_flags[name] and checks]  # fmt: skip
    runs += [([*checks[0], *side_flags(args, name)], f"--{name.lower()}-dtype: ", "")
             for name in ("A", "B") if args.dtype[name] and checks]  # fmt: skip
    for unit_args, which, flags in runs:
        argv = [python, str(ROOT / TOOL), *tool_flags(args), *unit_args, "--check-only"]
        env = {**os.environ, "JAX_PLATFORMS": "cpu"}  # names and configs only: no device
        if flags:
            env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {flags}".strip()
        done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env=env)
        if done.returncode != 0:
            lines = done.stderr.strip().splitlines() or [f"exit {done.returncode}"]
            raise UsageError(which + lines[-1].removeprefix(f"{TOOL}: error: "))


def order(round_index: int, unit_index: int) -> tuple[str, str]:
    """Which side goes first: alternating by round, and by case within a round."""
    return ("A", "B") if (round_index + unit_index) % 2 == 0 else ("B", "A")


def run_rounds(
    engine, sides: dict, args: AbArgs, run_dir: Path, env: dict, log=print, on_host=None
) -> None:
    """Every round runs every case once per side, each in a fresh process, the order
    alternating; each run's record goes to run_dir/rounds/<side>-r<round>-c<case>.json
    (what dew.bench.analysis.ab pairs), its output to the matching .log. `on_host(side,
    tool_args, env)`: where there is no engine (a TPU host), the (argv, environment) of the
    step tool run by that side's dew here. A run_dir whose ab-plan.json is this plan's is
    continued: the runs it lists are kept, the rest run (a run that was cut off again)."""
    rounds_dir = run_dir / "rounds"
    rounds_dir.mkdir(parents=True, exist_ok=True)
    plan = units(args)
    tool = tool_flags(args)
    manifest = {
        "sides": {name: side.describe() for name, side in sides.items()},
        "rounds": args.rounds, "units": [unit["label"] for unit in plan],
        "env": {name: side_env(env, args, name, side) for name, side in sides.items()},
        "tool": tool, "side_tool": {name: side_flags(args, name) for name in sides},
        "band": args.band, "alpha": args.alpha, "order": [],
    }  # fmt: skip
    done = continued(run_dir, manifest)
    gpu = platforms.of_variant(args.variant).nvml
    for r in range(args.rounds):
        for u, unit in enumerate(plan):
            for name in order(r, u):
                stem = f"{name}-r{r + 1:02d}-c{u + 1:02d}"
                out = rounds_dir / f"{stem}.json"
                if stem in done:
                    manifest["order"].append(done[stem])
                    continue
                out.unlink(missing_ok=True)  # a run cut off before its end: run again
                tool_args = [*tool, *side_flags(args, name), *unit["args"]]
                process_env = side_env(env, args, name, sides[name])
                if on_host is None:
                    command = ["python", TOOL, *tool_args, "--json-out", to_image_path(out)]
                    argv = run_argv(engine, sides[name].image, command, env=process_env,
                                    gpu=gpu, mounts=site_mounts(sides[name].site))  # fmt: skip
                    process_env = None
                else:
                    argv, process_env = on_host(sides[name], [*tool_args, "--json-out", str(out)],
                                                process_env)  # fmt: skip
                started = time.monotonic()
                with open(rounds_dir / f"{stem}.log", "w") as output:
                    code = run_passing_stops(argv, output, process_env)
                manifest["order"].append({"round": r + 1, "unit": u + 1, "side": name,
                                          "record": out.name, "exit": code})  # fmt: skip
                log(f"round {r + 1}/{args.rounds} {unit['label']} {name} ({sides[name].given}): "
                    f"{figure_of(out) or 'no record, exit ' + str(code)} "
                    f"[{time.monotonic() - started:.0f} s]")  # fmt: skip
                (run_dir / "ab-plan.json").write_text(json.dumps(manifest, indent=2) + "\n")


def continued(run_dir: Path, manifest: dict) -> dict[str, dict]:
    """The runs an earlier, cut-off A/B in run_dir finished (stem -> its order entry), where
    its ab-plan.json is the same plan (sides, rounds, cases, flags); none where there is no
    plan; UsageError where the plan is another's."""
    path = run_dir / "ab-plan.json"
    if not path.is_file():
        return {}
    try:
        earlier = json.loads(path.read_text())
    except ValueError as error:
        raise UsageError(f"--out {run_dir}: its ab-plan.json is not JSON ({error})") from None
    same = ("rounds", "units", "tool", "side_tool", "env")
    differs = [key for key in same if earlier.get(key) != manifest[key]]
    givens = [{n: s.get("given") for n, s in (plan.get("sides") or {}).items()}
              for plan in (earlier, manifest)]  # fmt: skip
    differs += ["sides"] if givens[0] != givens[1] else []
    if differs:
        raise UsageError(
            f"--out {run_dir} holds another A/B (its {', '.join(differs)} differ): "
            "give a new folder, or its own arguments to continue it"
        )
    return {Path(entry["record"]).stem: entry for entry in earlier.get("order") or []
            if entry.get("exit") in (0, 1)  # the tool ran its rounds (1: a case failed)
            and (run_dir / "rounds" / entry["record"]).is_file()}  # fmt: skip


def run_passing_stops(argv: list[str], output, env: dict | None, errors=subprocess.STDOUT) -> int:
    """The run's exit status (its stdout to `output`, its stderr to `errors`: with it by
    default); a stop that ends this process (an exception raised by a signal handler,
    Ctrl-C) is passed to the run first and waited for, so the step tool keeps its whole rows
    and lets go of the device before this process ends."""
    child = subprocess.Popen(argv, stdout=output, stderr=errors, env=env)
    try:
        return child.wait()
    except BaseException as stop:
        child.send_signal(getattr(stop, "signum", signal.SIGINT))
        child.wait()
        raise


def side_env(env: dict, args: AbArgs, name: str, side: Side | None = None) -> dict:
    merged = {**env, **site_env(side.site if side else None), **args.env[name]}
    if args.xla_flags[name]:
        merged["XLA_FLAGS"] = f"{merged.get('XLA_FLAGS', '')} {args.xla_flags[name]}".strip()
    return merged


def figure_of(path: Path) -> str | None:
    try:
        rows = json.loads(path.read_text())["rows"]
    except (OSError, ValueError, KeyError):
        return None
    return ", ".join(
        f"{row['ms_per_step']:.2f} ms/step" if row.get("ms_per_step") else row.get("status", "?")
        for row in rows
    )
