"""The one container engine wrapper: pick docker or podman, build the base and the image,
and say how to run a command in it. Standard library only, because the noxfile imports it
before any environment exists.

Every failure a user can fix is an `EngineError` whose message is one line saying what to
do; the noxfile prints it with `session.error`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "docker" / "Dockerfile"
ENGINES = ("docker", "podman", "none")
VARIANTS = ("cpu", "cuda12", "cuda13")
# The image for a pulled base. It has no Python of its own: the Dockerfile installs the
# distribution's (3.12 on 24.04), which is what the wheelhouse is downloaded for.
DEFAULT_BASE_IMAGE = "docker.io/library/ubuntu:24.04"
OFFLINE_BASE_IMAGE = "localhost/dew-base:trixie"
OFFLINE_SUITE = "trixie"
# Python of the distributions a base may be, for bases without python3 installed yet.
DISTRO_PYTHON = {("ubuntu", "24.04"): "3.12", ("debian", "13"): "3.13", ("ubuntu", "22.04"): "3.10"}
CACHE = Path(os.environ.get("DEW_CACHE_DIR") or Path.home() / ".cache" / "dew")
# Where things live inside the image (the Dockerfile uses the same paths).
IMAGE_ROOT = "/opt/dew"
IMAGE_XLA_CACHE = "/cache/xla"


class EngineError(RuntimeError):
    """A problem the user can fix; the message is the one line that says how."""


def _run(argv: Sequence[str], timeout: float = 60, **kwargs) -> subprocess.CompletedProcess:
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
        if self.name == "docker":
            return ["--gpus", "all"]
        return ["--device", "nvidia.com/gpu=all"]  # podman: the NVIDIA CDI spec

    def __call__(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return _run([self.name, *args], timeout=timeout)


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
        probe = _run(["docker", "version", "--format", "{{.Server.Version}}"], timeout=15)
        if probe.returncode != 0 or not probe.stdout.strip():
            return None
        return Engine("docker", probe.stdout.strip())
    probe = _run(["podman", "version", "--format", "{{.Client.Version}}"], timeout=15)
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


# --- the offline base --------------------------------------------------------------------


def apt_mirror(etc_apt: Path = Path("/etc/apt")) -> str:
    """The Debian archive this machine's apt already uses, read at run time so that no
    host name is written into the repository."""
    candidates: list[tuple[str, str]] = []  # (uri, suite)
    for path in sorted((etc_apt / "sources.list.d").glob("*.sources")):
        for stanza in re.split(r"\n\s*\n", _read(path)):
            fields = {}
            for line in stanza.splitlines():
                key, sep, value = line.partition(":")
                if sep and not line.lstrip().startswith("#"):
                    fields[key.strip().lower()] = value.strip()
            enabled = fields.get("enabled", "yes").lower() != "no"
            if enabled and "deb" in fields.get("types", "").split():
                for uri in fields.get("uris", "").split():
                    candidates += [(uri, suite) for suite in fields.get("suites", "").split()]
    lists = [etc_apt / "sources.list", *sorted((etc_apt / "sources.list.d").glob("*.list"))]
    for path in lists:
        for line in _read(path).splitlines():
            words = re.sub(r"\[[^]]*\]", "", line.split("#", 1)[0]).split()
            if len(words) >= 3 and words[0] == "deb":
                candidates.append((words[1], words[2]))
    for uri, suite in candidates:
        # The main archive, not the security or updates pockets.
        if "security" not in uri and not re.search(r"-(security|updates|backports)$", suite):
            return uri.rstrip("/")
    raise EngineError(
        "no Debian archive found in /etc/apt (sources.list, sources.list.d): "
        "build the offline base on a Debian machine with apt set up"
    )


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def build_offline_base(engine: Engine, ref: str = OFFLINE_BASE_IMAGE, log=print) -> str:
    """Debian trixie (Python 3.13) from debootstrap, imported as `ref`; reused if present."""
    if image_exists(engine, ref):
        return ref
    if not shutil.which("debootstrap"):
        raise EngineError("debootstrap is not installed: `apt-get install debootstrap` (as root)")
    if os.geteuid() != 0:
        raise EngineError("building the offline base needs root (debootstrap): run as root")
    mirror = apt_mirror()
    CACHE.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(dir=CACHE, prefix="rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        log(f"building the offline base {ref} with debootstrap ({OFFLINE_SUITE}, minbase)")
        result = _run(
            [
                "debootstrap", "--variant=minbase",
                "--include=python3,python3-venv,ca-certificates",
                OFFLINE_SUITE, str(rootfs), mirror,
            ],
            timeout=1800,
        )  # fmt: skip
        if result.returncode != 0:
            tail = (result.stdout + result.stderr).strip().splitlines()[-1:] or ["?"]
            raise EngineError(f"debootstrap of {OFFLINE_SUITE} failed: {tail[0]}")
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        imported = subprocess.run(
            [engine.name, "import", "-", ref], stdin=tar.stdout, capture_output=True, text=True
        )
        tar.stdout.close()
        tar.wait()
        if imported.returncode != 0 or tar.returncode != 0:
            raise EngineError(f"{engine.name} import of the base failed: {imported.stderr.strip()}")
    log(f"offline base {ref} built in {time.monotonic() - started:.0f} s")
    return ref


# --- the image ---------------------------------------------------------------------------


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def image_tag(variant: str, base: str) -> str:
    """`localhost/dew:<variant>-<hash>`: the hash of what decides the stack (the Dockerfile,
    the lock, the variant and the base's digest), so an unchanged stack is reused."""
    digest = hashlib.sha256()
    for part in (
        DOCKERFILE.read_bytes(),
        (ROOT / "locks" / f"{variant}.txt").read_bytes(),
        variant.encode(),
        base.encode(),
    ):
        digest.update(hashlib.sha256(part).digest())
    return f"localhost/dew:{variant}-{digest.hexdigest()[:16]}"


def base_python(engine: Engine, base: str) -> str:
    """The Python version the image will have: the base's python3, or its distribution's."""
    script = (
        "python3 -c 'import sys; print(\"%d.%d\" % sys.version_info[:2])' 2>/dev/null"
        ' || (. /etc/os-release && echo "os $ID $VERSION_ID")'
    )
    probe = engine("run", "--rm", *host_run_flags(engine, base), base, "sh", "-c", script)
    answer = probe.stdout.strip().split()
    if probe.returncode == 0 and len(answer) == 1 and re.fullmatch(r"3\.\d+", answer[0]):
        return answer[0]
    if len(answer) == 3 and (answer[1], answer[2]) in DISTRO_PYTHON:
        return DISTRO_PYTHON[(answer[1], answer[2])]
    raise EngineError(
        f"cannot tell which Python the base {base} has ({probe.stdout.strip() or 'no answer'}); "
        "use a base with python3, or one of: "
        + ", ".join(f"{os_} {ver}" for os_, ver in DISTRO_PYTHON)
    )


def wheelhouse(variant: str, python: str, log=print) -> Path:
    """Every wheel of `locks/<variant>.txt` for CPython `python` on manylinux x86_64, hash
    checked, downloaded by the host's pip (the container needs no network or TLS) and
    cached under ~/.cache/dew keyed by the lock's hash."""
    lock = ROOT / "locks" / f"{variant}.txt"
    target = CACHE / "wheelhouse" / f"{variant}-py{python}-{sha256_file(lock)[:16]}"
    if (target / ".complete").exists():
        return target
    target.mkdir(parents=True, exist_ok=True)
    tag = python.replace(".", "")
    # pip takes one --platform per manylinux level; wheels tagged for an older glibc are fine.
    platforms = [f"manylinux_2_{minor}_x86_64" for minor in range(39, 4, -1)]
    platforms += ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
    log(f"downloading the {variant} wheelhouse for Python {python} into {target}")
    started = time.monotonic()
    argv = [
        sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--require-hashes",
        "--only-binary=:all:", "--implementation", "cp", "--python-version", python,
        "--abi", f"cp{tag}", *(arg for p in platforms for arg in ("--platform", p)),
        "--dest", str(target), "-r", str(lock),
    ]  # fmt: skip
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        errors = [line for line in result.stderr.splitlines() if line.startswith("ERROR")]
        raise EngineError(
            f"pip download of locks/{variant}.txt for Python {python} failed: "
            + (errors[-1] if errors else result.stderr.strip()[-300:])
        )
    (target / ".complete").write_text(f"{time.monotonic() - started:.1f} s\n")
    size = sum(p.stat().st_size for p in target.glob("*.whl"))
    log(f"wheelhouse: {len(list(target.glob('*.whl')))} wheels, {size / 2**20:.0f} MiB")
    return target


def _stage_context(variant: str, wheels: Path, into: Path) -> None:
    """A build context with only what the image takes: the context is then small for a
    docker daemon, and needs no .dockerignore. Wheels are hard links where possible."""
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, into / name)
    for tree in ("src", "tools"):
        if (ROOT / tree).is_dir():
            shutil.copytree(
                ROOT / tree, into / tree, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
            )
        else:
            (into / tree).mkdir()
    (into / "locks").mkdir()
    shutil.copy2(ROOT / "locks" / f"{variant}.txt", into / "locks" / f"{variant}.txt")
    shutil.copy2(DOCKERFILE, into / "Dockerfile")
    (into / "wheelhouse").mkdir()
    for wheel in wheels.glob("*.whl"):
        try:
            os.link(wheel, into / "wheelhouse" / wheel.name)
        except OSError:
            shutil.copy2(wheel, into / "wheelhouse" / wheel.name)


