"""The one container engine wrapper: pick docker or podman, build the base and the image,
and say how to run a command in it. Standard library only, because the noxfile imports it
before any environment exists.

A build says what it builds and how long the last build of that kind took on this host
(~/.cache/dew/build-times.json), and when done how long it took.

Every failure a user can fix is an `EngineError` whose message is one line saying what to
do; the noxfile prints it with `session.error`.
"""

from __future__ import annotations

import email.utils
import hashlib
import json
import os
import re
import resource
import shutil
import signal
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
OFFLINE_SUITE = "trixie"
# What the first offline bases held (tagged plain "trixie", before tcmalloc joined): the
# recipe of such a base when its labels name none.
FIRST_OFFLINE_INCLUDE = "python3,python3-venv,ca-certificates"
# tcmalloc: the step benchmark preloads it into its CPU cases (dew.bench.sweep.allocator).
OFFLINE_INCLUDE = f"{FIRST_OFFLINE_INCLUDE},libtcmalloc-minimal4t64"
# The tag names the package list: a base built with another list is another image, never
# one reused under this name.
OFFLINE_BASE_IMAGE = (
    f"localhost/dew-base:{OFFLINE_SUITE}-{hashlib.sha256(OFFLINE_INCLUDE.encode()).hexdigest()[:8]}"
)
# Python of the distributions a base may be, for bases without python3 installed yet.
DISTRO_PYTHON = {("ubuntu", "24.04"): "3.12", ("debian", "13"): "3.13", ("ubuntu", "22.04"): "3.10"}
CACHE = Path(os.environ.get("DEW_CACHE_DIR") or Path.home() / ".cache" / "dew")
# How long the last build of each kind took, said before the next one (last_build_note).
BUILD_TIMES = CACHE / "build-times.json"
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
    """Debian trixie (Python 3.13) from debootstrap, imported as `ref`; reused if present.

    The image carries what rebuilds it as labels: the suite, the archive's snapshot time
    (its Release file's Date) and every package's version (see `base_record`)."""
    if image_exists(engine, ref):
        return ref
    if not shutil.which("debootstrap"):
        raise EngineError("debootstrap is not installed: `apt-get install debootstrap` (as root)")
    if os.geteuid() != 0:
        raise EngineError("building the offline base needs root (debootstrap): run as root")
    mirror = apt_mirror()
    CACHE.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    kind = f"offline base {OFFLINE_SUITE}"
    with tempfile.TemporaryDirectory(dir=CACHE, prefix="rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        log(
            f"building the offline base {ref} with debootstrap ({OFFLINE_SUITE}, minbase); "
            + last_build_note(kind)
        )
        result = _run(
            [
                "debootstrap", "--variant=minbase", f"--include={OFFLINE_INCLUDE}",
                OFFLINE_SUITE, str(rootfs), mirror,
            ],
            timeout=1800,
        )  # fmt: skip
        if result.returncode != 0:
            tail = (result.stdout + result.stderr).strip().splitlines()[-1:] or ["?"]
            raise EngineError(f"debootstrap of {OFFLINE_SUITE} failed: {tail[0]}")
        labels = {
            "dew.base.recipe": f"debootstrap --variant=minbase --include={OFFLINE_INCLUDE}",
            "dew.base.suite": OFFLINE_SUITE,
            "dew.base.snapshot": _archive_snapshot(rootfs, OFFLINE_SUITE) or "unknown",
            "dew.base.packages": ",".join(_rootfs_packages(rootfs)),
        }
        changes = [arg for k, v in labels.items() for arg in ("--change", f"LABEL {k}={v}")]
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        imported = subprocess.run(
            [engine.name, "import", *changes, "-", ref],
            stdin=tar.stdout, capture_output=True, text=True,
        )  # fmt: skip
        tar.stdout.close()
        tar.wait()
        if imported.returncode != 0 or tar.returncode != 0:
            raise EngineError(f"{engine.name} import of the base failed: {imported.stderr.strip()}")
    seconds = time.monotonic() - started
    record_build_seconds(kind, seconds)
    log(f"offline base {ref} built in {seconds:.0f} s")
    return ref


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


def _archive_snapshot(rootfs: Path, suite: str) -> str | None:
    """When the archive debootstrap read was published: its Release file's Date, as UTC."""
    lists = rootfs / "var" / "lib" / "apt" / "lists"
    for release in sorted(lists.glob(f"*_dists_{suite}_Release")):
        return _release_date(_read(release))
    return None


def _release_date(text: str) -> str | None:
    match = re.search(r"^Date:\s*(.+)$", text, re.M)
    if not match:
        return None
    try:
        when = email.utils.parsedate_to_datetime(match.group(1).strip())
    except (TypeError, ValueError):
        return None
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _rootfs_packages(rootfs: Path) -> list[str]:
    """`name=version` of every package installed in a Debian root file system."""
    status = _read(rootfs / "var" / "lib" / "dpkg" / "status")
    return dpkg_status_packages(status)


