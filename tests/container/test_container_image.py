"""The cpu image built from the offline base, as `nox -s cpu-smoke` builds it, and a
cpu-smoke case run inside it.

Skipped when no engine answers, unless DEW_REQUIRE_ENGINE=1 (set by .ci/run), which makes
a missing engine or debootstrap a failure. The base, the wheelhouse and the image are
cached (podman's store, ~/.cache/dew), so only the first run on a machine pays for them.
"""

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from container_support import unavailable, worktrees

from dew.host import bases, runner
from dew.host import engine as containers
from dew.host import image as images
from dew.host import stack_images as stacks

pytestmark = pytest.mark.container

ROOT = Path(__file__).resolve().parents[2]
SMOKE_ENV = {"JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}


@pytest.fixture(scope="module")
def engine():
    chosen = containers.choose({"DEW_ENGINE": os.environ.get("DEW_ENGINE", "")})
    if chosen is None:
        unavailable("no container engine answers (docker daemon or podman)")
    return chosen


@pytest.fixture(scope="module")
def cpu_image(engine):
    base = bases.OFFLINE_BASE_IMAGE
    if not containers.image_exists(engine, base) and not shutil.which("debootstrap"):
        unavailable("debootstrap is not installed, so the offline base cannot be built")
    bases.build_offline_base(engine, base)
    return images.build_image(engine, "cpu", base)


def _run(engine, image, command, mounts=()):
    argv = runner.run_argv(engine, image, command, env=SMOKE_ENV, mounts=mounts)
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
    again = images.build_image(engine, "cpu", cpu_image.base)
    assert (again.ref, again.id, again.built) == (cpu_image.ref, cpu_image.id, False)


@pytest.mark.slow  # the slow tier: CI runs it (.ci/run), `nox -s tests` leaves it
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
    assert container["tag"] == cpu_image.ref and container["base_packages"]
    assert (out / "step.json").stat().st_uid == os.getuid()


def test_the_record_names_the_whole_stack(engine, cpu_image, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    probe = (
        "import json, sys; from dew.bench.record.capture import capture; "
        "json.dump(capture().model_dump(mode='json'), open(sys.argv[1], 'w'))"
    )
    result = _run(
        engine, cpu_image, ["python", "-c", probe, "/out/env.json"], [(out, "/out", "rw")]
    )
    assert result.returncode == 0, result.stderr[-3000:]
    environment = json.loads((out / "env.json").read_text())
    container, code = environment["container"], environment["code"]
    assert container["tag"] == cpu_image.ref
    dockerfile = hashlib.sha256((ROOT / "docker" / "Dockerfile").read_bytes()).hexdigest()
    assert container["dockerfile_sha256"] == dockerfile
    assert container["base_image"] == cpu_image.base
    assert container["base_suite"] == "trixie" and container["base_snapshot"]
    assert any(item.startswith("python3=") for item in container["base_packages"])
    assert container["base_rebuild"].startswith(("debootstrap", "pull ", "cannot be rebuilt"))
    head, dirty = containers.git_commit()
    assert code["commit"] == head and code["dirty"] == dirty
    assert (code["diff_sha256"] is not None) == bool(dirty)


def test_a_root_caller_runs_as_the_image_user_and_keeps_what_it_writes(engine, cpu_image, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    script = "id -u > $0/uid; mkdir $0/made; id -un > $0/made/name"
    result = _run(engine, cpu_image, ["sh", "-c", script, "/out"], [(out, "/out", "rw")])
    assert result.returncode == 0, result.stderr[-2000:]
    uid, _ = runner.image_user(engine, cpu_image.ref)
    assert int((out / "uid").read_text()) == uid != 0  # dew's image: dew, 10001
    assert (out / "made" / "name").read_text().strip() == "dew"
    for path in (out, out / "uid", out / "made", out / "made" / "name"):
        assert path.stat().st_uid == os.getuid()  # the caller's, root or not


@pytest.mark.slow  # the slow tier: CI runs it (.ci/run), `nox -s tests` leaves it
def test_a_stack_materialised_at_head_runs_and_labels_that_commit(engine, cpu_image):
    head = containers.git_commit()[0]
    before = worktrees()
    built = []
    spec = stacks.StackSpec(head, "cpu", "commit HEAD")
    image = stacks.materialise(engine, spec, cpu_image.base, built, log=lambda *_: None)
    try:
        labels = containers.image_labels(engine, image.ref)
        assert labels["dew.commit"] == head and image.commit == head
        assert image.ref.startswith(f"localhost/dew-stack:cpu-{head[:12]}-")
        result = _run(engine, image, ["python", "-c", "import os; print(os.environ['DEW_COMMIT'])"])
        assert result.stdout.strip() == head
        assert worktrees() == before  # the worktree is gone once the image is built
    finally:
        stacks.remove_built(engine, built)


def test_a_stack_whose_image_fails_to_build_leaves_nothing(
    engine, cpu_image, monkeypatch, tmp_path
):
    broken = tmp_path / "tree"
    for part in ("src", "tools", "locks", "docker"):
        (broken / part).mkdir(parents=True)
    for name in ("pyproject.toml", "README.md", "locks/cpu.txt"):
        (broken / name).write_bytes((ROOT / name).read_bytes())
    (broken / "docker" / "Dockerfile").write_text(
        "ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nRUN exit 3\n"
    )

    @contextlib.contextmanager
    def worktree(commit, root=ROOT):
        yield broken

    monkeypatch.setattr(stacks, "worktree", worktree)
    built = []
    spec = stacks.StackSpec("0" * 40, "cpu", "commit broken")
    with pytest.raises(
        containers.EngineError, match="build of localhost/dew-stack:cpu-000000000000"
    ):
        stacks.materialise(engine, spec, cpu_image.base, built, log=lambda *_: None)
    assert built == []
    tag = images.image_tag("cpu", cpu_image.base_digest, broken, "0" * 40)
    assert not containers.image_exists(engine, tag)
