"""A pod of the generated JobSet, faked at its boundaries: the variables the kubelet and the
downward API give the container (read from the manifests themselves), the `kubernetes`
client JAX's detection imports (a module of our own in sys.modules, answering as the API
server would for the JobSet's pods and Job), the service-account namespace file and DNS.
What runs for real: dew.train.distributed.detect, JAX's K8sCluster through the call
jax.distributed.initialize makes (ClusterEnv.auto_detect_unset_distributed_params), and
dew.bench.record.capture writing a record that validates and names the pod and its Job.
No cluster: none can be installed here (docs/multihost.md)."""

import io
import os
import re
import socket
import subprocess
import sys
import types
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import SimpleNamespace

import pytest
from jax._src import clusters
from jax._src.clusters import k8s_cluster

from dew.bench.multihost import kubernetes
from dew.bench.record import capture, validate
from dew.bench.record.schema import SCHEMA_VERSION, BenchmarkRun, StepRow, read_run, write_run
from dew.train import distributed

REPO = Path(__file__).resolve().parents[3]
IMAGE = "registry.example/dew@sha256:" + "0123456789abcdef" * 4
NAMESPACE = "bench"
NODES = ["gpu-node-a", "gpu-node-b"]
# One row as process 0 writes it (the figures are not what is tested here).
ROW = StepRow(
    architecture="simple_dit", sample="16x16x3", batch=128, params=270832, ms_per_step=7.9,
    p10_ms=7.8, p50_ms=7.9, p90_ms=8.1, util=None, status="ok",
)  # fmt: skip
CLUSTER_VARIABLES = ("SLURM_", "OMPI_", "DEW_", "JAX_COORDINATOR", "JAX_NUM", "JAX_PROCESS")


def manifests(detection: str = "jax") -> dict[str, dict]:
    argv = ["--hosts", "2", "--devices-per-host", "8", "--image", IMAGE]
    args = kubernetes.parser().parse_args(
        [*argv, "--namespace", NAMESPACE, "--detection", detection]
    )
    return {manifest["kind"]: manifest for manifest in kubernetes.manifests(args)}


class FakeCluster:
    """The pods and Job the JobSet controller and the Job controller would make of the
    manifests: Job `<jobset>-workers-0`, one pod per completion index."""

    def __init__(self, objects: dict[str, dict]):
        jobset = objects["JobSet"]
        self.name = jobset["metadata"]["name"]
        replicated = jobset["spec"]["replicatedJobs"][0]
        self.job_name = f"{self.name}-{replicated['name']}-0"
        self.job_spec = replicated["template"]["spec"]
        self.container = self.job_spec["template"]["spec"]["containers"][0]
        self.pods = [self._pod(index) for index in range(self.job_spec["parallelism"])]
        self.calls: list[tuple[str, str]] = []  # (verb, resource) the API server answered

    def _pod(self, index: int) -> dict:
        labels = {
            "job-name": self.job_name,
            "batch.kubernetes.io/job-name": self.job_name,
            "batch.kubernetes.io/job-completion-index": str(index),
            "jobset.sigs.k8s.io/jobset-name": self.name,
            "jobset.sigs.k8s.io/replicatedjob-name": "workers",
        }
        return {
            "metadata": {
                "name": f"{self.job_name}-{index}-x7k{index}q",
                "namespace": NAMESPACE,
                "labels": labels,
                "annotations": {"batch.kubernetes.io/job-completion-index": str(index)},
                "owner_references": [SimpleNamespace(kind="Job", controller=True)],
            },
            "spec": {
                "nodeName": NODES[index],
                "hostname": f"{self.job_name}-{index}",
                "subdomain": self.name,
            },
            "ip": f"10.8.0.{10 + index}",
        }

    def environ(self, index: int) -> dict[str, str]:
        """What the container of pod `index` sees: the manifest's env, its fieldRefs read
        from the pod, and what Kubernetes sets itself."""
        pod = self.pods[index]
        environ = {
            "KUBERNETES_SERVICE_HOST": "10.96.0.1",
            "KUBERNETES_SERVICE_PORT": "443",
            "HOSTNAME": pod["spec"]["hostname"],
            "JOB_COMPLETION_INDEX": str(index),  # the Job controller's, in an indexed Job
        }
        for variable in self.container["env"]:
            if "value" in variable:
                environ[variable["name"]] = variable["value"]
            else:
                environ[variable["name"]] = field(
                    pod, variable["valueFrom"]["fieldRef"]["fieldPath"]
                )
        return environ

    def addresses(self) -> dict[str, str]:
        """DNS: each pod's hostname, bare and in the JobSet's subdomain."""
        names = {}
        for pod in self.pods:
            hostname = pod["spec"]["hostname"]
            names[hostname] = names[f"{hostname}.{pod['spec']['subdomain']}"] = pod["ip"]
        return names

    def client_module(self) -> types.ModuleType:
        """The `kubernetes` package as far as JAX's K8sCluster uses it."""
        cluster = self

        class ApiException(Exception):
            def __init__(self, status=None, reason=None):
                super().__init__(reason)
                self.status, self.reason = status, reason

        class CoreV1Api:
            def list_namespaced_pod(self, namespace, field_selector):
                cluster.calls.append(("list", "pods"))
                ip = field_selector.removeprefix("status.podIP=")
                found = [pod for pod in cluster.pods if pod["ip"] == ip and namespace == NAMESPACE]
                return SimpleNamespace(items=[as_object(pod) for pod in found])

            def list_namespaced_service(self, namespace):
                cluster.calls.append(("list", "services"))
                raise ApiException(403, "Forbidden")  # not in the Role

        class BatchV1Api:
            def read_namespaced_job(self, name, namespace):
                cluster.calls.append(("get", "jobs"))
                if (name, namespace) != (cluster.job_name, NAMESPACE):
                    raise ApiException(404, "Not Found")
                labels = {"jobset.sigs.k8s.io/jobset-name": cluster.name}
                return SimpleNamespace(
                    metadata=SimpleNamespace(name=name, labels=labels),
                    spec=SimpleNamespace(parallelism=cluster.job_spec["parallelism"]),
                )

        module = types.ModuleType("kubernetes")
        module.__spec__ = ModuleSpec("kubernetes", None)  # importlib.util.find_spec reads it
        module.config = SimpleNamespace(load_incluster_config=lambda: None)
        module.client = SimpleNamespace(
            CoreV1Api=CoreV1Api,
            BatchV1Api=BatchV1Api,
            exceptions=SimpleNamespace(ApiException=ApiException),
        )
        return module


