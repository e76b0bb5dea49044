"""Code from outside dew in a stack's image: the package that holds a user's architecture or
`--step` factory (docs/own-models.md), given to `nox -s ab` and `nox -s reproduce` as a
wheel, a project directory, or a git checkout at a commit (`PATH@REV`).

The host turns each source into a wheel (`prepare`), the image's own pip installs the
wheels into a folder of the run (`install`: its Python decides what fits it, not the
host's), and every measured process sees that folder read-only at OUTSIDE_SITE through
PYTHONPATH, so the entry points and the modules are found as from any installed package
and dew.bench.record.outside names the package, its version and its commit in the record.
dew's image itself is left as it is: one image serves every version of the user's code.

Every failure a user can fix is an `Unreproducible`: one line, exit 2.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from dew.bench.record import stack  # standard library only
from dew.host.runner import run_argv
from dew.host.stack_images import Unreproducible, git

OUTSIDE_SITE = "/opt/outside"  # where the installed packages appear in the container
_WHEELS_INSIDE = "/opt/outside-wheels"
BUILD_TIMEOUT_S = 600
GIT_TIMEOUT_S = 60


@dataclass
class Package:
    """One source, built: the wheel and what it is."""

    given: str  # as the user wrote it, for messages
    wheel: Path
    distribution: str  # PEP 503 normalised, as the record's `packages` writes it
    version: str
    commit: str | None = None  # the git commit it was built from; None for a wheel or plain folder
    repository: Path | None = None  # the git work tree it came from
    subdirectory: str = ""  # the project's folder inside that work tree

    def describe(self) -> dict:
        return {
            "given": self.given,
            "distribution": self.distribution,
            "version": self.version,
            "commit": self.commit,
        }

    def label(self) -> str:
        at = f" @ {self.commit[:7]}" if self.commit else ""
        return f"{self.distribution} {self.version}{at}"


def split_source(given: str) -> tuple[Path, str | None]:
    """`PATH` or `PATH@REV` (a path that exists as written keeps any `@` in it)."""
    path = Path(given).expanduser()
    if path.exists() or "@" not in given:
        return path, None
    where, _, rev = given.rpartition("@")
    if not rev:
        raise Unreproducible(f"--outside {given!r}: nothing after @; give PATH@REV")
    return Path(where).expanduser(), rev


def prepare(given: str, wheels: Path, python: str, wanted_commits: tuple[str, ...] = ()) -> Package:
    """The wheel of one source, written into `wheels`.

    A `.whl` is taken as it is. A folder in a git work tree is built from a commit: REV when
    given, else the first of `wanted_commits` (a record's) that the work tree has, else
    HEAD, which must then be clean (what ran must be a commit the record can name). Any
    other folder is built as it is. `python` builds: its setuptools (or whichever backend
    the project names) must be installed, since nothing is downloaded."""
    path, rev = split_source(given)
    if not path.exists():
        raise Unreproducible(f"--outside {given}: no such file or folder")
    wheels.mkdir(parents=True, exist_ok=True)
    if path.is_file():
        if rev is not None or path.suffix != ".whl":
            raise Unreproducible(f"--outside {given}: a file must be a wheel (.whl), with no @REV")
        wheel = Path(shutil.copy2(path, wheels / path.name))
        return Package(given, wheel, *wheel_name_version(wheel))
    top = _git(path, "rev-parse", "--show-toplevel")
    if top is None:
        if rev is not None:
            raise Unreproducible(
                f"--outside {given}: {path} is in no git work tree: @{rev} is no commit"
            )
        with tempfile.TemporaryDirectory(prefix="dew-outside-") as tmp:
            ignore = shutil.ignore_patterns("build", "*.egg-info", "__pycache__", ".git")
            source = shutil.copytree(path, Path(tmp) / "source", ignore=ignore)
            wheel = build_wheel(source, wheels, python, given)
        return Package(given, wheel, *wheel_name_version(wheel))
    repository = Path(top)
    relative = path.resolve().relative_to(repository.resolve()).as_posix()
    subdirectory = "" if relative == "." else relative  # the project's folder in the tree
    commit = _choose_commit(repository, path, rev, wanted_commits, given)
    with tempfile.TemporaryDirectory(prefix="dew-outside-") as tmp:
        tree = Path(tmp) / "tree"
        _export(repository, commit, tree, given)
        wheel = build_wheel(tree / subdirectory, wheels, python, given)
    return Package(
        given,
        wheel,
        *wheel_name_version(wheel),
        commit=commit,
        repository=repository,
        subdirectory=subdirectory,
    )


def _choose_commit(
    repository: Path, folder: Path, rev: str | None, wanted: tuple[str, ...], given: str
) -> str:
    """REV, else the first wanted commit the work tree has, else a clean HEAD (the project's
    folder only: a change elsewhere in the work tree is not in the wheel)."""
    if rev is not None:
        commit = _git(repository, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
        if not commit:
            raise Unreproducible(
                f"--outside {given}: {repository} has no commit {rev}; git fetch it"
            )
        return commit
    if wanted:
        for want in wanted:
            commit = _git(repository, "rev-parse", "--verify", "--quiet", f"{want}^{{commit}}")
            if commit:
                return commit
        shown = ", ".join(want[:7] for want in wanted)
        raise Unreproducible(
            f"--outside {given}: the record ran commit {shown} of it, which {repository} lacks; "
            "git fetch it, or give PATH@REV to run another"
        )
    if _git(folder, "status", "--porcelain", "--untracked-files=no", "--", "."):
        raise Unreproducible(
            f"--outside {given}: {folder} has uncommitted changes, which no record could "
            "name; commit them, or give PATH@REV (e.g. @HEAD) to run a commit"
        )
    return _git(repository, "rev-parse", "HEAD") or ""


def _export(repository: Path, commit: str, into: Path, given: str) -> None:
    """The commit's tree, from `git archive` (the user's work tree is only read)."""
    into.mkdir(parents=True)
    archive = into.parent / "tree.tar"
    with open(archive, "wb") as out:
        done = subprocess.run(
            ["git", "-C", str(repository), "archive", "--format=tar", commit],
            stdout=out,
            stderr=subprocess.PIPE,
            timeout=GIT_TIMEOUT_S,
        )
    if done.returncode != 0:
        why = _last_line(done.stderr)
        raise Unreproducible(f"--outside {given}: git archive {commit[:7]}: {why}")
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")


def build_wheel(source: Path, wheels: Path, python: str, given: str) -> Path:
    """`pip wheel` of a project folder, offline, with the building Python's own backend."""
    if not any((source / name).is_file() for name in ("pyproject.toml", "setup.py")):
        raise Unreproducible(
            f"--outside {given}: no pyproject.toml or setup.py, no package to build"
        )
    offline = ["--no-deps", "--no-build-isolation", "--no-index", "--disable-pip-version-check"]
    with tempfile.TemporaryDirectory(prefix="dew-wheel-") as out:
        argv = [python, "-m", "pip", "wheel", *offline, "--quiet", "--wheel-dir", out, str(source)]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            why = f"building its wheel took over {BUILD_TIMEOUT_S} s"
            raise Unreproducible(f"--outside {given}: {why}") from None
        made = sorted(Path(out).glob("*.whl"))
        if done.returncode != 0 or len(made) != 1:
            raise Unreproducible(
                f"--outside {given}: cannot build its wheel here "
                f"({_last_line(done.stderr or done.stdout)}); build it yourself "
                "(python -m build --wheel) and give the .whl"
            )
        return Path(shutil.move(made[0], wheels / made[0].name))