@dataclass
class Image:
    ref: str
    id: str
    variant: str
    base: str
    base_digest: str
    lock_sha256: str
    built: bool  # False when an image of the same content hash was reused
    seconds: float

    def labels_env(self) -> dict[str, str]:
        """What dew.bench.environment reads to fill environment.container."""
        return {
            "DEW_IMAGE_ID": self.id,
            "DEW_BASE_IMAGE_DIGEST": self.base_digest,
            "DEW_LOCK_SHA256": self.lock_sha256,
            "DEW_VARIANT": self.variant,
        }


def build_image(engine: Engine, variant: str, base: str, log=print) -> Image:
    """The image of `variant` on `base`, built offline from a host wheelhouse, or reused
    when one with the same content hash exists."""
    if variant not in VARIANTS:
        raise EngineError(f"variant {variant!r} is not one of: {', '.join(VARIANTS)}")
    started = time.monotonic()
    digest = base_digest(engine, base)
    if digest is None:
        raise EngineError(f"base image {base} is not present; pull or build it first")
    tag = image_tag(variant, digest)
    lock_sha = sha256_file(ROOT / "locks" / f"{variant}.txt")
    built = not image_exists(engine, tag)
    if built:
        wheels = wheelhouse(variant, base_python(engine, base), log=log)
        commit = git_commit()[0] or "unknown"
        log(f"building {tag} ({variant} on {base}) with {engine.label}")
        with tempfile.TemporaryDirectory(dir=wheels.parent, prefix="context-") as tmp:
            _stage_context(variant, wheels, Path(tmp))
            build_args = {
                "BASE_IMAGE": base,
                "VARIANT": variant,
                "BASE_IMAGE_DIGEST": digest,
                "LOCK_SHA256": lock_sha,
                "DEW_COMMIT": commit,
            }
            argv = [engine.name, "build", *engine.build_flags, "-t", tag]
            argv += [
                arg for key, val in build_args.items() for arg in ("--build-arg", f"{key}={val}")
            ]
            argv += ["-f", str(Path(tmp) / "Dockerfile"), tmp]
            env = dict(os.environ, DOCKER_BUILDKIT="1")  # RUN --mount needs BuildKit
            result = subprocess.run(argv, env=env, capture_output=True, text=True)
        if result.returncode != 0:
            sys.stderr.write(result.stdout[-4000:] + result.stderr[-4000:])
            raise EngineError(f"{engine.name} build of {tag} failed (output above)")
    ident = image_id(engine, tag) or tag
    seconds = time.monotonic() - started
    log(f"image {tag} {'built' if built else 'reused'} in {seconds:.1f} s ({ident[:19]})")
    return Image(tag, ident, variant, base, digest, lock_sha, built, seconds)


