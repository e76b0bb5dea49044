"""A stack as an image: the commit, its lock, its Dockerfile and its base (a record names
them, docker/engine.py builds them), and two stacks timed side by side in paired rounds.

Standard library only, like engine.py: the noxfile imports both before any environment
exists. `nox -s reproduce` materialises a record's stack; `nox -s ab` two stacks given as a
commit, a record or an image. Every failure a user can fix is an `Unreproducible` (or an
engine.EngineError) whose message is the one line that says what and why; the sessions
print it as `<session>: error: <message>` and exit 2.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path


def _engine_module():
    """docker/engine.py as the noxfile loaded it (`dew_engine`), so that both see one
    EngineError; loaded the same way when this module comes first (docker/ is no package)."""
    if "dew_engine" not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            "dew_engine", Path(__file__).with_name("engine.py")
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up by name
        spec.loader.exec_module(module)
    return sys.modules["dew_engine"]


containers = _engine_module()
ROOT = containers.ROOT
# The commit that brought docker/Dockerfile and docker/engine.py; a commit without the
# Dockerfile has no image to build (the check is the file's presence, this names it).
FIRST_CONTAINER_COMMIT = "590027b"
TOOL = "tools/benchmark_step.py"


class Unreproducible(containers.EngineError):
    """What of a stack cannot be built here, and why: one line, exit 2."""


# --- naming a stack ----------------------------------------------------------------------------


@dataclass
class StackSpec:
    """What to build: the commit's tree with its lock and Dockerfile, on a base."""

    commit: str  # full hash once resolved
    variant: str
    origin: str  # how the user named it, for messages: "record x.json", "commit HEAD~3"
    container: dict = field(default_factory=dict)  # the record's environment.container
    from_record: bool = False  # a commit alone names no base: the default one is its own


def git(*args: str, root: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)


def resolve_commit(name: str, origin: str, root: Path = ROOT) -> str:
    """The full hash of `name`; a commit unknown to this clone or one from before the
    containers existed cannot be reproduced."""
    found = git("rev-parse", "--verify", "--quiet", f"{name}^{{commit}}", root=root)
    if found.returncode != 0 or not found.stdout.strip():
        raise Unreproducible(
            f"{origin}: commit {name} is not known to this clone; fetch the history that has "
            "it (git fetch) and try again"
        )
    commit = found.stdout.strip()
    if git("cat-file", "-e", f"{commit}:docker/Dockerfile", root=root).returncode != 0:
        raise Unreproducible(
            f"{origin}: commit {commit[:7]} is from before the containers existed (docker/"
            f"Dockerfile came with {FIRST_CONTAINER_COMMIT}): it has no image to build"
        )
    return commit


def record_variant(record: dict) -> str:
    environment = record.get("environment") or {}
    container = environment.get("container") or {}
    on_gpu = ((environment.get("devices") or {}).get("platform") or "") in ("gpu", "cuda")
    return container.get("variant") or ("cuda13" if on_gpu else "cpu")


def spec_from_record(record: dict, origin: str, root: Path = ROOT) -> StackSpec:
    """The record's stack; a record without a commit (the published ones), a dirty one or
    one whose commit cannot be built here raises Unreproducible."""
    environment = record.get("environment") or {}
    code = environment.get("code") or {}
    commit = (code.get("commit") or "").strip()
    if not commit:
        raise Unreproducible(f"{origin} names no commit: its stack cannot be rebuilt")
    if code.get("dirty"):
        diff = code.get("diff_sha256")
        held = f" (diff sha256 {diff[:12]})" if diff else ""
        raise Unreproducible(
            f"{origin} ran on a dirty tree at {commit[:7]}{held}: the uncommitted change is "
            "not in the record, so its code cannot be rebuilt"
        )
    if code.get("source") == "stated" and not environment.get("container"):
        raise Unreproducible(
            f"{origin} is a published record: it states commit {commit[:7]} but no lock, "
            "Dockerfile or base, so its stack cannot be rebuilt"
        )
    full = resolve_commit(commit, origin, root)
    container = dict(environment.get("container") or {})
    return StackSpec(full, record_variant(record), origin, container, from_record=True)


