"""The package imports and every pin, in pyproject.toml and in each lock, is the published stack."""

import pathlib
import re
import tomllib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PUBLISHED = {"jax": "0.11.1", "jaxlib": "0.11.1", "flax": "0.12.9", "optax": "0.2.8"}
LOCKS = sorted((ROOT / "locks").glob("*.txt"))


def test_package_imports():
    import dew

    assert dew.__version__


def test_pyproject_pins_the_published_stack_exactly():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["requires-python"] == ">=3.12"
    pins = dict(
        re.fullmatch(r"([\w.-]+)==([\w.]+)", dep).groups() for dep in project["dependencies"]
    )
    for name, version in PUBLISHED.items():
        assert pins[name] == version
    for extra in ("cuda12", "cuda13"):
        # k8s: JAX's Kubernetes client, for the manifests' default detection
        assert project["optional-dependencies"][extra] == [f"jax[{extra},k8s]==0.11.1"]


def test_the_locks_are_the_three_measured_stacks_and_the_host_venv():
    assert [lock.stem for lock in LOCKS] == ["cpu", "cuda12", "cuda13", "dev"]


REPORT_LIBRARIES = ("matplotlib", "jinja2", "ruptures")


@pytest.mark.parametrize("lock", LOCKS, ids=lambda p: p.stem)
def test_the_report_libraries_are_outside_the_measured_stacks(lock):
    """A plotting-library bump must not change a record's stack: the images hold what a
    measurement imports; the host venv (dev) adds the report libraries."""
    names = {req.split("==")[0].lower() for req in parse_lock(lock)}
    inside = sorted(names & set(REPORT_LIBRARIES))
    assert inside == (sorted(REPORT_LIBRARIES) if lock.stem == "dev" else []), lock.name


def parse_lock(path: pathlib.Path) -> dict[str, list[str]]:
    """Requirement -> its hashes, from a `--generate-hashes` file with continuation lines."""
    entries: dict[str, list[str]] = {}
    current = None
    for line in path.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        if not line.startswith(" "):
            current = line.rstrip(" \\")
            assert re.fullmatch(r"[\w.-]+(\[[\w,-]+\])?==[\w.+-]+( ; .+)?", current), current
            entries[current] = []
        else:
            entries[current] += re.findall(r"--hash=sha256:([0-9a-f]{64})", line)
    return entries


@pytest.mark.parametrize("lock", LOCKS, ids=lambda p: p.stem)
def test_every_lock_line_is_pinned_and_hashed(lock):
    entries = parse_lock(lock)
    assert entries
    for requirement, hashes in entries.items():
        assert hashes, f"{lock.name}: {requirement} has no sha256 hash"


@pytest.mark.parametrize("lock", LOCKS, ids=lambda p: p.stem)
def test_every_lock_carries_the_published_versions(lock):
    versions = {req.split("==")[0].lower(): req.split("==")[1] for req in parse_lock(lock)}
    for name, version in PUBLISHED.items():
        assert versions[name] == version, f"{lock.name}: {name}=={versions.get(name)}"
    if lock.stem.startswith("cuda"):
        assert versions[f"jax-{lock.stem}-plugin"] == "0.11.1"
