"""The pods of the generated JobSet form JAX's runtime with the real `kubernetes` package,
as the CUDA images hold it (the version of locks/cuda13.txt, installed into a folder of the
test's own from PyPI), and no service-account token (--detection env mounts none): two
processes on loopback, each with a pod's variables. Without network the test is skipped,
unless CI=true, which makes that a failure.

And JAX's own wait for pod 0's name, against dew's: JAX gives up after about a minute
whatever the timeout (its retry loop sleeps at most ~57 s), dew waits DEW_INIT_TIMEOUT_S.
And a pod whose peer never starts its process (pod 0 with its address but its image still
pulling; pod 1 never there), run for real as the pod's own command with its variables:
one line and a non-zero exit, not JAX's abort (exit 134, a multi-line log)."""

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from jax._src import clusters
from jax._src.clusters import cloud_tpu_cluster, k8s_cluster

from dew.bench.multihost import k8s_run, kubernetes
from dew.bench.multihost.launch import free_port
from dew.train import distributed

REPO = Path(__file__).resolve().parents[3]
LOCK = REPO / "locks" / "cuda13.txt"
IMAGE = "registry.example/dew@sha256:" + "0123456789abcdef" * 4
TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
CLUSTER_VARIABLES = ("SLURM_", "OMPI_", "DEW_", "JAX_", "KUBERNETES_", "TPU_")


@pytest.fixture(scope="module")
def kubernetes_site(tmp_path_factory) -> Path:
    """The `kubernetes` package of the CUDA lock, with its dependencies pinned by the lock."""
    pins = [line.split(" ")[0] for line in LOCK.read_text().splitlines() if "==" in line]
    version = next(pin for pin in pins if pin.startswith("kubernetes=="))
    folder = tmp_path_factory.mktemp("kubernetes-site")
    constraints = folder / "constraints.txt"
    constraints.write_text("\n".join(pins) + "\n")
    site = folder / "site"
    pip = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    pip += ["--no-compile", "--target", str(site), "-c", str(constraints), version]
    done = subprocess.run(pip, capture_output=True, text=True)
    if done.returncode != 0:
        reason = f"pip could not install {version}: {done.stderr.strip()[-300:]}"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return site


def pod_environment(manifests: list[dict], index: int, port: int) -> dict[str, str]:
    """What the container of pod `index` sees: the manifest's variables (fieldRefs read from a
    pod of that name), what Kubernetes adds, and the coordinator on loopback (the cluster's
    DNS name of pod 0 resolves only in the cluster)."""
    jobset = manifests[-1]
    name = jobset["metadata"]["name"]
    job = f"{name}-workers-0"
    container = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    container = container["containers"][0]
    fields = {
        "metadata.name": f"{job}-{index}-x7k{index}q",
        "metadata.namespace": "bench",
        "spec.nodeName": f"gpu-node-{index}",
        "metadata.labels['job-name']": job,
        "metadata.labels['jobset.sigs.k8s.io/jobset-name']": name,
        kubernetes.COMPLETION_INDEX: str(index),
    }
    environ = {
        key: value for key, value in os.environ.items() if not key.startswith(CLUSTER_VARIABLES)
    }
    environ |= {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    for variable in container["env"]:
        if "value" in variable:
            environ[variable["name"]] = variable["value"]
        else:
            environ[variable["name"]] = fields[variable["valueFrom"]["fieldRef"]["fieldPath"]]
    host, pod_port = environ["JAX_COORDINATOR_ADDRESS"].rsplit(":", 1)
    assert (host, int(pod_port)) == (f"{name}-workers-0-0.{name}", kubernetes.COORDINATOR_PORT)
    environ["JAX_COORDINATOR_ADDRESS"] = f"127.0.0.1:{port}"
    environ["JAX_PLATFORMS"] = "cpu"  # no GPU here; the join is the same
    environ["PYTHONPATH"] = str(REPO / "src")
    return environ


JOIN = """
import json, sys
sys.path.append({site!r})  # after the venv's own packages, as a package of the image
import kubernetes
from dew.train import distributed
cluster = distributed.initialize()
import jax
found = [kubernetes.__version__, cluster.method, jax.process_count(), jax.process_index()]
print(json.dumps(found))
"""


@pytest.mark.slow
def test_env_detection_pods_join_with_the_real_kubernetes_package_and_no_token(kubernetes_site):
    assert not TOKEN.exists(), "this test needs a machine that is not a pod"
    argv = ["--hosts", "2", "--devices-per-host", "8", "--image", IMAGE, "--detection", "env"]
    manifests = kubernetes.manifests(kubernetes.parser().parse_args(argv))
    assert manifests[0]["automountServiceAccountToken"] is False  # no token in these pods
    port = free_port()
    code = JOIN.format(site=str(kubernetes_site))
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", code],
            env=pod_environment(manifests, index, port),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for index in range(2)
    ]
    results = []
    for process in processes:
        out, err = process.communicate(timeout=240)
        assert process.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    version = re.search(r"kubernetes==(\S+)", LOCK.read_text())[1]
    assert results == [[version, "env", 2, 0], [version, "env", 2, 1]]
    # The trap is live: the real package, asked by JAX's Kubernetes detection, refuses here.
    check = (
        f"import sys; sys.path.append({str(kubernetes_site)!r}); import kubernetes\n"
        "try:\n    kubernetes.config.load_incluster_config()\n"
        "except kubernetes.config.ConfigException as error:\n    print(error)"
    )
    done = subprocess.run(
        [sys.executable, "-c", check],
        env=pod_environment(manifests, 0, port),
        capture_output=True,
        text=True,
    )
    assert "Service token file does not exist" in done.stdout, done.stderr[-2000:]