def stack_parts(record: dict, root: Path = ROOT) -> tuple[list[str], list[str]]:
    """Which parts of the record's stack this clone can match, and which not (one line
    each): what `nox -s reproduce` says before it runs or refuses."""
    environment = record.get("environment") or {}
    code = environment.get("code") or {}
    container = environment.get("container") or {}
    settings = record.get("settings") or {}
    matched, unmatched = [], []
    commit = code.get("commit")
    if not commit:
        unmatched.append("commit: not recorded")
    elif git("rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}", root=root).returncode:
        unmatched.append(f"commit {commit}: not in this clone")
    else:
        matched.append(f"commit {commit}: in this clone")
    if code.get("dirty"):
        unmatched.append("code: the tree was dirty; the change is not in the record")
    elif code.get("dirty") is None:
        unmatched.append("code: whether the tree was dirty is not recorded")
    if not container:
        unmatched.append("container: none recorded (no image, lock hash, Dockerfile or base)")
    for name in ("lock_sha256", "dockerfile_sha256", "base_image_digest"):
        if container and not container.get(name):
            unmatched.append(f"container {name}: not recorded")
    if container.get("base_rebuild"):
        matched.append(f"base: {container['base_rebuild']}")
    packages = environment.get("packages") or {}
    if packages:
        pins = ", ".join(f"{k} {v}" for k, v in sorted(packages.items()) if v)
        matched.append(f"packages (as recorded, checkable against a lock): {pins}")
    steps = [
        f"{k}={settings[k]}" for k in ("preset", "steps", "warmup", "dtype") if settings.get(k)
    ]
    rows = len(record.get("rows") or [])
    if steps:
        matched.append(f"settings: {', '.join(steps)}, {rows} rows")
    devices = environment.get("devices") or {}
    if devices.get("kind"):
        matched.append(f"device: {devices['kind']} x{devices.get('count') or '?'} (your host's)")
    return matched, unmatched


# --- building it -------------------------------------------------------------------------------


@contextlib.contextmanager
def worktree(commit: str, root: Path = ROOT) -> Iterator[Path]:
    """A detached git worktree at `commit`, removed (and pruned) whatever happens."""
    parent = Path(tempfile.mkdtemp(prefix="dew-stack-"))
    tree = parent / commit[:12]
    added = git("worktree", "add", "--detach", "--quiet", str(tree), commit, root=root)
    try:
        if added.returncode != 0:
            raise Unreproducible(f"git worktree add at {commit[:7]}: {added.stderr.strip()}")
        yield tree
    finally:
        git("worktree", "remove", "--force", str(tree), root=root)
        git("worktree", "prune", root=root)
        shutil.rmtree(parent, ignore_errors=True)


def choose_base(engine, spec: StackSpec, default_base, log=print) -> tuple[str, list[str]]:
    """The base to build on and what of the record's base it does not match (lines).

    The record's base when an image of its digest is here; pulled again when the record
    says it can be; else the offline base, held against the record's package list; else
    `default_base()` (the noxfile's choice) with a line saying the record names none."""
    recorded = spec.container
    digest = recorded.get("base_image_digest")
    if digest:
        here = find_image(engine, digest, recorded.get("base_image"))
        if here:
            return here, []
        rebuild = recorded.get("base_rebuild") or ""
        if rebuild.startswith("pull ") and containers.pull(engine, rebuild.split()[1]):
            return rebuild.split()[1], []
    packages = recorded.get("base_packages")
    if packages and (recorded.get("base_rebuild") or "").startswith("debootstrap"):
        ref = containers.build_offline_base(engine, log=log)
        info = containers.base_record(engine, ref)
        differ = containers.package_differences(packages, info.get("base_packages"))
        if not differ:
            return ref, [f"base: {ref} is another image with the record's {len(packages)} packages"]
        shown = "; ".join(differ[:5]) + (f"; {len(differ) - 5} more" if len(differ) > 5 else "")
        return ref, [f"base packages: {len(differ)} differ from the record ({shown})"]
    ref = default_base()
    if not spec.from_record:
        return ref, []
    if digest:
        why = recorded.get("base_rebuild") or "the record does not say how to rebuild it"
        return ref, [f"base: the record's {digest} is not here ({why}); built on {ref}"]
    return ref, [f"base: the record names none; built on {ref}"]


def find_image(engine, digest: str, name: str | None = None) -> str | None:
    """A local image whose digest (or id) is `digest`, by its tag where it has one."""
    if not containers.image_exists(engine, digest):
        return None
    for candidate in ([name] if name else []) + containers.image_tags(engine, digest):
        if containers.base_digest(engine, candidate) == digest:
            return candidate
    return digest


def materialise(engine, spec: StackSpec, base: str, built: list[str], log=print):
    """The image of the spec's stack: a worktree at its commit, its lock and Dockerfile, on
    `base`. The worktree is gone when this returns; a newly built image is added to
    `built` (the caller removes those when the run fails)."""
    with worktree(spec.commit) as tree:
        if not (tree / "locks" / f"{spec.variant}.txt").exists():
            raise Unreproducible(
                f"{spec.origin}: commit {spec.commit[:7]} has no {spec.variant} lock"
            )
        image = containers.build_image(engine, spec.variant, base, log=log, tree=tree,
                                       commit=spec.commit)  # fmt: skip
    if image.built:
        built.append(image.ref)
    return image


