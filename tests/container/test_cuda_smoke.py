"""`nox -s cuda-smoke`: the CUDA image built from its lock on the offline base, cpu-smoke run
inside it with JAX_PLATFORMS=cpu, and a record that names the image and its CUDA wheels;
an unknown variant refused in one line, exit 2.

The end-to-end run is the slow tier (a fresh machine downloads the 2.5 GiB cuda13
wheelhouse and builds the image first); it runs the real session through nox, as a user
does. Without an engine (or nox) it is skipped, unless DEW_REQUIRE_ENGINE=1 (.ci/run),
which makes that a failure.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from container_support import nox_command, unavailable

from dew.host import engine as containers
from dew.host import image as images
from dew.host.sessions import smoke

pytestmark = pytest.mark.container

ROOT = Path(__file__).resolve().parents[2]


def _run_nox(nox, *args, timeout):
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    return subprocess.run(
        [*nox, "-s", "cuda-smoke", *args], cwd=ROOT, capture_output=True, text=True,
        timeout=timeout, env=env,
    )  # fmt: skip


def test_an_unknown_variant_is_one_line_and_exit_2(capsys):
    with pytest.raises(SystemExit) as stopped:
        smoke.cuda_arguments(["cuda11", "--steps", "3"])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err == "nox -s cuda-smoke: error: unknown variant 'cuda11'; valid: cuda12, cuda13\n"


def test_nox_refuses_an_unknown_variant_before_building_anything():
    done = _run_nox(nox_command(), "--", "cuda11", timeout=120)
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if not line.startswith("nox > ")]
    assert errors == ["nox -s cuda-smoke: error: unknown variant 'cuda11'; valid: cuda12, cuda13"]


def test_the_variant_defaults_to_cuda13_and_the_three_cases_yield_to_given_ones():
    variant, args = smoke.cuda_arguments([])
    assert variant == "cuda13" and args[0] == "--cases"
    assert [case["architecture"] for case in json.loads(args[1])] == [
        "simple_dit", "unet", "causal_transformer",
    ]  # fmt: skip
    assert smoke.cuda_arguments(["cuda12", "--architectures", "unet"]) == (
        "cuda12", ["--architectures", "unet"],
    )  # fmt: skip


def test_a_record_without_the_image_or_its_cuda_wheels_is_named_line_by_line():
    image = images.Image(
        "localhost/dew:cuda13-0123", "sha256:ab", "cuda13", "base", "digest", "lock", False, 0.0
    )
    record = {
        "rows": [{"architecture": "unet", "status": "ok"}, {"architecture": "simple_dit",
                                                            "status": "failed"}],
        "environment": {
            "container": {"tag": image.ref, "image_id": "sha256:cd", "variant": "cuda13"},
            "packages": {"jax": "0.11.1", "jax-cuda13-plugin": "0.11.1", "nvidia-ml-py": "13"},
        },
    }  # fmt: skip
    assert smoke.check_cuda_record(record, image) == [
        "row simple_dit: failed",
        "environment.container.image_id is 'sha256:cd', not sha256:ab",
        "packages lack jax-cuda13-pjrt",
        "packages list no nvidia-* CUDA library",  # NVML's binding is no CUDA library
    ]
    record["rows"][1]["status"] = "ok"
    record["environment"]["container"]["image_id"] = image.id
    record["environment"]["packages"].update({"jax-cuda13-pjrt": "0.11.1", "nvidia-cublas": "13"})
    assert smoke.check_cuda_record(record, image) == []


@pytest.mark.slow  # the slow tier: CI runs it (.ci/run), `nox -s tests` leaves it
def test_cuda_smoke_in_the_cuda13_image_records_its_cuda_stack():
    engine = containers.choose({"DEW_ENGINE": os.environ.get("DEW_ENGINE", "")})
    if engine is None:
        unavailable("no container engine answers (docker daemon or podman)")
    done = _run_nox(nox_command(), timeout=3600)
    assert done.returncode == 0, done.stderr[-4000:]
    found = re.findall(r"record: (\S+/step\.json) names (\S+) \((sha256:\w+)", done.stderr)
    assert found, done.stderr[-4000:]
    relative, tag, short_id = found[-1]
    step_json = ROOT / relative
    try:
        checked = subprocess.run(
            [sys.executable, "-m", "dew.bench.record.validate", str(step_json)],
            capture_output=True, text=True,
        )  # fmt: skip
        assert checked.returncode == 0, checked.stdout + checked.stderr
        record = json.loads(step_json.read_text())
        rows = record["rows"]
        assert [row["architecture"] for row in rows] == ["simple_dit", "unet", "causal_transformer"]
        assert [row["status"] for row in rows] == ["ok"] * 3
        environment = record["environment"]
        container = environment["container"]
        assert container["variant"] == "cuda13" and container["tag"] == tag
        assert tag.startswith("localhost/dew:cuda13-")
        assert container["image_id"] == containers.image_id(engine, tag)
        assert container["image_id"].startswith(short_id)
        assert environment["devices"]["platform"] == "cpu"
        assert environment["devices"]["count"] == 8
        locked = dict(
            re.findall(r"^([a-z0-9-]+)==(\S+)", (ROOT / "locks/cuda13.txt").read_text(), re.M)
        )
        cuda = {k for k in locked if k.startswith(("jax-cuda", "nvidia-"))}
        assert {"jax-cuda13-plugin", "jax-cuda13-pjrt", "nvidia-cublas"} <= cuda
        assert {k: environment["packages"].get(k) for k in cuda} == {k: locked[k] for k in cuda}
        for loader in ("data-workers-0.json", "data-workers-2.json"):
            assert json.loads((step_json.parent / loader).read_text())["kind"] == "data"
    finally:
        shutil.rmtree(step_json.parent, ignore_errors=True)  # the test's own run