class Clock:
    """Time that passes only when slept: the waits run in no time, and say how long."""

    def __init__(self):
        self.now = 0.0

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def monotonic(self) -> float:
        return self.now


def late_name(clock: Clock, appears_at: float):
    """A resolver in which pod 0's name appears only at `appears_at` seconds."""

    def resolve(host: str) -> str:
        if clock.now < appears_at:
            raise socket.gaierror(-2, "Name or service not known")
        return "10.8.0.10"

    return resolve


def test_jax_alone_gives_up_on_a_pod_0_that_resolves_after_a_minute(monkeypatch):
    """What dew's wait is for: JAX's K8sCluster waits for pod 0's name with a fixed retry
    loop, whatever the timeout it is given."""
    clock = Clock()
    monkeypatch.setattr(k8s_cluster.time, "sleep", clock.sleep)
    monkeypatch.setattr(k8s_cluster.socket, "gethostbyname", late_name(clock, 120.0))
    controller = type("Owner", (), {"kind": "Job", "controller": True})
    job = type("Job", (), {"metadata": type("Meta", (), {"name": "dew-step-workers-0"})})
    job.metadata.labels = {"jobset.sigs.k8s.io/jobset-name": "dew-step"}
    monkeypatch.setattr(k8s_cluster.K8sCluster, "_controller", classmethod(lambda c: controller))
    monkeypatch.setattr(k8s_cluster.K8sCluster, "_job", classmethod(lambda c: job))
    monkeypatch.setattr(k8s_cluster.K8sCluster, "_pod", classmethod(lambda c: None))
    with pytest.raises(RuntimeError, match="Retry failed"):
        k8s_cluster.K8sCluster.get_coordinator_address(
            timeout_secs=300, override_coordinator_port=None
        )
    assert clock.now < 60  # gave up within a minute, with 300 s to go


def test_dew_waits_for_pod_0_as_long_as_the_join_timeout(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(distributed.time, "sleep", clock.sleep)
    monkeypatch.setattr(distributed.time, "monotonic", clock.monotonic)
    host = "dew-step-workers-0-0.dew-step"
    distributed.wait_for_name(host, 300, resolve=late_name(clock, 250.0))
    assert 250 <= clock.now < 256  # back within one pause of the name appearing
    clock.now = 0.0
    with pytest.raises(distributed.DistributedSetupError) as refused:
        distributed.wait_for_name(host, 300, resolve=late_name(clock, 400.0))
    assert clock.now == pytest.approx(300)
    message = str(refused.value)
    assert "\n" not in message and f"name {host} did not resolve within 300 s" in message


JOIN_S = 5  # DEW_INIT_TIMEOUT_S of the pods below: the test waits it out


def run_pod_alone(index: int, tmp_path: Path) -> tuple[subprocess.CompletedProcess, float]:
    """Pod `index` of a 2-host env-detection JobSet, running its container's command (the
    step tool and the manifest's flags, the record moved under tmp_path) with its
    variables, while the other pod never starts its process: nothing listens on the
    coordinator's port."""
    argv = ["--hosts", "2", "--devices-per-host", "8", "--image", IMAGE, "--detection", "env"]
    manifests = kubernetes.manifests(kubernetes.parser().parse_args(argv))
    [container] = kubernetes.pod_spec(kubernetes.parser().parse_args(argv))["containers"]
    flags = list(container["args"])
    flags[flags.index("--json-out") + 1] = str(tmp_path / "step.json")
    environ = pod_environment(manifests, index, free_port())
    environ |= {"DEW_INIT_TIMEOUT_S": str(JOIN_S), "HOME": str(tmp_path)}
    environ["XDG_CACHE_HOME"] = str(tmp_path / ".cache")
    command = [sys.executable, *container["command"][1:], *flags]
    start = time.monotonic()
    done = subprocess.run(command, cwd=REPO, env=environ, capture_output=True, text=True,
                          timeout=240)  # fmt: skip
    return done, time.monotonic() - start


def test_a_pod_whose_coordinator_never_starts_stops_in_one_line(tmp_path):
    done, seconds = run_pod_alone(1, tmp_path)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-3000:]
    assert "the coordinator 127.0.0.1:" in lines[0], lines
    assert "(process 0) accepted no connection within" in lines[0], lines
    assert seconds < JOIN_S + 60, seconds
    assert not (tmp_path / "step.json").exists()
    print(f"{lines[0]} (exit 2 after {seconds:.1f} s)")


