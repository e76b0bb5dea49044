"""`nox -s bench-tpu` up to the device: a TPU found from the device nodes and PCI functions
a TPU VM shows (a tree of real files standing for /), the session refused in one line on a
host without one (this one) before anything is built, the container's arguments (as Cloud
TPU runs a container: privileged, on the host's network), and the step benchmark's flags.
"""

import os
import subprocess
from pathlib import Path

import pytest
from container_support import nox_command

from dew.host import engine as containers
from dew.host import image as images
from dew.host import runner
from dew.host.sessions import bench_tpu

ROOT = Path(__file__).resolve().parents[2]


def test_a_tpu_is_found_by_its_device_nodes_or_its_pci_function(tmp_path):
    assert bench_tpu.tpu_chips(tmp_path) == []
    (tmp_path / "dev" / "vfio").mkdir(parents=True)
    (tmp_path / "dev" / "vfio" / "vfio").touch()  # the container, on every vfio host
    assert bench_tpu.tpu_chips(tmp_path) == []
    (tmp_path / "dev" / "vfio" / "0").touch()
    (tmp_path / "dev" / "accel0").touch()
    pci = tmp_path / "sys" / "bus" / "pci" / "devices"
    for name, vendor in (("0000:00:04.0", "0x1ae0\n"), ("0000:00:05.0", "0x8086\n")):
        (pci / name).mkdir(parents=True)
        (pci / name / "vendor").write_text(vendor)
    assert bench_tpu.tpu_chips(tmp_path) == [
        str(tmp_path / "dev" / "accel0"), str(tmp_path / "dev" / "vfio" / "0"), "PCI 0000:00:04.0",
    ]  # fmt: skip


def test_nox_refuses_a_host_without_a_tpu_in_one_line():
    if bench_tpu.tpu_chips():
        pytest.skip("this host has a TPU: the session would run")
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    runs = ROOT / "results" / "runs"
    before = set(runs.glob("*-small-tpu-*"))  # the committed records of a chip
    done = subprocess.run([*nox_command(), "-s", "bench-tpu"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env=env)  # fmt: skip
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if not line.startswith("nox > ")]
    assert errors == [
        "nox -s bench-tpu: error: no TPU on this host (no /dev/accel*, no /dev/vfio/N, no "
        "Google PCI device): run it on a TPU VM, or `nox -s cpu-smoke` here"
    ]
    assert set(runs.glob("*-small-tpu-*")) == before  # nothing written


def _argv(name: str, tpu_on: bool) -> list[str]:
    engine = containers.Engine(name, "0")
    engine.run_flags = []  # what host_run_flags found; no container is started here
    image = images.Image("localhost/dew:tpu-test", "sha256:" + "0" * 64, "tpu", "base",
                         "base@sha256:1", "lock", False, 0.0)  # fmt: skip
    runner._IMAGE_USERS[image.ref] = (10001, 10001)  # what `id -u; id -g` in dew's image says
    argv = runner.run_argv(engine, image, ["python", "-c", "1"], tpu=tpu_on)
    return argv[argv.index(name) :]


def test_the_container_is_privileged_on_the_hosts_network_only_for_a_tpu():
    for name in ("docker", "podman"):
        argv = _argv(name, tpu_on=True)
        pairs = list(zip(argv, argv[1:], strict=False))
        assert "--privileged" in argv and ("--network", "host") in pairs
        assert ("--network", "none") not in pairs
        assert argv.index("--privileged") < argv.index("localhost/dew:tpu-test")
        plain = _argv(name, tpu_on=False)
        assert "--privileged" not in plain
        assert ("--network", "none") in list(zip(plain, plain[1:], strict=False))


def test_the_step_benchmark_gets_the_idle_gate_and_three_repeats_unless_given():
    assert bench_tpu.step_args([], bench_tpu.GATES) == ["--idle-check", "error", "--repeats", "3"]
    assert bench_tpu.step_args(["--repeats", "5"], bench_tpu.GATES) == [
        "--idle-check", "error", "--repeats", "5",
    ]  # fmt: skip
    assert "tpu" in containers.VARIANTS  # the image the session builds where an engine answers