def field(pod: dict, path: str) -> str:
    """A downward-API fieldPath read from the pod ("" for a label it lacks, as the kubelet)."""
    keyed = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
    if keyed:
        return pod["metadata"][keyed[1]].get(keyed[2], "")
    section, name = path.split(".")
    return pod[section][name]


def as_object(pod: dict) -> SimpleNamespace:
    metadata = SimpleNamespace(**pod["metadata"])
    spec = SimpleNamespace(subdomain=pod["spec"]["subdomain"])
    return SimpleNamespace(metadata=metadata, spec=spec)


@pytest.fixture
def in_pod(monkeypatch):
    """Enter pod `index` of the generated JobSet: its environment, the fake client, the
    namespace file, DNS. K8sCluster caches what it read per class: cleared around each use."""
    cached = [k8s_cluster.K8sCluster._namespace, k8s_cluster.K8sCluster._pod]
    cached += [k8s_cluster.K8sCluster._job]

    def enter(index: int, objects: dict[str, dict]) -> FakeCluster:
        cluster = FakeCluster(objects)
        for name in list(os.environ):
            if name.startswith(CLUSTER_VARIABLES) or name.startswith("KUBERNETES_"):
                monkeypatch.delenv(name)
        for name, value in cluster.environ(index).items():
            monkeypatch.setenv(name, value)
        monkeypatch.setitem(sys.modules, "kubernetes", cluster.client_module())
        addresses = cluster.addresses()
        monkeypatch.setattr(socket, "gethostbyname", lambda host: addresses[host])
        monkeypatch.setattr(k8s_cluster, "open", _namespace_file, raising=False)
        for method in cached:
            method.__func__.cache_clear()
        return cluster

    yield enter
    for method in cached:
        method.__func__.cache_clear()


def _namespace_file(path, *args, **kwargs):
    assert path == "/var/run/secrets/kubernetes.io/serviceaccount/namespace", path
    return io.StringIO(NAMESPACE + "\n")