def remove_built(engine, built: Sequence[str]) -> None:
    for ref in built:
        containers.remove_image(engine, ref)


# --- the step tool with a record's settings ------------------------------------------------------


def settings_args(settings: dict) -> list[str]:
    """The step tool's flags for a record's settings, only those that are set (an old
    tool knows no flag of a setting it never had)."""
    args = []
    for name in ("preset", "steps", "warmup", "dtype"):
        if settings.get(name) is not None:
            args += [f"--{name}", str(settings[name])]
    if settings.get("cases"):
        args += ["--cases", json.dumps(settings["cases"])]
    elif settings.get("architectures"):
        args += ["--architectures", *settings["architectures"]]
    if settings.get("mesh"):
        args += ["--mesh", json.dumps(settings["mesh"])]
    if (settings.get("repeats") or 1) > 1:
        args += ["--repeats", str(settings["repeats"])]
    if settings.get("compile_only"):
        args += ["--compile-only"]
    options = settings.get("options") or {}
    if options.get("xla_flags"):
        args += [f"--xla-flags={options['xla_flags']}"]
    if options.get("attention_impl"):
        args += ["--attention-impl", str(options["attention_impl"])]
    return args


# --- two stacks side by side ---------------------------------------------------------------------

AB_USAGE = (
    "ab A B [--rounds R] [--preset P] (--architectures NAME... | --cases JSON) [--steps N] "
    "[--warmup N] [--variant cpu|cuda12|cuda13] [--a-env K=V]... [--b-env K=V]... "
    "[--a-xla-flags FLAGS] [--b-xla-flags FLAGS] [--band PCT] [--alpha A]"
)


@dataclass
class AbArgs:
    a: str
    b: str
    rounds: int = 7  # the fewest whose signed-rank test can reach p < 0.05 over two cases
    preset: str | None = None
    architectures: list[str] = field(default_factory=list)
    cases: list[dict] = field(default_factory=list)
    steps: int | None = None
    warmup: int | None = None
    variant: str = "cpu"
    env: dict = field(default_factory=lambda: {"A": {}, "B": {}})
    xla_flags: dict = field(default_factory=lambda: {"A": "", "B": ""})
    band: float = 5.0
    alpha: float = 0.05


def parse_ab(argv: Sequence[str]) -> AbArgs:
    """`nox -s ab -- A B [flags]` (AB_USAGE); Unreproducible names the bad word."""
    words, positional = list(argv), []
    values: dict = {"env": {"A": {}, "B": {}}, "xla_flags": {"A": "", "B": ""}}
    numbers = {"--rounds": int, "--steps": int, "--warmup": int, "--band": float, "--alpha": float}
    while words:
        word = words.pop(0)
        name, eq, inline = word.partition("=")
        if not word.startswith("--"):
            positional.append(word)
            continue
        if name in ("--architectures",):
            taken = [inline] if eq else []
            while words and not words[0].startswith("--"):
                taken.append(words.pop(0))
            if not taken:
                raise Unreproducible("--architectures needs at least one name")
            values["architectures"] = taken
            continue
        if not eq and not words:
            raise Unreproducible(f"{name} needs a value; usage: {AB_USAGE}")
        value = inline if eq else words.pop(0)
        if name in numbers:
            try:
                values[name[2:]] = numbers[name](value)
            except ValueError:
                raise Unreproducible(f"{name} {value!r} is not a number") from None
        elif name in ("--preset", "--variant"):
            values[name[2:]] = value
        elif name == "--cases":
            try:
                cases = json.loads(value)
            except ValueError as error:
                raise Unreproducible(f"--cases is not valid JSON: {error}") from None
            if not isinstance(cases, list) or not all(isinstance(c, dict) for c in cases):
                raise Unreproducible("--cases must be a JSON list of objects of case fields")
            values["cases"] = cases
        elif name in ("--a-env", "--b-env"):
            key, sep, setting = value.partition("=")
            if not sep or not key:
                raise Unreproducible(f"{name} {value!r} is not KEY=VALUE")
            values["env"][name[2].upper()][key] = setting
        elif name in ("--a-xla-flags", "--b-xla-flags"):
            values["xla_flags"][name[2].upper()] = value
        else:
            raise Unreproducible(f"unrecognized argument {name}; usage: {AB_USAGE}")
    if len(positional) != 2:
        raise Unreproducible(f"ab takes two stacks A and B, got {len(positional)}: {AB_USAGE}")
    args = AbArgs(positional[0], positional[1], **values)
    if args.rounds < 1:
        raise Unreproducible(f"--rounds must be at least 1 (got {args.rounds})")
    if args.variant not in containers.VARIANTS:
        raise Unreproducible(f"--variant {args.variant!r} is not one of: cpu, cuda12, cuda13")
    if not args.architectures and not args.cases:
        raise Unreproducible(
            "ab needs --architectures or --cases: each case runs in its own process"
        )
    if args.architectures and args.cases:
        raise Unreproducible("--architectures and --cases exclude each other")
    if not 0 < args.band < 100 or not 0 < args.alpha < 1:
        raise Unreproducible(
            f"--band {args.band} must be in (0, 100) and --alpha {args.alpha} in (0, 1)"
        )
    args.preset = args.preset or ("cpu-smoke" if args.variant == "cpu" else "small")
    return args