# --- running -----------------------------------------------------------------------------


def git_commit() -> tuple[str | None, bool | None]:
    """The checkout's commit and whether tracked files differ from it."""
    head = _run(["git", "-C", str(ROOT), "rev-parse", "HEAD"])
    if head.returncode != 0:
        return None, None
    status = _run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"])
    return head.stdout.strip(), bool(status.stdout.strip())


def run_argv(
    engine: Engine,
    image: Image,
    command: Sequence[str],
    *,
    env: Mapping[str, str] = (),
    mounts: Sequence[tuple[Path, str, str]] = (),
    gpu: bool = False,
) -> list[str]:
    """`engine run` for one command in the image, with the checkout's code and results,
    and the persistent XLA compilation cache at IMAGE_XLA_CACHE (the caller passes it to
    the tool, so the record's command shows it).

    The image holds the stack; the checkout's src/ and tools/ are mounted over the copies
    inside, so a reused image runs the code being benchmarked, and the run records the
    checkout's commit. The caller's uid writes the results, so they belong to the caller.
    """
    commit, dirty = git_commit()
    xla_cache = CACHE / "xla"
    xla_cache.mkdir(parents=True, exist_ok=True)
    results = ROOT / "results"
    results.mkdir(exist_ok=True)
    argv = [engine.name, "run", "--rm", *host_run_flags(engine, image.ref)]
    argv += ["--user", f"{os.getuid()}:{os.getgid()}", "--network", "none"]
    # The idle check must see the host's other processes; grain's workers share memory.
    argv += ["--pid=host", "--shm-size=8g"]
    if gpu:
        argv += engine.gpu_flags()
    volumes = [
        (ROOT / "src", f"{IMAGE_ROOT}/src", "ro"),
        (ROOT / "tools", f"{IMAGE_ROOT}/tools", "ro"),
        (results, f"{IMAGE_ROOT}/results", "rw"),
        (xla_cache, IMAGE_XLA_CACHE, "rw"),
        *mounts,
    ]
    for host, inside, mode in volumes:
        if Path(host).exists():
            argv += ["-v", f"{Path(host).resolve()}:{inside}:{mode}"]
    variables = {
        **image.labels_env(),
        "DEW_COMMIT": commit or "unknown",
        "DEW_DIRTY": "1" if dirty else "0",
        "HOME": "/tmp",
        **dict(env),
    }
    for key, value in variables.items():
        argv += ["-e", f"{key}={value}"]
    argv += ["-w", IMAGE_ROOT, image.ref, *command]
    return argv


def to_image_path(host_path: Path) -> str:
    """Where a path under the checkout's results/ appears inside the container."""
    relative = Path(host_path).resolve().relative_to((ROOT / "results").resolve())
    return f"{IMAGE_ROOT}/results/{relative.as_posix()}"