def dpkg_status_packages(status: str) -> list[str]:
    packages = []
    for stanza in re.split(r"\n\s*\n", status):
        fields = dict(re.findall(r"^([A-Za-z-]+):\s*(.*)$", stanza, re.M))
        if fields.get("Package") and "installed" in fields.get("Status", "").split():
            packages.append(f"{fields['Package']}={fields.get('Version', '')}")
    return sorted(packages)


# --- what a base is, and how it comes back --------------------------------------------------

# Run in the base: the release, the archive snapshot and the packages (dpkg's images only).
BASE_PROBE = (
    '. /etc/os-release 2>/dev/null; echo "suite=${VERSION_CODENAME:-}"; '
    'for f in /var/lib/apt/lists/*_dists_"${VERSION_CODENAME:-none}"_Release; do '
    '[ -f "$f" ] && sed -n "s/^Date: */date=/p" "$f" | head -n 1; done; '
    "command -v dpkg-query >/dev/null && dpkg-query -W -f 'package=${Package}=${Version}\\n'"
)


def base_record(engine: Engine, ref: str, digest: str | None = None) -> dict[str, object]:
    """The base named fully for a record (environment.container's base_* fields): name,
    digest, suite, archive snapshot, packages and how to rebuild it (or why it cannot be).
    Read once per digest and cached under ~/.cache/dew/bases/."""
    digest = digest or base_digest(engine, ref)
    cached = CACHE / "bases" / (hashlib.sha256(str(digest).encode()).hexdigest()[:24] + ".json")
    try:
        return json.loads(cached.read_text())
    except (OSError, ValueError):
        pass
    labels = image_labels(engine, ref)
    run = engine("run", "--rm", *host_run_flags(engine, ref), "--network", "none", ref,
                 "sh", "-c", BASE_PROBE)  # fmt: skip
    facts: dict[str, list[str]] = {}
    for line in run.stdout.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            facts.setdefault(key, []).append(value)
    suite = labels.get("dew.base.suite") or (facts.get("suite") or [""])[0] or None
    snapshot = labels.get("dew.base.snapshot")
    if not snapshot or snapshot == "unknown":
        snapshot = _release_date("Date: " + (facts.get("date") or [""])[0])
    packages = sorted(facts.get("package") or []) or None
    record = {
        "base_image": ref,
        "base_image_digest": digest,
        "base_suite": suite,
        "base_snapshot": snapshot,
        "base_packages": packages,
        "base_rebuild": _rebuild_statement(ref, digest, labels, suite, snapshot),
    }
    if run.returncode == 0:  # an answer worth keeping; a failed probe is asked again
        cached.parent.mkdir(parents=True, exist_ok=True)
        cached.write_text(json.dumps(record))
    return record


def _rebuild_statement(ref, digest, labels, suite, snapshot) -> str:
    """How the base comes back, or a plain statement that it cannot."""
    digest = str(digest or "")
    if "@sha256:" in digest and not digest.startswith("localhost/"):
        return f"pull {digest}"
    recipe = labels.get("dew.base.recipe")
    repository = ref.split("@")[0].split(":")[0]  # by tag or by digest: localhost/dew-base
    if not recipe and repository == OFFLINE_BASE_IMAGE.split(":")[0] and suite:
        recipe = f"debootstrap --variant=minbase --include={FIRST_OFFLINE_INCLUDE}"
    if recipe and suite and snapshot:
        return (
            f"{recipe} {suite} from the Debian archive as of {snapshot} "
            "(an archive snapshot of that time gives base_packages)"
        )
    return (
        f"cannot be rebuilt: {ref} is a local image and its record names no recipe or "
        "archive snapshot"
    )


def package_differences(recorded: list[str] | None, here: list[str] | None) -> list[str]:
    """`name: recorded -> here` for every package that differs between two lists."""

    def versions(items):
        return dict(item.partition("=")[::2] for item in items or [])

    a, b = versions(recorded), versions(here)
    return [
        f"{name}: {a.get(name, 'absent')} -> {b.get(name, 'absent')}"
        for name in sorted(set(a) | set(b))
        if a.get(name) != b.get(name)
    ]


