"""package_sources: each recorded package's origin, told apart by where it was imported
from: a dew bundle's install (its manifest names the package and the lock), the venv the
Python runs in, or the host; the first folder on the path that holds a name wins."""

import json
import sys
from pathlib import Path

from dew.bench.record import provenance
from dew.bench.record.capture import capture
from dew.host import bundle_install


def installed(folder: Path, name: str, version: str) -> Path:
    """A distribution as pip leaves it in a --target folder: its .dist-info/METADATA."""
    info = folder / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return folder


def test_bundle_host_and_environment_are_told_apart(tmp_path):
    host = installed(installed(tmp_path / "host", "jax", "0.10.2"), "flax", "0.12.7")
    bundle = installed(installed(tmp_path / "venv" / "bundle", "flax", "0.12.8"), "optax", "0.2.8")
    (bundle / provenance.BUNDLE_MANIFEST).write_text(json.dumps({
        "lock": "locks/tpu-host.txt", "lock_sha256": "ab" * 32,
        "installed": {"flax": "0.12.8", "optax": "0.2.8"},
    }))  # fmt: skip
    venv = installed(tmp_path / "venv" / "site-packages", "pydantic", "2.14.4")
    path = [str(host), str(bundle), str(venv)]
    sources = provenance.package_sources(
        ["jax", "flax", "optax", "pydantic", "absent"], path, prefix=str(tmp_path / "venv")
    )
    assert sources == {
        "jax": {"source": "host", "location": str(host)},
        "flax": {"source": "host", "location": str(host)},  # the host's comes first: imported
        "optax": {"source": "bundle", "location": str(bundle),
                  "lock": "locks/tpu-host.txt sha256:abababababababab"},
        "pydantic": {"source": "environment", "location": str(venv)},
    }  # fmt: skip


def test_outside_a_venv_the_pythons_own_site_packages_are_the_hosts(tmp_path):
    own = installed(tmp_path / "site-packages", "numpy", "2.4.6")
    sources = provenance.package_sources(["numpy"], [str(own)], prefix="")
    assert sources == {"numpy": {"source": "host", "location": str(own)}}


def test_the_record_says_where_its_packages_came_from():
    environment = capture()
    sources = environment.package_sources
    assert set(sources) == {name for name, version in environment.packages.items() if version}
    in_venv = sys.prefix != sys.base_prefix
    assert sources["jax"].source == ("environment" if in_venv else "host")
    assert Path(sources["jax"].location).is_dir()


def test_the_install_script_writes_the_manifest_the_record_reads():
    assert bundle_install.INSTALLED == provenance.BUNDLE_MANIFEST
