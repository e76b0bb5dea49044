"""The offline bundle's install.py (dew.host.bundle_install) on a real bundle folder: it
refuses in one line, before installing anything, the wrong Python, a host without jax or
with one too old, a missing or damaged wheel and a folder that is not a bundle's; it
installs a real wheel with pip beside the host's jax, leaves the manifest the record reads
and an env.sh that appends the folder to PYTHONPATH. `nox -s bundle`'s arguments; and
what tpu-host-smoke demands of its record.
"""

import hashlib
import importlib.metadata
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from dew.bench.record import provenance
from dew.host import bundle_install
from dew.host.sessions import bundle, tpu_host_smoke

HERE = "{}.{}".format(*sys.version_info[:2])
JAX = importlib.metadata.version("jax")


def tiny_wheel(folder: Path) -> Path:
    """A real wheel (PEP 427) of one module: what pip installs from a bundle."""
    wheel = folder / "tinypkg-1.0-py3-none-any.whl"
    files = {
        "tinypkg/__init__.py": "VALUE = 1\n",
        "tinypkg-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n",
        "tinypkg-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\n"
        "Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{name},,\n" for name in files) + "tinypkg-1.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in {**files, "tinypkg-1.0.dist-info/RECORD": record}.items():
            archive.writestr(name, text)
    return wheel


def make_bundle(root: Path, **changes) -> Path:
    """A bundle folder as `nox -s bundle` writes it, around one tiny wheel."""
    (root / "wheels").mkdir(parents=True)
    wheel = tiny_wheel(root / "wheels")
    shutil.copyfile(bundle_install.__file__, root / "install.py")
    manifest = {
        "python": HERE, "lock": "locks/tpu-host.txt", "lock_sha256": "cd" * 32,
        "commit": "0123abcd" * 5, "dirty": False, "diff_sha256": None,
        "host_packages": {"jax": "0.10.2"}, "host_present": ["ml-dtypes"],
        "wheels": {wheel.name: hashlib.sha256(wheel.read_bytes()).hexdigest()},
        **changes,
    }  # fmt: skip
    (root / "bundle.json").write_text(json.dumps(manifest))
    return root / "install.py"


def run(install: Path, *args: str, python=(sys.executable,), pythonpath=None):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update({"PYTHONPATH": str(pythonpath)} if pythonpath else {})
    return subprocess.run([*python, str(install), *args], capture_output=True, text=True, env=env)


def one_line(done, code: int) -> str:
    assert done.returncode == code, done.stderr
    assert done.stdout == "" and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("install.py: error: ")
    return done.stderr


def test_it_installs_beside_the_hosts_jax_and_leaves_what_the_record_reads(tmp_path):
    install = make_bundle(tmp_path / "bundle")
    target = tmp_path / "site"
    done = run(install, "--target", str(target))
    assert done.returncode == 0, done.stderr
    assert f"installed 1 wheels into {target} beside the host's jax {JAX}" in done.stdout
    assert (target / "tinypkg" / "__init__.py").is_file()
    env_sh = (target / "env.sh").read_text()
    assert f'export PYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}{target}"' in env_sh
    assert "export DEW_COMMIT=" + "0123abcd" * 5 in env_sh
    sources = provenance.package_sources(["tinypkg"], [str(target)])
    assert sources == {"tinypkg": {"source": "bundle", "location": str(target),
                                   "lock": "locks/tpu-host.txt sha256:" + "cd" * 8}}  # fmt: skip
    again = run(install, "--target", str(target))  # an earlier install is replaced whole
    assert again.returncode == 0, again.stderr


def test_a_host_package_copied_in_without_metadata_is_read_from_its_module(tmp_path):
    """A host folder may hold a package without its .dist-info: its __version__ and folder."""
    host = tmp_path / "host"
    (host / "hostonly").mkdir(parents=True)
    (host / "hostonly" / "__init__.py").write_text('__version__ = "2.0.1"\n')
    install = make_bundle(tmp_path / "bundle", host_packages={"jax": "0.10.2", "hostonly": "2.0"})
    done = run(install, "--target", str(tmp_path / "site"), pythonpath=host)
    assert done.returncode == 0, done.stderr
    manifest = json.loads((tmp_path / "site" / provenance.BUNDLE_MANIFEST).read_text())
    assert manifest["host"]["hostonly"] == {"version": "2.0.1", "location": str(host)}
    old = make_bundle(tmp_path / "older", host_packages={"hostonly": "2.1"})
    err = one_line(run(old, pythonpath=host), 2)
    assert f"the host's hostonly is 2.0.1 ({host}); this bundle needs hostonly>=2.1" in err


def test_the_wrong_python_is_refused(tmp_path):
    install = make_bundle(tmp_path / "bundle", python="3.10")
    err = one_line(run(install), 2)
    assert f"this bundle's wheels are for Python 3.10; this is {sys.version.split()[0]}" in err
    assert not (tmp_path / "bundle" / "site").exists()


def test_a_host_without_jax_is_refused(tmp_path):
    # -S: no site-packages, so no jax on the path (a host whose folder is not on PYTHONPATH)
    err = one_line(run(make_bundle(tmp_path / "bundle"), python=(sys.executable, "-S")), 2)
    assert "no jax on this Python's path: the bundle installs beside a host's own JAX" in err