def wheel_name_version(wheel: Path) -> tuple[str, str]:
    """The distribution (normalised) and version a wheel's METADATA states."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            metadata = next(
                name
                for name in archive.namelist()
                if re.fullmatch(r"[^/]+\.dist-info/METADATA", name)
            )
            text = archive.read(metadata).decode("utf-8", "replace")
    except (OSError, zipfile.BadZipFile, StopIteration) as error:
        why = error or "no METADATA"
        raise Unreproducible(f"{wheel.name} is not a readable wheel ({why})") from None
    fields = dict(re.findall(r"^(Name|Version): *(.+?)\s*$", text, flags=re.MULTILINE))
    if "Name" not in fields or "Version" not in fields:
        raise Unreproducible(f"{wheel.name}: its METADATA names no Name or Version")
    return stack.distribution_name(fields["Name"]), fields["Version"]


def install(engine, image, packages: list[Package], site: Path) -> None:
    """The wheels installed by the image's own pip into `site` (mounted in; run_argv hands
    what is written there back to the caller). Each built from a commit then says so in its
    PEP 610 direct_url.json, as pip itself writes it for `git+URL@commit` (which the image,
    having no git, cannot do), and dew.bench.record.outside reads the commit from there."""
    if not packages:
        return
    site.mkdir(parents=True, exist_ok=True)
    wheels = packages[0].wheel.parent
    inside = [f"{_WHEELS_INSIDE}/{package.wheel.name}" for package in packages]
    offline = ["--no-deps", "--no-index", "--disable-pip-version-check"]
    command = ["python", "-m", "pip", "install", *offline, "--target", OUTSIDE_SITE, *inside]
    argv = run_argv(
        engine, image, command, mounts=[(wheels, _WHEELS_INSIDE, "ro"), (site, OUTSIDE_SITE, "rw")]
    )
    done = subprocess.run(argv, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    if done.returncode != 0:
        raise Unreproducible(
            f"the image's pip cannot install {', '.join(p.wheel.name for p in packages)}: "
            f"{_last_line(done.stderr or done.stdout)}"
        )
    for package in packages:
        if package.commit:
            _write_direct_url(site, package)


def _write_direct_url(site: Path, package: Package) -> None:
    # A .dist-info folder is NAME-VERSION.dist-info with NAME's own dashes as underscores.
    dist_infos = [
        path
        for path in site.glob("*.dist-info")
        if stack.distribution_name(path.name.split("-", 1)[0]) == package.distribution
    ]
    if not dist_infos:
        raise Unreproducible(f"{package.wheel.name} installed no {package.distribution} .dist-info")
    for dist_info in dist_infos:
        origin = {
            "url": package.repository.resolve().as_uri(),
            "vcs_info": {"vcs": "git", "commit_id": package.commit},
        }
        if package.subdirectory:
            origin["subdirectory"] = package.subdirectory
        (dist_info / "direct_url.json").write_text(json.dumps(origin) + "\n")


def site_env(site: Path | None) -> dict[str, str]:
    """What a measured process needs to see the packages installed in `site` (None: none)."""
    return {"PYTHONPATH": OUTSIDE_SITE} if site is not None else {}


def site_mounts(site: Path | None) -> list[tuple[Path, str, str]]:
    """`site` mounted read-only where site_env points (None: no mount)."""
    return [(site, OUTSIDE_SITE, "ro")] if site is not None else []


def _git(where: Path, *args: str) -> str | None:
    """stacks.git in `where`: its output, or None when git answers otherwise."""
    done = git(*args, root=where)
    return done.stdout.strip() if done.returncode == 0 else None


def _last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def prepare_all(
    sources: list[str],
    wheels: Path,
    python: str,
    environment: dict | None = None,
    origin: str = "",
) -> tuple[list[Package], list[str]]:
    """Every source's wheel and, for a record's stack (`environment`), what of the record's
    outside packages they do not match (lines); a package the record used and no source
    gives is refused (one line): its rows could not run."""
    recorded = stack.outside_packages(environment or {})
    wanted = tuple(item["commit"] for item in recorded.values() if item.get("commit"))
    packages = [prepare(given, wheels, python, wanted) for given in sources]
    names = [package.distribution for package in packages]
    doubled = sorted({name for name in names if names.count(name) > 1})
    if doubled:
        shown = ", ".join(doubled)
        raise Unreproducible(f"--outside gives {shown} more than once; give each package once")
    if environment is None:
        return packages, []
    missing, lines = stack.outside_differences(environment, [p.describe() for p in packages])
    if missing:
        raise Unreproducible(
            f"{origin} used {', '.join(missing)} from outside dew, which dew's image lacks: give "
            "it with --outside PATH[@REV] (its git checkout or folder) or --outside WHEEL"
        )
    return packages, lines


def keep(packages: list[Package], into: Path) -> None:
    """The wheels moved into the run's folder (beside the records they made)."""
    into.mkdir(parents=True, exist_ok=True)
    for package in packages:
        package.wheel = Path(shutil.move(package.wheel, into / package.wheel.name))