# --- the image ---------------------------------------------------------------------------


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def image_tag(variant: str, base: str, tree: Path = ROOT, commit: str | None = None) -> str:
    """`localhost/dew:<variant>-<hash>`: the hash of what decides the stack (the Dockerfile,
    the lock, the variant and the base's digest), so an unchanged stack is reused.

    With `commit` (a stack materialised at a commit, docker/stacks.py) the image also holds
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


def wheelhouse(variant: str, python: str, log=print, tree: Path = ROOT) -> Path:
    """Every wheel of `locks/<variant>.txt` (of `tree`) for CPython `python` on manylinux
    x86_64, hash checked, downloaded by the host's pip (the container needs no network or
    TLS) and cached under ~/.cache/dew keyed by the lock's hash."""
    lock = tree / "locks" / f"{variant}.txt"
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


def base_variables(info: dict) -> dict[str, str]:
    """base_record's fields as the DEW_BASE_* variables (build arguments of the same names
    without DEW_): the package list as name=version,name=version,..."""
    return {
        "DEW_BASE_SUITE": str(info.get("base_suite") or ""),
        "DEW_BASE_SNAPSHOT": str(info.get("base_snapshot") or ""),
        "DEW_BASE_PACKAGES": ",".join(info.get("base_packages") or []),
        "DEW_BASE_REBUILD": str(info.get("base_rebuild") or ""),
    }


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


# --- running -----------------------------------------------------------------------------


def git_commit(root: Path = ROOT) -> tuple[str | None, bool | None]:
    """The checkout's commit and whether tracked files differ from it."""
    head = _run(["git", "-C", str(root), "rev-parse", "HEAD"])
    if head.returncode != 0:
        return None, None
    status = _run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"])
    return head.stdout.strip(), bool(status.stdout.strip())


def git_diff_sha256(root: Path = ROOT) -> str | None:
    """sha256 of `git diff HEAD --binary` (stripped): which uncommitted change a dirty run
    ran. dew.bench.record.capture hashes the same text on the host."""
    diff = _run(["git", "-C", str(root), "diff", "HEAD", "--binary"])
    text = diff.stdout.strip()
    return hashlib.sha256(text.encode()).hexdigest() if diff.returncode == 0 and text else None


_IMAGE_USERS: dict[str, tuple[int, int]] = {}


def image_user(engine: Engine, ref: str) -> tuple[int, int]:
    """The uid and gid of the image's USER (dew's image: dew, 10001)."""
    if ref not in _IMAGE_USERS:
        probe = engine("run", "--rm", *host_run_flags(engine, ref), "--network", "none", ref,
                       "sh", "-c", "id -u; id -g")  # fmt: skip
        ids = probe.stdout.split()
        if probe.returncode != 0 or len(ids) != 2 or not all(i.isdigit() for i in ids):
            raise EngineError(
                f"cannot read the user of {ref} (`id -u` in it: {probe.stderr.strip()})"
            )
        _IMAGE_USERS[ref] = (int(ids[0]), int(ids[1]))
    return _IMAGE_USERS[ref]


def user_flags(engine: Engine, image: Image) -> tuple[list[str], tuple[int, int] | None]:
    """How the container runs as the image's own non-root user, and whom the results
    written through the mounts must be handed back to (None: they already are the caller's).

    A root caller (rootful podman, docker): the image's user, with the directories the
    command writes into handed to it for the run and back to the caller afterwards.
    Rootless podman: the caller's id is mapped onto the image's user (keep-id). Docker
    without root maps nothing per container: there the caller's own (non-root) uid runs."""
    uid, gid = image_user(engine, image.ref)
    if os.geteuid() == 0:
        return ["--user", f"{uid}:{gid}"], (uid, gid)
    if engine.name == "podman":
        return ["--userns", f"keep-id:uid={uid},gid={gid}", "--user", f"{uid}:{gid}"], None
    return ["--user", f"{os.getuid()}:{os.getgid()}"], None