def test_a_jax_too_old_is_refused(tmp_path):
    install = make_bundle(tmp_path / "bundle", host_packages={"jax": "99.1"})
    err = one_line(run(install), 2)
    assert f"the host's jax is {JAX} (" in err and "this bundle needs jax>=99.1" in err


@pytest.mark.parametrize("damage", ["missing", "changed"])
def test_a_missing_or_damaged_wheel_is_refused(tmp_path, damage):
    install = make_bundle(tmp_path / "bundle")
    (wheel,) = (tmp_path / "bundle" / "wheels").glob("*.whl")
    if damage == "missing":
        wheel.unlink()
    else:
        wheel.write_bytes(wheel.read_bytes() + b"\0")
    err = one_line(run(install), 1)
    assert f"wheel {wheel.name} " in err
    assert not (tmp_path / "bundle" / "site").exists()


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        ("missing", "is missing: the bundle is incomplete"),
        ("cut", "is damaged (not JSON: "),
        ("empty", "is empty"),
        ("a list", "is no bundle manifest (not a JSON object)"),
        ("no wheels", "'wheels' should be a dict (missing)"),
        ("python a number", "'python' should be a str (float)"),
    ],
)
def test_a_damaged_bundle_json_is_one_line(tmp_path, damage, said):
    # Issue 63: a cut, missing or malformed bundle.json was a traceback
    install = make_bundle(tmp_path / "bundle")
    manifest = tmp_path / "bundle" / "bundle.json"
    text = manifest.read_text()
    if damage == "missing":
        manifest.unlink()
    elif damage == "cut":
        manifest.write_text(text[: len(text) // 2])
    elif damage == "empty":
        manifest.write_text("")
    elif damage == "a list":
        manifest.write_text("[]")
    else:
        data = json.loads(text)
        if damage == "no wheels":
            del data["wheels"]
        else:
            data["python"] = 3.11
        manifest.write_text(json.dumps(data))
    err = one_line(run(install), 1)
    assert said in err and "copy the bundle whole again" in err
    assert not (tmp_path / "bundle" / "site").exists()


def test_ctrl_c_during_the_install_is_one_line_exit_130(tmp_path):
    # Issue 63: Ctrl-C during install.py was a KeyboardInterrupt traceback. A pip of our own
    # (first on PYTHONPATH) holds the install still until the signal comes.
    install = make_bundle(tmp_path / "bundle")
    shim, started = tmp_path / "shim" / "pip", tmp_path / "pip-started"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("")
    (shim / "__main__.py").write_text(
        "import pathlib, sys, time\n"
        "if '--version' in sys.argv: sys.exit(0)\n"
        f"pathlib.Path({str(started)!r}).write_text('')\n"
        "time.sleep(60)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(shim.parent)}
    process = subprocess.Popen([sys.executable, str(install)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip
    try:
        for _ in range(300):
            if started.exists():
                break
            time.sleep(0.05)
        assert started.exists(), "the install never reached pip"
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 130, err
    assert out == "" and err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("install.py: error: interrupted (SIGINT) before the install was")
    assert not (tmp_path / "bundle" / "site").exists()
    assert not list((tmp_path / "bundle").glob(".site.installing-*"))  # the half-made folder


def test_a_target_that_is_no_bundles_install_is_left_alone(tmp_path):
    install = make_bundle(tmp_path / "bundle")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    err = one_line(run(install, "--target", str(tmp_path / "mine")), 2)
    assert "exists and is no bundle's install" in err
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--out", "x", "--python", "2.7"], "--python 2.7: give the host's CPython as 3.Y"),
        (["--python", "3.11"], "the following arguments are required: --out"),
        (["--out", "x", "--steps", "3"], "unrecognized arguments: --steps 3"),
    ],
)
def test_bundle_arguments_are_one_line_exit_2(argv, message, capsys):
    with pytest.raises(SystemExit) as stopped:
        bundle.checked_arguments(argv)
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("nox -s bundle: error: ") and message in err and err.count("\n") == 1


def test_bundle_will_not_write_over_a_folder_that_is_no_bundle(tmp_path, capsys):
    (tmp_path / "keep.txt").write_text("mine")
    with pytest.raises(SystemExit):
        bundle.checked_arguments(["--out", str(tmp_path)])
    assert "holds something other than a bundle" in capsys.readouterr().err


def test_the_twins_record_must_show_the_hosts_jax_and_the_bundles_flax(tmp_path):
    host, site = tmp_path / "host", tmp_path / "site"
    record = {
        "rows": [{"architecture": "unet", "status": "ok"},
                 {"architecture": "simple_dit", "status": "failed"}],
        "environment": {
            "python": "3.12.1",
            "packages": {"jax": "0.10.2", "jaxlib": "0.10.2", "numpy": "2.4.6", "flax": "0.12.9"},
            "package_sources": {
                "jax": {"source": "host", "location": str(host)},
                "jaxlib": {"source": "host", "location": str(host)},
                "numpy": {"source": "bundle", "location": str(site)},
                "flax": {"source": "bundle", "location": str(site)},
            },
        },
    }  # fmt: skip
    assert tpu_host_smoke.check_record(record, host, site) == [
        "row simple_dit: failed",
        "python is '3.12.1', not 3.11",
        f"package_sources.numpy is {{'source': 'bundle', 'location': '{site}'}}, "
        f"not host from {host}",
        "packages.flax is 0.12.9, not 0.12.8",
    ]
