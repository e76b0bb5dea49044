"""A stack as an image: the commit, its lock, its Dockerfile and its base (a record names
them, image.py builds them). `nox -s reproduce` materialises a record's stack, `nox -s ab`
two stacks (ab.py). What a record's stack is and what of it differs is
dew.bench.record.stack's; this module builds it.

Every failure a user can fix is an `Unreproducible` (or an engine.EngineError) whose
message is the one line that says what and why; the sessions print it as
`<session>: error: <message>` and exit 2.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dew.bench.record import stack  # standard library only
from dew.host.bases import base_record, build_offline_base
from dew.host.engine import (
    ROOT,
    EngineError,
    base_digest,
    image_exists,
    image_tags,
    pull,
    remove_image,
)
from dew.host.image import build_image

# The commit that brought docker/Dockerfile and its engine module; a commit without the
# Dockerfile has no image to build (the check is the file's presence, this names it).
FIRST_CONTAINER_COMMIT = "590027b"


class Unreproducible(EngineError):
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
    variant = stack.recorded_variant(record)
    if variant is None:
        platform = ((environment.get("devices") or {}).get("platform")) or "?"
        raise Unreproducible(f"{origin} ran on platform {platform}, which dew has no stack "
                             "of: it cannot be rebuilt as an image")  # fmt: skip
    if variant == stack.TPU_HOST:
        raise Unreproducible(on_a_tpu_host(record, origin, "not in an image, and dew rebuilds "
                                           "stacks as images"))  # fmt: skip
    full = resolve_commit(commit, origin, root)
    container = dict(environment.get("container") or {})
    return StackSpec(full, variant, origin, container, from_record=True)


def on_a_tpu_host(record: dict, origin: str, why_not_here: str) -> str:
    """Where and how a TPU record is rerun: `dew reproduce` on a TPU host, with the bundle
    built at its commit (docs/reproducing.md, "On a TPU host")."""
    commit = ((record.get("environment") or {}).get("code") or {}).get("commit") or "?"
    rerun = " ".join(["python3.11 tools/benchmark_step.py",
                      *map(_quoted, settings_args(record.get("settings") or {}))])  # fmt: skip
    path = origin.split(" ")[-1]
    return (
        f"{origin} ran on {stack.host_stack_line(record)}, {why_not_here}: rerun it on a TPU "
        f"host with the bundle built at {commit[:7]} (docs/tpu-install.md): `dew reproduce "
        f"{path}` there (its cases: `{rerun}`)"
    )


def stack_parts(record: dict, root: Path = ROOT) -> tuple[list[str], list[str]]:
    """Which parts of the record's stack this clone can match, and which not (one line
    each): dew.bench.record.stack.stack_parts, the commit looked up in this clone."""

    def commit_here(commit: str) -> bool:
        found = git("rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}", root=root)
        return found.returncode == 0

    return stack.stack_parts(record, commit_here)


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
        if rebuild.startswith("pull ") and pull(engine, rebuild.split()[1]):
            return rebuild.split()[1], []
    packages = recorded.get("base_packages")
    if packages and (recorded.get("base_rebuild") or "").startswith("debootstrap"):
        ref = build_offline_base(engine, log=log)
        info = base_record(engine, ref)
        differ = stack.package_differences(packages, info.get("base_packages"))
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
    if not image_exists(engine, digest):
        return None
    for candidate in ([name] if name else []) + image_tags(engine, digest):
        if base_digest(engine, candidate) == digest:
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
        image = build_image(engine, spec.variant, base, log=log, tree=tree,
                                       commit=spec.commit)  # fmt: skip
    if image.built:
        built.append(image.ref)
    return image


def remove_built(engine, built: Sequence[str]) -> None:
    for ref in built:
        remove_image(engine, ref)


# --- the step tool with a record's settings ------------------------------------------------------


def _quoted(arg: str) -> str:
    return shlex.quote(arg)


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