@pytest.mark.parametrize("index", [0, 1])
def test_jax_detects_the_jobset_with_the_roles_grants_only(in_pod, index):
    objects = manifests("jax")
    cluster = in_pod(index, objects)
    found = distributed.detect()
    assert found is not None and found.method == "kubernetes"
    assert (found.coordinator_address, found.num_processes, found.process_id) == (None,) * 3
    # What jax.distributed.initialize asks with the arguments dew leaves unset.
    address, count, process, local = clusters.ClusterEnv.auto_detect_unset_distributed_params(
        found.coordinator_address, found.num_processes, found.process_id, None, None,
        found.init_timeout_s,
    )  # fmt: skip
    service = objects["Service"]
    host, port = address.rsplit(":", 1)
    assert host == f"{kubernetes.pod_hostname(cluster.name, 0)}.{service['metadata']['name']}"
    assert found.coordinator_host == host  # the name dew waits for is the one JAX asks for
    assert int(port) == service["spec"]["ports"][0]["port"] == kubernetes.COORDINATOR_PORT
    assert (count, process, local) == (2, index, None)  # None: every GPU of the pod is its own
    granted = {
        (verb, resource)
        for rule in objects["Role"]["rules"]
        for verb in rule["verbs"]
        for resource in rule["resources"]
    }
    assert set(cluster.calls) == granted  # what JAX asked is exactly what the Role grants


def test_without_the_kubernetes_package_the_pod_stops_in_one_line(in_pod, monkeypatch):
    in_pod(0, manifests("jax"))
    monkeypatch.setitem(sys.modules, "kubernetes", None)  # an import that fails
    with pytest.raises(distributed.DistributedSetupError, match="DEW_CLUSTER=kubernetes, but"):
        distributed.detect()  # dew's manifests say the pod must join: never alone
    monkeypatch.delenv("DEW_CLUSTER")  # a pod of other manifests runs alone, as before
    assert distributed.detect() is None


def test_env_detection_reads_the_same_coordinator_without_the_api(in_pod):
    objects = manifests("env")
    cluster = in_pod(1, objects)
    found = distributed.detect()
    assert found.method == "env" and (found.num_processes, found.process_id) == (2, 1)
    name = cluster.name
    assert found.coordinator_address == f"{name}-workers-0-0.{name}:{kubernetes.COORDINATOR_PORT}"
    assert cluster.calls == [] and "Role" not in objects


def test_a_record_made_in_the_pod_validates_and_names_the_pod_and_job(in_pod, tmp_path):
    cluster = in_pod(0, manifests("jax"))
    environment = capture.capture(environ=dict(os.environ))
    run = BenchmarkRun(
        schema_version=SCHEMA_VERSION,
        kind="step",
        created="2026-12-04T12:00:00Z",
        command="python tools/benchmark_step.py",
        settings={},
        environment=environment,
        idle_check=None,
        rows=[ROW],
    )
    path = tmp_path / "step.json"
    write_run(path, run)
    assert validate.main([str(path)]) == 0
    scheduler = read_run(path).environment.scheduler
    pod = cluster.pods[0]
    assert scheduler.name == "kubernetes"
    assert (scheduler.pod, scheduler.job) == (pod["metadata"]["name"], cluster.job_name)
    assert (scheduler.jobset, scheduler.node) == (cluster.name, NODES[0])
    assert (scheduler.namespace, scheduler.completion_index) == (NAMESPACE, 0)


@pytest.mark.slow
def test_the_step_tool_in_the_pod_writes_a_record_naming_it(in_pod, tmp_path):
    """The step tool itself, run with the pod's variables, writes a record that validates
    and names the pod, its Job, node and JobSet."""
    cluster = in_pod(0, manifests("jax"))
    record = tmp_path / "step.json"
    command = [sys.executable, str(REPO / "tools" / "benchmark_step.py"), "--preset", "cpu-smoke"]
    command += ["--architectures", "simple_dit", "--compile-only", "--idle-check", "off"]
    # On this CPU host, and one process: the child has no client to detect the cluster with.
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "DEW_NUM_PROCESSES": "1"}
    done = subprocess.run(
        [*command, "--json-out", str(record)], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert validate.main([str(record)]) == 0
    written = read_run(record)
    assert [row.status for row in written.rows] == ["ok"]
    scheduler = written.environment.scheduler
    assert (scheduler.pod, scheduler.job) == (cluster.pods[0]["metadata"]["name"], cluster.job_name)
    assert (scheduler.node, scheduler.jobset) == (NODES[0], cluster.name)
