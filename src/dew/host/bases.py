"""The base an image builds on: the default pulled one, or the offline Debian base built
with debootstrap from this machine's apt archive; what a base is (suite, archive snapshot,
packages) and how it comes back, for a record; which Python it has.
"""

from __future__ import annotations

import email.utils
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from dew.host.engine import (
    CACHE,
    Engine,
    EngineError,
    base_digest,
    host_run_flags,
    image_exists,
    image_labels,
    last_build_note,
    record_build_seconds,
    run_captured,
)

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
        result = run_captured(
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


def base_variables(info: dict) -> dict[str, str]:
    """base_record's fields as the DEW_BASE_* variables (build arguments of the same names
    without DEW_): the package list as name=version,name=version,..."""
    return {
        "DEW_BASE_SUITE": str(info.get("base_suite") or ""),
        "DEW_BASE_SNAPSHOT": str(info.get("base_snapshot") or ""),
        "DEW_BASE_PACKAGES": ",".join(info.get("base_packages") or []),
        "DEW_BASE_REBUILD": str(info.get("base_rebuild") or ""),
    }
