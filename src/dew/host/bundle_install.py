"""A dew bundle's install script (the bundle's install.py; `nox -s bundle` copies it there):
installs the bundle's wheels beside a host's own JAX, which it never replaces, on a host
with no network.

    python3.11 install.py [--target DIR]        (default: site/ beside this script)

It refuses in one line, before installing anything, when this Python is not the bundle's,
a host package the bundle needs is missing or older than its lock was resolved against,
pip is missing, or a wheel is missing or damaged. Then `pip install --no-index --no-deps
--target` into a fresh folder that replaces an earlier install of a bundle (and nothing
else), a manifest in it (dew-bundle.json: each package and where it came from, which the
record's package_sources reads), env.sh that appends the folder to PYTHONPATH (the host's
own folders stay first, so its JAX is the one imported), and a check that dew imports with
the host's jax.

Standard library only, and no import of dew: it runs before dew is installed.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
MANIFEST = "bundle.json"  # the bundle's own, beside this script
INSTALLED = "dew-bundle.json"  # written into the target: what the record reads
EXIT_REFUSED = 2  # this host or this invocation cannot take the bundle
EXIT_FAILED = 1  # the bundle is damaged, or pip failed


class Refused(Exception):
    def __init__(self, message: str, code: int = EXIT_REFUSED):
        super().__init__(message)
        self.code = code


class Stopped(BaseException):
    """SIGINT or SIGTERM: raised in the main thread, so the half-made folder is removed on
    the way out; exit 128 + the signal, as a shell reports it."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.code = 128 + signum


# What install.py reads of bundle.json, and the type each must have.
MANIFEST_FIELDS = {"python": str, "lock": str, "host_packages": dict, "host_present": list,
                   "wheels": dict}  # fmt: skip


def read_manifest() -> dict:
    """bundle.json, or Refused (exit 1: the bundle is damaged) naming what is wrong with it:
    missing, cut short, not JSON, a field missing or of another type."""
    path = HERE / MANIFEST
    again = "copy the bundle whole again (or make it anew: nox -s bundle)"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise Refused(f"{path} is missing: the bundle is incomplete; {again}", 1) from None
    except (OSError, UnicodeDecodeError) as error:
        raise Refused(f"{path} cannot be read ({error}); {again}", 1) from None
    if not text.strip():
        raise Refused(f"{path} is empty; {again}", 1)
    try:
        manifest = json.loads(text)
    except ValueError as error:
        raise Refused(f"{path} is damaged (not JSON: {error}); {again}", 1) from None
    if not isinstance(manifest, dict):
        raise Refused(f"{path} is no bundle manifest (not a JSON object); {again}", 1)
    for field, kind in MANIFEST_FIELDS.items():
        if not isinstance(manifest.get(field), kind):
            got = "missing" if field not in manifest else type(manifest[field]).__name__
            raise Refused(f"{path}: {field!r} should be a {kind.__name__} ({got}); {again}", 1)
    return manifest


def stop(signum: int, frame) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # one stop: the way out is not cut short
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Stopped(signum)


def canonical(name: str) -> str:
    """A distribution's name as PEP 503 writes it (and the record's `packages`)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def release(version: str) -> tuple[int, ...]:
    """The leading release numbers of a version ("0.10.2rc1" -> (0, 10, 2))."""
    numbers = []
    for part in version.split("."):
        digits = re.match(r"\d+", part)
        if not digits:
            break
        numbers.append(int(digits.group()))
        if digits.group() != part:
            break
    return tuple(numbers)


def wheel_distribution(filename: str) -> tuple[str, str]:
    """(name, version) from a wheel's file name (PEP 427: name-version-...whl)."""
    name, version = filename.split("-")[:2]
    return canonical(name), version


def found_on_path(path: list[str]) -> dict[str, tuple[str, str]]:
    """distribution -> (version, the sys.path folder it is in), the first of a name winning
    as imports do."""
    found: dict[str, tuple[str, str]] = {}
    for entry in filter(None, path):
        for dist in importlib.metadata.distributions(path=[entry]):
            name = canonical(dist.metadata["Name"] or "")
            if name and name not in found:
                found[name] = (dist.version, str(Path(entry).resolve()))
    return found


def check_python(manifest: dict) -> None:
    here = "{}.{}".format(*sys.version_info[:2])
    if here != manifest["python"]:
        raise Refused(
            f"this bundle's wheels are for Python {manifest['python']}; this is "
            f"{sys.version.split()[0]} ({sys.executable}): run install.py with the host's "
            f"python{manifest['python']}, or build a bundle for {here} (nox -s bundle -- "
            f"--python {here})"
        )


def imported(name: str) -> tuple[str, str] | None:
    """A host package without a .dist-info (copied onto the path rather than installed):
    (its module's __version__, the sys.path folder it imports from); None when it does not
    import or names no version."""
    try:
        module = importlib.import_module(name.replace("-", "_"))
    except Exception:  # absent, or broken in a way the refusal's line covers
        return None
    version, where = getattr(module, "__version__", None), getattr(module, "__file__", None)
    if not isinstance(version, str) or not where:
        return None
    return version, str(Path(where).resolve().parents[1])


def check_host(manifest: dict, found: dict[str, tuple[str, str]], target: Path) -> dict:
    """The host's packages the bundle needs, each with its version and folder; a missing or
    too old one refused."""
    host = {}
    needed = {**manifest["host_packages"], **{name: None for name in manifest["host_present"]}}
    for name, lowest in needed.items():
        version, where = found.get(name) or imported(name) or (None, None)
        if version is not None and Path(where) == target:
            version = None  # an earlier bundle's, not the host's
        if version is None:
            raise Refused(
                f"no {name} on this Python's path: the bundle installs beside a host's own "
                f"JAX and brings none; put the folder that holds the host's {name} on "
                f"PYTHONPATH and run install.py again"
            )
        if lowest is not None and release(version) < release(lowest):
            raise Refused(
                f"the host's {name} is {version} ({where}); this bundle needs {name}>={lowest} "
                f"(its lock, {manifest['lock']}, was resolved against it)"
            )
        host[name] = {"version": version, "location": where}
    return host


