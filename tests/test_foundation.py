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
    extras = project["optional-dependencies"]
    pins = dict(re.fullmatch(r"([\w.-]+)==([\w.]+)", dep).groups() for dep in extras["published"])
    for name, version in PUBLISHED.items():
        assert pins[name] == version
    for extra in ("cuda12", "cuda13"):
        # k8s: JAX's Kubernetes client, for the manifests' default detection
        assert extras[extra] == [f"jax[{extra},k8s]==0.11.1"]
    assert extras["tpu"] == ["jax[tpu]==0.11.1", "libtpu==0.0.46.3"]


def test_pyproject_needs_ranges_that_take_the_tpu_host_and_the_published_stack():
    """pip installs dew beside a TPU host's own JAX (Python 3.11, jax 0.10.2, flax 0.12.8)
    and on the published stack: every dependency is a lower bound that both meet."""
    from dew.host.tpu_host import BESIDE_HOST, HOST_PACKAGES

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["requires-python"] == ">=3.11"
    lowest = dict(
        re.fullmatch(r"([\w.-]+)>=([\w.]+)", dep).groups() for dep in project["dependencies"]
    )
    published = dict(dep.split("==") for dep in project["optional-dependencies"]["published"])
    assert lowest.keys() == published.keys()
    release = lambda version: tuple(int(part) for part in version.split("."))  # noqa: E731
    host = {**published, **HOST_PACKAGES, **BESIDE_HOST}
    for name, bound in lowest.items():
        assert release(host[name]) >= release(bound) <= release(published[name]), name


def test_the_locks_are_the_measured_stacks_the_host_venv_and_the_tpu_host():
    assert [lock.stem for lock in LOCKS] == [
        "cpu",
        "cuda12",
        "cuda13",
        "dev",
        "tpu-host-jax",
        "tpu-host",
        "tpu",
    ]


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
    """Every lock of a stack dew publishes. tpu-host carries flax 0.12.8 and none of the
    host's own packages (its JAX, numpy, scipy), which the bundle never replaces; those are
    tpu-host-jax's, at the versions the host was found with."""
    from dew.host.tpu_host import BESIDE_HOST, HOST_JAX_REQUIREMENTS, HOST_PACKAGES

    versions = {req.split("==")[0].lower(): req.split("==")[1] for req in parse_lock(lock)}
    if lock.stem == "tpu-host-jax":  # the host's own, as found: what tpu-host-smoke is on CPU
        assert versions.items() >= HOST_PACKAGES.items()
        assert versions.keys() == {*HOST_PACKAGES, *HOST_JAX_REQUIREMENTS}
        return
    if lock.stem == "tpu-host":
        assert versions["flax"] == BESIDE_HOST["flax"]
        assert versions["optax"] == PUBLISHED["optax"]
        assert not versions.keys() & {*HOST_PACKAGES, *HOST_JAX_REQUIREMENTS, "libtpu"}
        return
    for name, version in PUBLISHED.items():
        assert versions[name] == version, f"{lock.name}: {name}=={versions.get(name)}"
    if lock.stem.startswith("cuda"):
        assert versions[f"jax-{lock.stem}-plugin"] == "0.11.1"
    if lock.stem == "tpu":
        assert versions["libtpu"] == "0.0.46.3"


def test_python_version_leaves_python3_a_3_11_and_names_both_pythons():
    """pyenv's `python3` in the checkout is the file's first installed version: the oldest
    dew runs on (a TPU host's cp311 JAX loads into it), never a 3.12 beside the host's 3.11;
    nox's sessions find `python3.12` and `python3.11` by name."""
    lines = (ROOT / ".python-version").read_text().splitlines()
    versions = [line.split()[0] for line in lines if line.strip() and not line.startswith("#")]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert versions == [project["requires-python"].removeprefix(">="), "3.12"]
