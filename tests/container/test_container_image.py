"""The cpu image built from the offline base, as `nox -s cpu-smoke` builds it, and a
cpu-smoke case run inside it.

Skipped when no engine answers, unless DEW_REQUIRE_ENGINE=1 (set by .ci/run), which makes
a missing engine or debootstrap a failure. The base, the wheelhouse and the image are
cached (podman's store, ~/.cache/dew), so only the first run on a machine pays for them.
"""

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.container

ROOT = Path(__file__).resolve().parents[2]
SMOKE_ENV = {"JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}


def _helper():
    spec = importlib.util.spec_from_file_location("dew_engine", ROOT / "docker" / "engine.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


containers = _helper()


def _unavailable(reason: str):
    if os.environ.get("DEW_REQUIRE_ENGINE") == "1":
        pytest.fail(f"DEW_REQUIRE_ENGINE=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def engine():
    chosen = containers.choose({"DEW_ENGINE": os.environ.get("DEW_ENGINE", "")})
    if chosen is None:
        _unavailable("no container engine answers (docker daemon or podman)")
    return chosen


@pytest.fixture(scope="module")
def cpu_image(engine):
    base = containers.OFFLINE_BASE_IMAGE
    if not containers.image_exists(engine, base) and not shutil.which("debootstrap"):
        _unavailable("debootstrap is not installed, so the offline base cannot be built")
    containers.build_offline_base(engine, base)
    return containers.build_image(engine, "cpu", base)


def _run(engine, image, command, mounts=()):
    argv = containers.run_argv(engine, image, command, env=SMOKE_ENV, mounts=mounts)
    return subprocess.run(argv, capture_output=True, text=True, timeout=900)


def test_image_runs_dew_on_eight_simulated_cpu_devices(engine, cpu_image):
    probe = "import dew, jax; print(len(jax.devices()), jax.devices()[0].platform, dew.__name__)"
    result = _run(engine, cpu_image, ["python", "-c", probe])
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["8", "cpu", "dew"]


def test_image_labels_name_its_stack_and_a_second_build_reuses_it(engine, cpu_image):
    lock_sha = hashlib.sha256((ROOT / "locks" / "cpu.txt").read_bytes()).hexdigest()
    labels = json.loads(
        engine("image", "inspect", "--format", "{{json .Labels}}", cpu_image.ref).stdout
    )
    assert labels["dew.variant"] == "cpu"
    assert labels["dew.lock.sha256"] == lock_sha
    assert labels["org.opencontainers.image.base.digest"] == cpu_image.base_digest
    again = containers.build_image(engine, "cpu", cpu_image.base)
    assert (again.ref, again.id, again.built) == (cpu_image.ref, cpu_image.id, False)


def test_a_cpu_smoke_case_in_the_image_records_the_container(engine, cpu_image, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    command = [
        "python", "tools/benchmark_step.py", "--preset", "cpu-smoke", "--steps", "2",
        "--architectures", "simple_dit", "--idle-check", "off", "--json-out", "/out/step.json",
    ]  # fmt: skip
    result = _run(engine, cpu_image, command, mounts=[(out, "/out", "rw")])
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads((out / "step.json").read_text())
    assert [row["status"] for row in record["rows"]] == ["ok"]
    container = record["environment"]["container"]
    assert container["engine"].startswith(engine.name)
    assert container["image_id"] == cpu_image.id
    assert container["base_image_digest"] == cpu_image.base_digest
    assert container["lock_sha256"] == cpu_image.lock_sha256
    assert container["variant"] == "cpu"