def test_pod_0_whose_peer_never_starts_stops_in_one_line(tmp_path):
    """The coordinator itself cannot wait on a port: it waits in JAX's join, which a watch
    of dew's ends before JAX's own deadline."""
    done, seconds = run_pod_alone(0, tmp_path)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == distributed.EXIT_PEER_LOST and len(lines) == 1, done.stderr[-3000:]
    assert lines[0].startswith("dew: process 0 of 2 stops: the cluster did not form within 5 s")
    assert "Terminating process because" not in done.stderr
    assert seconds < JOIN_S + distributed.JOIN_GRACE_S + 60, seconds
    print(f"{lines[0]} (exit 3 after {seconds:.1f} s)")


def test_the_port_wait_ends_once_the_coordinator_listens_and_is_bounded():
    """What the pods above take: the coordinator's port, waited for within the budget."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        distributed.wait_for_port("127.0.0.1", server.getsockname()[1], 5)  # returns at once
    port = free_port()
    start = time.monotonic()
    with pytest.raises(distributed.DistributedSetupError) as refused:
        distributed.wait_for_port("127.0.0.1", port, 1.5)
    assert 1.5 <= time.monotonic() - start < 5
    assert "\n" not in str(refused.value) and f"127.0.0.1:{port} (process 0)" in str(refused.value)


def test_the_pods_wait_and_the_jobs_deadline_share_one_join_budget():
    argv = ["--hosts", "2", "--devices-per-host", "8", "--image", IMAGE]
    pod = kubernetes.manifests(kubernetes.parser().parse_args(argv))[-1]
    container = pod["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    env = {v["name"]: v.get("value") for v in container["containers"][0]["env"]}
    assert env["DEW_INIT_TIMEOUT_S"] == str(k8s_run.JOIN_S) == str(distributed.INIT_TIMEOUT_S)


def test_a_tpu_slices_pods_are_left_to_jaxs_gke_tpu_detection(monkeypatch):
    """With what GKE puts in the pods of a 2-host slice, dew leaves the join to JAX's
    GkeTpuCluster, which finds the coordinator on the port the Service publishes."""
    argv = ["--hosts", "2", "--devices-per-host", "4", "--image", IMAGE]
    argv += ["--accelerator", "tpu-v5-lite-podslice", "--topology", "2x4"]
    objects = {m["kind"]: m for m in kubernetes.manifests(kubernetes.parser().parse_args(argv))}
    container = objects["JobSet"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    env = {v["name"]: v["value"] for v in container["template"]["spec"]["containers"][0]["env"]
           if "value" in v}  # fmt: skip
    hosts = ",".join(f"{kubernetes.pod_hostname('dew-step', i)}.dew-step" for i in range(2))
    gke = {"TPU_WORKER_HOSTNAMES": hosts, "TPU_WORKER_ID": "1"}  # GKE's TPU webhook's
    found = distributed.detect({**env, **gke})
    assert found is not None and found.method == "gke-tpu"
    assert distributed.JAX_DETECTION[found.method] == cloud_tpu_cluster.GkeTpuCluster.name
    for name in list(os.environ):
        if name.startswith(CLUSTER_VARIABLES):
            monkeypatch.delenv(name)
    for name, value in {**env, **gke}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(cloud_tpu_cluster, "running_in_cloud_tpu_vm", True)  # no TPU here
    monkeypatch.setattr(cloud_tpu_cluster.socket, "gethostbyname", lambda host: "10.8.0.10")
    # The node's metadata server, asked for multislice settings: one slice has none.
    monkeypatch.setattr(cloud_tpu_cluster, "get_metadata", lambda key: ("", 404))
    address, count, process, _ = clusters.ClusterEnv.auto_detect_unset_distributed_params(
        None, None, None, None, "gketpu", found.init_timeout_s
    )
    port = objects["Service"]["spec"]["ports"][0]["port"]
    assert address == f"{kubernetes.pod_hostname('dew-step', 0)}.dew-step:{port}"
    assert (count, process) == (2, 1)
    one_host = {**env, "TPU_WORKER_HOSTNAMES": "localhost", "TPU_WORKER_ID": "0"}
    assert distributed.detect(one_host) is None  # GKE's list of one host: nothing to join
    argv[1], argv[3] = "1", "8"  # the slice as one host of 8 chips: one process, said so
    objects = {m["kind"]: m for m in kubernetes.manifests(kubernetes.parser().parse_args(argv))}
    container = objects["JobSet"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    env = {v["name"]: v["value"] for v in container["template"]["spec"]["containers"][0]["env"]
           if "value" in v}  # fmt: skip
    assert env["DEW_NUM_PROCESSES"] == "1" and "DEW_CLUSTER" not in env
    monkeypatch.setattr(distributed, "_has_kubernetes_client", lambda: True)  # as in such images
    assert distributed.detect({**env, "KUBERNETES_SERVICE_HOST": "10.96.0.1"}) is None
