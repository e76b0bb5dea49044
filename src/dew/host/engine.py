"""The one container engine wrapper: pick docker or podman, with the flags this host needs,
and ask it about images; the checkout's commit, and how long the last build of each kind
took on this host (~/.cache/dew/build-times.json). Standard library only, like every module
of dew.host: the noxfile imports them before any environment exists.

The rest of dew.host builds on it: bases.py (the base, the offline Debian one), wheelhouse.py,
image.py (dew's image of a variant), runner.py (a command in the image or the session's
venv), handover.py, gpu_checks.py, stack_images.py and ab_rounds.py (a record's stack; two
side by side), benchmarks.py and replay.py (the sessions' steps).

Every failure a user can fix is an `EngineError` whose message is one line saying what to
do; the noxfile prints it with `session.error`.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]  # the checkout: src/dew/host/engine.py
ENGINES = ("docker", "podman", "none")
VARIANTS = ("cpu", "cuda12", "cuda13", "tpu")
CACHE = Path(os.environ.get("DEW_CACHE_DIR") or Path.home() / ".cache" / "dew")
# How long the last build of each kind took, said before the next one (last_build_note).
BUILD_TIMES = CACHE / "build-times.json"
# Where things live inside the image (the Dockerfile uses the same paths).
IMAGE_ROOT = "/opt/dew"
IMAGE_XLA_CACHE = "/cache/xla"


class EngineError(RuntimeError):
    """A problem the user can fix; the message is the one line that says how."""


def run_captured(argv: Sequence[str], timeout: float = 60, **kwargs) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, check=False, **kwargs
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return subprocess.CompletedProcess(list(argv), 127, "", str(error))


@dataclass
class Engine:
    """A container engine that answers, with the flags this host needs for it."""

    name: str
    version: str
    build_flags: list[str] = field(default_factory=list)
    run_flags: list[str] | None = None  # detected on first use, see host_run_flags

    @property
    def label(self) -> str:
        return f"{self.name} {self.version}"

    def gpu_flags(self) -> list[str]:
        """Every GPU into the container: docker through the NVIDIA Container Toolkit's
        runtime hook; podman through the NVIDIA CDI spec (nvidia.com/gpu), always with
        SELinux labelling off for the container: on an SELinux host a labelled container
        may not open the device nodes CDI mounts in, and elsewhere the option changes
        nothing (one argv on every host, no probe that a nested engine could answer wrong)."""
        if self.name == "docker":
            return ["--gpus", "all"]
        return ["--device", "nvidia.com/gpu=all", "--security-opt=label=disable"]

    def __call__(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return run_captured([self.name, *args], timeout=timeout)


# --- choosing an engine -----------------------------------------------------------------


def choose(environ: Mapping[str, str] | None = None) -> Engine | None:
    """DEW_ENGINE if set (docker, podman or none), else docker when its daemon answers, else
    podman, else None (no engine: the caller decides whether to fall back to a venv)."""
    environ = os.environ if environ is None else environ
    wanted = environ.get("DEW_ENGINE", "").strip()
    if wanted and wanted not in ENGINES:
        raise EngineError(f"DEW_ENGINE={wanted!r} is not one of: {', '.join(ENGINES)}")
    if wanted == "none":
        return None
    for name in (wanted,) if wanted else ("docker", "podman"):
        engine = _answering(name)
        if engine:
            return engine
        if wanted:
            raise EngineError(
                f"DEW_ENGINE={wanted} but `{wanted}` does not answer here; "
                f"install it (and start its daemon) or choose another of: {', '.join(ENGINES)}"
            )
    return None


def _answering(name: str) -> Engine | None:
    if not shutil.which(name):
        return None
    if name == "docker":  # the CLI alone is not enough: the daemon must answer
        probe = run_captured(["docker", "version", "--format", "{{.Server.Version}}"], timeout=15)
        if probe.returncode != 0 or not probe.stdout.strip():
            return None
        return Engine("docker", probe.stdout.strip())
    probe = run_captured(["podman", "version", "--format", "{{.Client.Version}}"], timeout=15)
    if probe.returncode != 0:
        return None
    # chroot isolation builds wherever podman runs as root, including inside another
    # container, where the default (oci) isolation cannot set up namespaces.
    isolation = os.environ.get("DEW_PODMAN_ISOLATION", "chroot")
    return Engine("podman", probe.stdout.strip(), build_flags=["--isolation", isolation])


def host_run_flags(engine: Engine, image: str) -> list[str]:
    """The runtime and ulimit flags that let a container start on this host.

    Some hosts (a sandboxed or nested runtime) refuse the engine's default rlimits, or
    crun altogether. Try the defaults first, then runc, then the host's own file limit
    with a modest process limit, and keep the first that starts `true` in the image.
    """
    if engine.run_flags is not None:
        return engine.run_flags
    nofile = min(resource.getrlimit(resource.RLIMIT_NOFILE)[0], 65536)
    limits = [[], ["--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", "nproc=4096:4096"]]
    limits.append(["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096"])
    runtimes: list[list[str]] = [[]]
    if engine.name == "podman" and shutil.which("runc"):
        runtimes.append(["--runtime", "runc"])
    errors = []
    for runtime in runtimes:
        for limit in limits:
            probe = engine("run", "--rm", *runtime, *limit, image, "true", timeout=120)
            if probe.returncode == 0:
                engine.run_flags = [*runtime, *limit]
                return engine.run_flags
            errors.append(probe.stderr.strip().splitlines()[-1:] or ["?"])
    raise EngineError(
        f"{engine.name} cannot start a container from {image} here "
        f"(last error: {errors[-1][0]}); check `{engine.name} run --rm {image} true`"
    )


# --- images ----------------------------------------------------------------------------


def image_exists(engine: Engine, ref: str) -> bool:
    return engine("image", "inspect", ref).returncode == 0


def image_labels(engine: Engine, ref: str) -> dict[str, str]:
    probe = engine("image", "inspect", "--format", "{{json .Labels}}", ref)
    if probe.returncode != 0:
        return {}
    try:
        return json.loads(probe.stdout.strip() or "null") or {}
    except ValueError:
        return {}


def remove_image(engine: Engine, ref: str) -> None:
    """Remove an image this run built (its layers shared with others stay)."""
    engine("rmi", ref, timeout=300)


def image_tags(engine: Engine, ref: str) -> list[str]:
    probe = engine("image", "inspect", "--format", "{{json .RepoTags}}", ref)
    try:
        return (
            list(json.loads(probe.stdout.strip() or "null") or []) if probe.returncode == 0 else []
        )
    except ValueError:
        return []


def image_id(engine: Engine, ref: str) -> str | None:
    probe = engine("image", "inspect", "--format", "{{.Id}}", ref)
    if probe.returncode != 0:
        return None
    value = probe.stdout.strip()
    return value if value.startswith("sha256:") else f"sha256:{value}"


def base_digest(engine: Engine, ref: str) -> str | None:
    """The base's resolved digest: `name@sha256:...` for a pulled image (pullable again by
    `--base-image`), else the image id of a locally built one."""
    probe = engine("image", "inspect", "--format", "{{json .RepoDigests}}", ref)
    if probe.returncode == 0:
        digests = json.loads(probe.stdout.strip() or "null") or []
        if digests:
            return sorted(digests)[0]
    return image_id(engine, ref)


def pull(engine: Engine, ref: str) -> bool:
    return engine("pull", "--quiet", ref, timeout=900).returncode == 0


# --- how long builds take -----------------------------------------------------------------


def last_build_seconds(kind: str, times: Path = BUILD_TIMES) -> float | None:
    """How long the last successful build of `kind` took here; None when none was timed
    (or the file is unreadable: it is a cache, never a reason to stop a build)."""
    try:
        entry = json.loads(times.read_text()).get(kind)
        return float(entry["seconds"])
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None


def last_build_note(kind: str, times: Path = BUILD_TIMES) -> str:
    """What to say before a build of `kind`: how long the last one took, if one was timed."""
    seconds = last_build_seconds(kind, times)
    if seconds is None:
        return f"no earlier {kind} build timed on this host"
    return f"the last {kind} build took {seconds:.0f} s"


def record_build_seconds(kind: str, seconds: float, times: Path = BUILD_TIMES) -> None:
    """Keep `seconds` as the last build time of `kind` in `times` (one JSON object, a kind
    to {"seconds", "finished"}), replaced in one step so concurrent builds never leave half a
    file. A file that cannot be written is skipped: the build itself went fine."""
    try:
        known = json.loads(times.read_text())
        known = known if isinstance(known, dict) else {}
    except (OSError, ValueError):
        known = {}
    known[kind] = {
        "seconds": round(seconds, 1),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    try:
        times.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{times.name}.", dir=times.parent)
    except OSError:
        return
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(known, f, indent=1, sort_keys=True)
        os.replace(tmp, times)
    except OSError:
        Path(tmp).unlink(missing_ok=True)


# --- the checkout ---------------------------------------------------------------------------


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def git_commit(root: Path = ROOT) -> tuple[str | None, bool | None]:
    """The checkout's commit and whether tracked files differ from it."""
    head = run_captured(["git", "-C", str(root), "rev-parse", "HEAD"])
    if head.returncode != 0:
        return None, None
    status = run_captured(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"])
    return head.stdout.strip(), bool(status.stdout.strip())


def git_diff_sha256(root: Path = ROOT) -> str | None:
    """sha256 of `git diff HEAD --binary` (stripped): which uncommitted change a dirty run
    ran. dew.bench.record.capture hashes the same text on the host."""
    diff = run_captured(["git", "-C", str(root), "diff", "HEAD", "--binary"])
    text = diff.stdout.strip()
    return hashlib.sha256(text.encode()).hexdigest() if diff.returncode == 0 and text else None
