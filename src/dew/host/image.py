"""dew's image of a variant: the hash-locked stack on a base, built offline from the host's
wheelhouse, tagged by the hash of what decides it and reused when present; or an existing
image of dew's Dockerfile, named by tag or id.

A build says what it builds and how long the last build of that kind took on this host,
and when done how long it took.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from dew.host.bases import base_python, base_record, base_variables
from dew.host.engine import (
    CACHE,
    ROOT,
    VARIANTS,
    Engine,
    EngineError,
    base_digest,
    git_commit,
    image_exists,
    image_id,
    image_labels,
    last_build_note,
    record_build_seconds,
    sha256_file,
)
from dew.host.wheelhouse import wheelhouse


def image_tag(variant: str, base: str, tree: Path = ROOT, commit: str | None = None) -> str:
    """`localhost/dew:<variant>-<hash>`: the hash of what decides the stack (the Dockerfile,
    the lock, the variant and the base's digest), so an unchanged stack is reused.

    With `commit` (a stack materialised at a commit, stack_images.py) the image also holds
    that commit's code and runs it as it is: `localhost/dew-stack:<variant>-<commit>-<hash>`.
    """
    digest = hashlib.sha256()
    for part in (
        (tree / "docker" / "Dockerfile").read_bytes(),
        (tree / "locks" / f"{variant}.txt").read_bytes(),
        variant.encode(),
        base.encode(),
    ):
        digest.update(hashlib.sha256(part).digest())
    if commit:
        return f"localhost/dew-stack:{variant}-{commit[:12]}-{digest.hexdigest()[:12]}"
    return f"localhost/dew:{variant}-{digest.hexdigest()[:16]}"


def _stage_context(variant: str, wheels: Path, into: Path, tree: Path = ROOT) -> None:
    """A build context with only what the image takes: the context is then small for a
    docker daemon, and needs no .dockerignore. Wheels are hard links where possible."""
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(tree / name, into / name)
    for part in ("src", "tools"):
        if (tree / part).is_dir():
            shutil.copytree(
                tree / part, into / part, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
            )
        else:
            (into / part).mkdir()
    (into / "locks").mkdir()
    shutil.copy2(tree / "locks" / f"{variant}.txt", into / "locks" / f"{variant}.txt")
    shutil.copy2(tree / "docker" / "Dockerfile", into / "Dockerfile")
    (into / "wheelhouse").mkdir()
    for wheel in wheels.glob("*.whl"):
        try:
            os.link(wheel, into / "wheelhouse" / wheel.name)
        except OSError:
            shutil.copy2(wheel, into / "wheelhouse" / wheel.name)


@dataclass
class Image:
    ref: str  # the tag
    id: str
    variant: str
    base: str
    base_digest: str
    lock_sha256: str
    built: bool  # False when an image of the same content hash was reused
    seconds: float
    dockerfile_sha256: str | None = None
    # The commit whose code the image holds and runs as it is (a materialised stack, or an
    # image given by name); None for the checkout's image, which runs the mounted checkout.
    commit: str | None = None
    base_info: dict = field(default_factory=dict)  # base_record's fields
    base_in_image: bool = True  # the image's own DEW_BASE_* variables name its base

    def labels_env(self) -> dict[str, str]:
        """What dew.bench.record.capture reads to fill environment.container."""
        variables = {
            "DEW_IMAGE_ID": self.id,
            "DEW_IMAGE_TAG": self.ref,
            "DEW_BASE_IMAGE_DIGEST": self.base_digest,
            "DEW_LOCK_SHA256": self.lock_sha256,
            "DEW_VARIANT": self.variant,
            "DEW_DOCKERFILE_SHA256": self.dockerfile_sha256 or "",
        }
        if not self.base_in_image:  # an image from before the base was built into it
            variables["DEW_BASE_IMAGE"] = str(self.base_info.get("base_image") or self.base)
            variables.update(base_variables(self.base_info))
        return {key: value for key, value in variables.items() if value}

    def container(self) -> dict[str, str | None]:
        """The image as a record's environment.container names it: what a record's stack
        is held against once rebuilt (dew.bench.record.stack.rebuild_differences)."""
        return {
            "lock_sha256": self.lock_sha256, "dockerfile_sha256": self.dockerfile_sha256,
            "variant": self.variant, "base_image_digest": self.base_digest,
        }  # fmt: skip


def build_image(
    engine: Engine,
    variant: str,
    base: str,
    log=print,
    *,
    tree: Path = ROOT,
    commit: str | None = None,
) -> Image:
    """The image of `variant` on `base`, built offline from a host wheelhouse, or reused
    when one with the same content hash exists.

    `tree` is where the Dockerfile, the lock and the code come from (a git worktree for a
    materialised stack); `commit`, when given, is that tree's commit: the image is then
    tagged and labelled with it and runs its own code (see image_tag)."""
    if variant not in VARIANTS:
        raise EngineError(f"variant {variant!r} is not one of: {', '.join(VARIANTS)}")
    started = time.monotonic()
    digest = base_digest(engine, base)
    if digest is None:
        raise EngineError(f"base image {base} is not present; pull or build it first")
    tag = image_tag(variant, digest, tree, commit)
    lock_sha = sha256_file(tree / "locks" / f"{variant}.txt")
    dockerfile_sha = sha256_file(tree / "docker" / "Dockerfile")
    base_info = base_record(engine, base, digest)
    built = not image_exists(engine, tag)
    # A stack image is built without the layer cache (below): timed apart, it takes longer.
    kind = f"{variant} image" + (" without the layer cache" if commit else "")
    if built:
        log(f"building {tag} ({variant} on {base}) with {engine.label}; {last_build_note(kind)}")
        wheels = wheelhouse(variant, base_python(engine, base), log=log, tree=tree)
        label = commit or git_commit()[0] or "unknown"
        with tempfile.TemporaryDirectory(dir=wheels.parent, prefix="context-") as tmp:
            _stage_context(variant, wheels, Path(tmp), tree)
            build_args = {
                "BASE_IMAGE": base,
                "VARIANT": variant,
                "BASE_IMAGE_DIGEST": digest,
                "LOCK_SHA256": lock_sha,
                "DEW_COMMIT": label,
                "DOCKERFILE_SHA256": dockerfile_sha,
                **{
                    key.removeprefix("DEW_"): value or "unknown"
                    for key, value in base_variables(base_info).items()
                },
            }
            argv = [engine.name, "build", *engine.build_flags, "-t", tag]
            if commit:
                # A stack image carries its commit in labels and ENV from build args, and the
                # layer cache does not key on them (podman 4.3 reused a layer built for
                # another commit of the same tree): build it whole.
                argv.append("--no-cache")
            argv += [
                arg for key, val in build_args.items() for arg in ("--build-arg", f"{key}={val}")
            ]
            argv += ["-f", str(Path(tmp) / "Dockerfile"), tmp]
            env = dict(os.environ, DOCKER_BUILDKIT="1")  # RUN --mount needs BuildKit
            before = _dangling(engine)
            result = subprocess.run(argv, env=env, capture_output=True, text=True)
        if result.returncode != 0:
            # The steps of the failed build that ran, each the parent of the next: removing
            # the last leaves its parent untagged and childless in turn.
            while left := _dangling(engine) - before:
                if not any(engine("rmi", layer).returncode == 0 for layer in left):
                    break
            output = CACHE / "logs" / f"build-{re.sub(r'[^A-Za-z0-9_.-]+', '-', tag)}.log"
            output.parent.mkdir(parents=True, exist_ok=True)
            output.write_text(result.stdout + result.stderr)
            last = (result.stderr.strip() or result.stdout.strip()).splitlines()[-1:] or ["?"]
            raise EngineError(
                f"{engine.name} build of {tag} failed: {last[0][:300]} (its output: {output})"
            )
    ident = image_id(engine, tag) or tag
    seconds = time.monotonic() - started
    if built:
        record_build_seconds(kind, seconds)
    log(f"image {tag} {'built' if built else 'reused'} in {seconds:.1f} s ({ident[:19]})")
    return Image(
        tag, ident, variant, base, digest, lock_sha, built, seconds,
        dockerfile_sha256=dockerfile_sha, commit=commit, base_info=base_info,
        base_in_image=bool(image_labels(engine, tag).get("dew.base.packages")),
    )  # fmt: skip


def _dangling(engine: Engine) -> set[str]:
    """The untagged images: a failed build leaves the steps it ran as such."""
    probe = engine("images", "--all", "--quiet", "--no-trunc", "--filter", "dangling=true")
    return set(probe.stdout.split()) if probe.returncode == 0 else set()


def image_from_ref(engine: Engine, ref: str) -> Image:
    """An existing image of dew's Dockerfile, named by tag or id: it runs its own code."""
    labels = image_labels(engine, ref)
    if not image_exists(engine, ref):
        raise EngineError(f"image {ref} is not present here ({engine.name} images lists them)")
    if not labels.get("dew.variant"):
        raise EngineError(f"image {ref} has no dew.variant label: not an image of dew's Dockerfile")
    base = labels.get("org.opencontainers.image.base.name") or "unknown"
    digest = labels.get("org.opencontainers.image.base.digest") or "unknown"
    info = base_record(engine, base, digest) if image_exists(engine, base) else {}
    commit = labels.get("dew.commit")
    return Image(
        ref, image_id(engine, ref) or ref, labels["dew.variant"], base, digest,
        labels.get("dew.lock.sha256") or "unknown", False, 0.0,
        dockerfile_sha256=labels.get("dew.dockerfile.sha256"),
        commit=None if commit in (None, "", "unknown") else commit, base_info=info,
        base_in_image=bool(labels.get("dew.base.packages")),
    )  # fmt: skip