@dataclass
class Side:
    name: str  # "A" or "B"
    given: str
    kind: str  # commit | record | image
    spec: StackSpec | None = None  # commit and record sides
    image: object = None  # engine.Image once materialised

    def describe(self) -> dict:
        image = self.image
        return {
            "given": self.given, "kind": self.kind,
            "commit": getattr(image, "commit", None) or (self.spec and self.spec.commit),
            "image": getattr(image, "ref", None), "image_id": getattr(image, "id", None),
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
        return Side(name, given, "record", spec_from_record(record, f"{name} record {given}"))
    known = git("rev-parse", "--verify", "--quiet", f"{given}^{{commit}}").returncode == 0
    if known:
        commit = resolve_commit(given, f"{name} {given}")
        return Side(name, given, "commit", StackSpec(commit, variant, f"{name} commit {given}"))
    if engine is not None and containers.image_exists(engine, given):
        return Side(name, given, "image", image=containers.image_from_ref(engine, given))
    raise Unreproducible(
        f"{name} {given!r} is neither a record file, a commit of this clone nor an image here"
    )


def units(args: AbArgs) -> list[dict]:
    """One process each: an architecture (the preset's cases of it) or one case."""
    if args.cases:
        return [{"label": case.get("architecture", "?"), "args": ["--cases", json.dumps([case])]}
                for case in args.cases]  # fmt: skip
    return [{"label": name, "args": ["--architectures", name]} for name in args.architectures]


def order(round_index: int, unit_index: int) -> tuple[str, str]:
    """Which side goes first: alternating by round, and by case within a round."""
    return ("A", "B") if (round_index + unit_index) % 2 == 0 else ("B", "A")


def run_rounds(engine, sides: dict, args: AbArgs, run_dir: Path, env: dict, log=print) -> None:
    """Every round runs every case once per side, each in a fresh process, the order
    alternating; each run's record goes to run_dir/rounds/<side>-r<round>-c<case>.json
    (what dew.bench.analysis.ab pairs), its output to the matching .log."""
    rounds_dir = run_dir / "rounds"
    rounds_dir.mkdir(parents=True, exist_ok=True)
    plan = units(args)
    tool = ["--preset", args.preset, "--idle-check", "off", "--format", "md"]
    tool += ["--steps", str(args.steps)] if args.steps else []
    tool += ["--warmup", str(args.warmup)] if args.warmup is not None else []
    manifest = {
        "sides": {name: side.describe() for name, side in sides.items()},
        "rounds": args.rounds, "units": [unit["label"] for unit in plan],
        "env": {name: side_env(env, args, name) for name in sides},
        "tool": tool, "band": args.band, "alpha": args.alpha, "order": [],
    }  # fmt: skip
    gpu = args.variant != "cpu"
    for r in range(args.rounds):
        for u, unit in enumerate(plan):
            for name in order(r, u):
                stem = f"{name}-r{r + 1:02d}-c{u + 1:02d}"
                out = rounds_dir / f"{stem}.json"
                command = ["python", TOOL, *tool, *unit["args"], "--json-out",
                           containers.to_image_path(out)]  # fmt: skip
                argv = containers.run_argv(engine, sides[name].image, command,
                                           env=side_env(env, args, name), gpu=gpu)  # fmt: skip
                started = time.monotonic()
                with open(rounds_dir / f"{stem}.log", "w") as output:
                    code = subprocess.call(argv, stdout=output, stderr=subprocess.STDOUT)
                manifest["order"].append({"round": r + 1, "unit": u + 1, "side": name,
                                          "record": out.name, "exit": code})  # fmt: skip
                log(f"round {r + 1}/{args.rounds} {unit['label']} {name} ({sides[name].given}): "
                    f"{figure_of(out) or 'no record, exit ' + str(code)} "
                    f"[{time.monotonic() - started:.0f} s]")  # fmt: skip
                (run_dir / "ab-plan.json").write_text(json.dumps(manifest, indent=2) + "\n")


def side_env(env: dict, args: AbArgs, name: str) -> dict:
    merged = {**env, **args.env[name]}
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