def check_wheels(manifest: dict) -> list[Path]:
    wheels = []
    for filename, digest in sorted(manifest["wheels"].items()):
        wheel = HERE / "wheels" / filename
        if not wheel.is_file():
            raise Refused(f"wheel {filename} is missing from the bundle ({wheel.parent})", 1)
        if hashlib.sha256(wheel.read_bytes()).hexdigest() != digest:
            raise Refused(f"wheel {filename} does not match its sha256 in {MANIFEST}", 1)
        wheels.append(wheel)
    return wheels


def pip_install(wheels: list[Path], into: Path) -> None:
    # The bundle's wheels and nothing else: no index, no dependencies, no pip config of this
    # machine's (an index URL, constraints) taking part.
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull}
    if subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True,
                      env=env).returncode != 0:  # fmt: skip
        raise Refused(f"no pip in this Python ({sys.executable}): install.py installs with it")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--quiet",
         "--disable-pip-version-check", "--no-warn-script-location", "--target", str(into),
         *map(str, wheels)],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    if done.returncode != 0:
        errors = [line for line in done.stderr.splitlines() if line.startswith("ERROR")]
        last = (errors or done.stderr.strip().splitlines() or ["no output"])[-1]
        raise Refused(f"pip install of the bundle's wheels failed: {last}", EXIT_FAILED)


def write_environment(manifest: dict, target: Path) -> Path:
    """env.sh: the folder appended to PYTHONPATH (after the host's), and the commit the
    bundle's dew was built from (a record made with the installed dew names it)."""
    lines = [
        "# Source this file: the bundle's packages after the host's own on the path.",
        f'export PYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}{target}"',
    ]
    if manifest.get("commit"):
        lines.append(f"export DEW_COMMIT={shlex.quote(manifest['commit'])}")
        lines.append(f"export DEW_DIRTY={'1' if manifest.get('dirty') else '0'}")
        if manifest.get("diff_sha256"):
            lines.append(f"export DEW_DIFF_SHA256={shlex.quote(manifest['diff_sha256'])}")
    env_sh = target / "env.sh"
    env_sh.write_text("\n".join(lines) + "\n")
    return env_sh


def check_imports(target: Path, host: dict) -> str:
    """dew, flax and optax import with the folder appended, and jax is the host's: the
    version the bundle found, from the host's folder."""
    path = os.pathsep.join(p for p in [os.environ.get("PYTHONPATH", ""), str(target)] if p)
    probe = "import json, dew, flax, optax, jax; print(json.dumps([jax.__version__, jax.__file__]))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": path})  # fmt: skip
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise Refused(f"dew does not import after the install: {last}", EXIT_FAILED)
    version, location = json.loads(done.stdout.strip().splitlines()[-1])
    if version != host["jax"]["version"] or Path(location).is_relative_to(target):
        raise Refused(f"jax {version} from {location} is imported, not the host's", EXIT_FAILED)
    return version


def install(target: Path) -> tuple[int, Path, dict]:
    manifest = read_manifest()
    check_python(manifest)
    found = found_on_path(sys.path)
    host = check_host(manifest, found, target)
    wheels = check_wheels(manifest)
    if target.exists() and not (target / INSTALLED).is_file():
        raise Refused(f"{target} exists and is no bundle's install: choose another --target")
    fresh = target.with_name(f".{target.name}.installing-{os.getpid()}")
    shutil.rmtree(fresh, ignore_errors=True)
    try:
        pip_install(wheels, fresh)
        installed = dict(wheel_distribution(wheel.name) for wheel in wheels)
        record = {key: manifest.get(key) for key in ("lock", "lock_sha256", "commit", "dirty")}
        record.update(installed=installed, host=host, python=sys.version.split()[0])
        (fresh / INSTALLED).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
        if target.exists():
            shutil.rmtree(target)
        fresh.rename(target)
    finally:
        shutil.rmtree(fresh, ignore_errors=True)
    write_environment(manifest, target)
    # PYTHONPATH's folders come before the target (env.sh appends it), and the interpreter's
    # own site-packages after it: only a copy in the former is imported instead.
    before = found_on_path(os.environ.get("PYTHONPATH", "").split(os.pathsep))
    for name in sorted(installed.keys() & before.keys()):  # the record names the host's copy
        version, where = before[name]
        print(f"note: the host's {name} {version} ({where}) is imported before the bundle's "
              f"{installed[name]}", file=sys.stderr)  # fmt: skip
    check_imports(target, host)
    return len(wheels), target, host


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="install.py", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--target",
        type=Path,
        default=HERE / "site",
        help="the folder to install into (default: site/ beside install.py)",
    )
    args = parser.parse_args(argv)
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, stop)
    try:
        count, target, host = install(args.target.resolve())
    except Refused as refused:
        print(f"install.py: error: {refused}", file=sys.stderr)
        return refused.code
    except Stopped as stopped:
        print(f"install.py: error: interrupted ({stopped}) before the install was checked; "
              "run install.py again to make it whole", file=sys.stderr)  # fmt: skip
        return stopped.code
    beside = ", ".join(f"{name} {info['version']}" for name, info in host.items())
    print(f"installed {count} wheels into {target} beside the host's {beside}")
    print(f"use it: . {target / 'env.sh'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