def run_argv(
    engine: Engine,
    image: Image,
    command: Sequence[str],
    *,
    env: Mapping[str, str] = (),
    mounts: Sequence[tuple[Path, str, str]] = (),
    gpu: bool = False,
) -> list[str]:
    """`engine run` for one command in the image, with the checkout's results and the
    persistent XLA compilation cache at IMAGE_XLA_CACHE (the caller passes it to the tool,
    so the record's command shows it).

    The checkout's image holds the stack; the checkout's src/ and tools/ are mounted over
    the copies inside, so a reused image runs the code being benchmarked, and the run
    records the checkout's commit (and, when dirty, the hash of its diff). An image with a
    commit of its own (a materialised stack) runs its own code and records that commit.
    The container runs as the image's user; what it writes belongs to the caller (see
    user_flags)."""
    if image.commit is None:
        commit, dirty = git_commit()
        diff = git_diff_sha256() if dirty else None
    else:
        commit, dirty, diff = image.commit, False, None
    xla_cache = CACHE / "xla"
    xla_cache.mkdir(parents=True, exist_ok=True)
    results = ROOT / "results"
    results.mkdir(exist_ok=True)
    user, hand_back = user_flags(engine, image)
    argv = [engine.name, "run", "--rm", *host_run_flags(engine, image.ref), *user]
    argv += ["--network", "none"]
    # The idle check must see the host's other processes; grain's workers share memory.
    argv += ["--pid=host", "--shm-size=8g"]
    if gpu:
        argv += engine.gpu_flags()
    volumes = []
    if image.commit is None:
        volumes += [(ROOT / "src", f"{IMAGE_ROOT}/src", "ro")]
        volumes += [(ROOT / "tools", f"{IMAGE_ROOT}/tools", "ro")]
    volumes += [
        (results, f"{IMAGE_ROOT}/results", "rw"),
        (xla_cache, IMAGE_XLA_CACHE, "rw"),
        *mounts,
    ]
    volumes = [(Path(host), inside, mode) for host, inside, mode in volumes if Path(host).exists()]
    for host, inside, mode in volumes:
        argv += ["-v", f"{host.resolve()}:{inside}:{mode}"]
    variables = {
        **image.labels_env(),
        "DEW_COMMIT": commit or "unknown",
        "DEW_DIRTY": "1" if dirty else "0",
        **({"DEW_DIFF_SHA256": diff} if diff else {}),
        "HOME": "/tmp",
        **dict(env),
    }
    for key, value in variables.items():
        argv += ["-e", f"{key}={value}"]
    argv += ["-w", IMAGE_ROOT, image.ref, *command]
    if hand_back:
        writable = [(host, inside) for host, inside, mode in volumes if mode == "rw"]
        written = written_dirs(command, writable)
        if written:
            owner = f"{hand_back[0]}:{hand_back[1]}"
            wrapper = [sys.executable, str(Path(__file__).resolve()), "hand-over", owner]
            argv = [*wrapper, *map(str, written), "--", *argv]
    return argv


def written_dirs(command: Sequence[str], volumes: Sequence[tuple[Path, str]]) -> list[Path]:
    """The host directories the command may write into: for every argument (or `--x=` value)
    inside a writable mount, that directory, or the nearest existing one above the file."""
    found: list[Path] = []
    for arg in command:
        for value in {arg, arg.partition("=")[2]} - {""}:
            for host, inside in volumes:
                if value != inside and not value.startswith(inside.rstrip("/") + "/"):
                    continue
                path = host.resolve() / value[len(inside) :].lstrip("/")
                while path != host.resolve() and not path.is_dir():
                    path = path.parent
                found.append(path)
    chosen = sorted(set(found), key=lambda p: len(p.parts))
    return [p for i, p in enumerate(chosen) if not any(p.is_relative_to(q) for q in chosen[:i])]


def _chown_tree(top: Path, frm: int, to: tuple[int, int], dirs_only: bool) -> None:
    """lchown what `frm` owns under `top` (symlinks are not followed)."""
    for folder, subdirs, files in os.walk(top):
        # os.walk does not descend into a linked directory: the link itself is chowned.
        links = [d for d in subdirs if os.path.islink(os.path.join(folder, d))]
        names = [folder] + ([] if dirs_only else [os.path.join(folder, f) for f in files + links])
        for name in names:
            try:
                if os.lstat(name).st_uid == frm:
                    os.chown(name, *to, follow_symlinks=False)
            except OSError:
                pass


def hand_over(argv: Sequence[str]) -> int:
    """`engine.py hand-over UID:GID DIR... -- ENGINE RUN ...`: lend the directories to the
    image's user for the run, run it, then give everything it wrote back to the caller."""
    owner, *rest = argv
    split = rest.index("--")
    dirs, command = [Path(d) for d in rest[:split]], rest[split + 1 :]
    uid, gid = (int(part) for part in owner.split(":"))
    caller = (os.getuid(), os.getgid())
    for folder in dirs:
        _chown_tree(folder, caller[0], (uid, gid), dirs_only=True)
    try:
        return subprocess.call(command)
    except KeyboardInterrupt:
        return 130
    finally:
        for folder in dirs:
            _chown_tree(folder, uid, caller, dirs_only=False)


def to_image_path(host_path: Path) -> str:
    """Where a path under the checkout's results/ appears inside the container."""
    relative = Path(host_path).resolve().relative_to((ROOT / "results").resolve())
    return f"{IMAGE_ROOT}/results/{relative.as_posix()}"


def _interrupt(*_) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    if sys.argv[1:2] == ["hand-over"]:
        # A stopped session must still give the results back: SIGTERM unwinds like Ctrl-C.
        signal.signal(signal.SIGTERM, _interrupt)
        sys.exit(hand_over(sys.argv[2:]))
    sys.exit(f"usage: {sys.argv[0]} hand-over UID:GID DIR... -- COMMAND...")
