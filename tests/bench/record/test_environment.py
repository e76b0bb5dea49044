"""Environment capture: an allowlist of variables, the commit from git or a build label."""

import importlib.metadata
import json
import subprocess
from pathlib import Path

import jax

from dew.bench.record import capture as environment
from dew.bench.record.schema import SCHEMA_VERSION, BenchmarkRun, read_run, write_run

REPO = Path(__file__).resolve().parents[3]
SECRETS = {
    "HF_TOKEN": "hf_secretvalue_0123456789",
    "AWS_SECRET_ACCESS_KEY": "aws/secret+value/ABCDEFGHIJ",
    # Allowlisted prefixes, yet credentials: Terraform's input variables and a named token.
    "TF_VAR_db_password": "tf-var-secret-value",
    "XLA_AUTH_TOKEN": "xla-token-secret-value",
}


def test_record_holds_xla_flags_and_no_secret(monkeypatch, tmp_path):
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    flags = "--xla_force_host_platform_device_count=8 --xla_dump_to=/tmp/marker_dump"
    monkeypatch.setenv("XLA_FLAGS", flags)
    monkeypatch.setenv("NCCL_DEBUG", "WARN")
    env = environment.capture()
    assert env.env_flags["XLA_FLAGS"] == flags and env.env_flags["NCCL_DEBUG"] == "WARN"
    run = BenchmarkRun(
        schema_version=SCHEMA_VERSION,
        kind="step",
        created="2026-11-29T12:00:00Z",
        command="test",
        settings={},
        environment=env,
        idle_check=None,
        rows=[],
    )
    path = tmp_path / "run.json"
    write_run(path, run)
    text = path.read_text()
    assert flags in text
    for name, value in SECRETS.items():
        assert value not in text, name
    assert read_run(path).environment == env


def test_env_flags_is_an_allowlist():
    environ = {
        "JAX_PLATFORMS": "cpu",
        "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.8",
        "CUDA_VISIBLE_DEVICES": "0",
        "TF_CPP_MIN_LOG_LEVEL": "1",
        "NCCL_SOCKET_IFNAME": "lo",
        "HOME": "/root",
        "MY_XLA_FLAGS": "not ours",
        "GITHUB_TOKEN": "x",
        "CUDA_API_KEY": "x",
    }
    assert sorted(environment.env_flags(environ)) == [
        "CUDA_VISIBLE_DEVICES",
        "JAX_PLATFORMS",
        "NCCL_SOCKET_IFNAME",
        "TF_CPP_MIN_LOG_LEVEL",
        "XLA_PYTHON_CLIENT_MEM_FRACTION",
    ]


def test_capture_describes_this_process():
    env = environment.capture(devices=jax.devices())
    assert env.devices.platform == "cpu" and env.devices.count == len(jax.devices())
    assert env.packages["jax"] == jax.__version__
    assert env.packages["pydantic"] == importlib.metadata.version("pydantic")
    assert env.host.logical_cores >= 1 and env.host.memory_gib > 0
    assert env.jax_config["jax_enable_x64"] is False
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    assert env.code.source == "git" and env.code.commit == head
    assert isinstance(env.code.dirty, bool)
    json.loads(env.model_dump_json())  # serialisable as it stands


def test_commit_from_a_build_label_without_git(tmp_path):
    env = environment.capture(repo=tmp_path, environ={"DEW_COMMIT": "9886c20", "DEW_DIRTY": "0"})
    assert (env.code.commit, env.code.dirty, env.code.source) == ("9886c20", False, "label")
    # docker/Dockerfile's default for a build that was not given the commit.
    unknown = environment.capture(repo=tmp_path, environ={"DEW_COMMIT": "unknown"})
    assert unknown.code.commit is None and unknown.code.source is None


def test_container_is_null_outside_dews_image_and_named_inside():
    # This host may itself be a container (a marker file such as /.dockerenv): only dew's
    # image variables make a run "in a container".
    assert environment.capture(environ={"PATH": "/usr/bin"}).container is None
    inside = {"DEW_VARIANT": "cpu", "DEW_IMAGE_ID": "sha256:abc", "DEW_LOCK_SHA256": "f" * 64}
    container = environment.capture(environ=inside).container
    assert container is not None
    assert (container.variant, container.image_id) == ("cpu", "sha256:abc")


def test_scheduler_names_the_slurm_job_or_the_kubernetes_pod():
    assert environment.capture(environ={"HOSTNAME": "laptop"}).scheduler is None
    slurm = {"SLURM_JOB_ID": "41", "SLURM_STEP_ID": "0", "SLURM_STEP_NODELIST": "n[1-2]"}
    job = environment.capture(environ=slurm).scheduler
    assert (job.name, job.job_id, job.nodelist) == ("slurm", "41", "n[1-2]")
    # A pod from manifests other than dew's: Kubernetes' own variables only.
    bare = {
        "KUBERNETES_SERVICE_HOST": "10.96.0.1",
        "HOSTNAME": "bench-0",
        "JOB_COMPLETION_INDEX": "3",
    }
    pod = environment.capture(environ=bare).scheduler
    assert (pod.name, pod.pod, pod.completion_index, pod.job, pod.node) == (
        "kubernetes", "bench-0", 3, None, None
    )  # fmt: skip
    # dew's manifests pass the pod's own name, its Job, node and JobSet down.
    named = bare | {
        "DEW_POD_NAME": "dew-step-workers-0-0-x7k0q",
        "DEW_JOB_NAME": "dew-step-workers-0",
        "DEW_NODE_NAME": "gpu-node-a",
        "DEW_JOBSET_NAME": "dew-step",
        "DEW_POD_NAMESPACE": "ml",
    }
    pod = environment.capture(environ=named).scheduler
    assert (pod.pod, pod.job, pod.node, pod.jobset, pod.namespace) == (
        "dew-step-workers-0-0-x7k0q", "dew-step-workers-0", "gpu-node-a", "dew-step", "ml"
    )  # fmt: skip
    # SLURM inside a pod (a SLURM cluster on Kubernetes): the job names the run.
    assert environment.capture(environ=named | slurm).scheduler.name == "slurm"
