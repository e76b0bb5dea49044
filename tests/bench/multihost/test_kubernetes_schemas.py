"""The Kubernetes manifests (dew.bench.multihost.kubernetes) checked offline as a cluster
would take them: every object against Kubernetes' own schemas (kubernetes-validate, strict:
an unknown field is an error) of the oldest version it carries, 1.30 and the newest; the
JobSet against the JobSet's own CRD of the pinned release kept beside this file
(jobset-v0.12.0/, README there), strict too, and its Job template against Kubernetes'
JobTemplateSpec of each version; the pods against their Pod Security level
(infra.pod_security): "restricted" for GPUs, "baseline" for a TPU slice's, which run as root
as GKE's TPU examples do. For 2 hosts x 8 GPUs (both detections) and a TPU v5e 2x4 slice.
And what every pod is given: a writable home and cache, CPU and memory requests."""

import copy
import functools
import hashlib
import json
import re
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import referencing
import yaml
from infra import pod_security
from kubernetes_validate import utils as k8s_schemas

from dew.bench.multihost import k8s_pod, kubernetes
from dew.train import trainer

REPO = Path(__file__).resolve().parents[3]
CRD_FOLDER = Path(__file__).with_name("jobset-v0.12.0")
CRD = CRD_FOLDER / "jobset.x-k8s.io_jobsets.yaml"
JOBSET_VERSION = CRD_FOLDER.name.removeprefix("jobset-")
IMAGE = "registry.example/dew@sha256:" + "0123456789abcdef" * 4
TWO_BY_EIGHT = ["--hosts", "2", "--devices-per-host", "8", "--image", IMAGE]
V5E_2X4 = ["--accelerator", "tpu-v5-lite-podslice", "--topology", "2x4", "--image", IMAGE]
CASES = {
    "2x8 GPUs, jax detection": [*TWO_BY_EIGHT, "--detection", "jax"],
    "2x8 GPUs, env detection": [*TWO_BY_EIGHT, "--detection", "env"],
    "v5e 2x4, 2 hosts of 4 chips": [*V5E_2X4, "--hosts", "2", "--devices-per-host", "4"],
    "v5e 2x4, 1 host of 8 chips": [*V5E_2X4, "--hosts", "1", "--devices-per-host", "8"],
}
SCHEMAS = Path(kubernetes_validate.__file__).with_name("kubernetes-json-schema")
CARRIED = sorted(
    (path.name[1:].removesuffix("-local-strict") for path in SCHEMAS.glob("v*-local-strict")),
    key=lambda version: tuple(map(int, version.split("."))),
)
VERSIONS = sorted({CARRIED[0], "1.30.0", CARRIED[-1]}, key=CARRIED.index)


def generate(argv: list[str]) -> list[dict]:
    args = kubernetes.parser().parse_args(argv)
    return [doc for doc in yaml.safe_load_all(kubernetes.manifests_text(args, argv)) if doc]


def strict(node):
    """A CRD's structural schema as JSON Schema that refuses unknown fields (the API server
    prunes them silently, `kubectl apply --validate=strict` refuses them) and reads
    `nullable`; x-kubernetes-preserve-unknown-fields keeps an object open."""
    if isinstance(node, list):
        return [strict(item) for item in node]
    if not isinstance(node, dict):
        return node
    schema = {key: strict(value) for key, value in node.items()}
    if "properties" in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
        schema.setdefault("additionalProperties", False)
    if schema.pop("nullable", False) and "type" in schema:
        schema["type"] = [schema["type"], "null"]
    return schema


@functools.cache
def crd_validator() -> jsonschema.Draft7Validator:
    crd = yaml.load(CRD.read_text(), Loader=yaml.CSafeLoader)
    served = next(v for v in crd["spec"]["versions"] if v["name"] == "v1alpha2")
    schema = strict(served["schema"]["openAPIV3Schema"])
    return jsonschema.Draft7Validator(schema)


@functools.cache
def job_template_validator(version: str) -> jsonschema.Draft202012Validator:
    definitions = k8s_schemas.schema_contents(
        f"kubernetes-json-schema/v{version}-local-strict/_definitions.json", version
    )
    registry = referencing.Registry().with_resource(
        definitions["$id"], referencing.Resource.from_contents(definitions)
    )
    reference = f"{definitions['$id']}#/$defs/io.k8s.api.batch.v1.JobTemplateSpec"
    return jsonschema.Draft202012Validator({"$ref": reference}, registry=registry)


def problems(manifest: dict, version: str) -> list[str]:
    """What is wrong with one object; [] when it validates."""
    if manifest["kind"] == "JobSet":
        errors = list(crd_validator().iter_errors(manifest))
        for job in manifest["spec"]["replicatedJobs"]:
            errors += job_template_validator(version).iter_errors(job["template"])
        return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in errors]
    try:
        kubernetes_validate.validate(manifest, version, strict=True)
    except kubernetes_validate.ValidationError as error:
        return [f"{'.'.join(map(str, error.path))}: {error.message}"]
    return []


def pod(manifests: list[dict]) -> dict:
    return manifests[-1]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("case", CASES)
def test_the_manifests_validate(case, version):
    manifests = generate(CASES[case])
    for manifest in manifests:
        assert problems(manifest, version) == [], manifest["kind"]
    level = "baseline" if "--accelerator" in CASES[case] else "restricted"
    assert pod_security.violations(pod(manifests), level) == []


def test_tpu_pods_run_as_gkes_examples_and_gpu_pods_stay_restricted():
    """GKE's TPU examples run as root, privileged only before GKE 1.28; no example shows a
    non-root user opening the chip. So TPU pods: root, not privileged, the runtime's default
    capabilities: baseline, not restricted. GPU pods: restricted, as before."""
    tpu = pod(generate(CASES["v5e 2x4, 2 hosts of 4 chips"]))
    assert tpu["securityContext"] == {
        "runAsUser": 0, "runAsGroup": 0, "seccompProfile": {"type": "RuntimeDefault"},
    }  # fmt: skip
    context = tpu["containers"][0]["securityContext"]
    assert context == {"allowPrivilegeEscalation": False}  # no privileged, no capability added
    assert pod_security.violations(tpu, "baseline") == []
    assert any("runAsUser 0" in line for line in pod_security.violations(tpu, "restricted"))
    assert "earlier than 1.28" in k8s_pod.__doc__
    url = "https://cloud.google.com/kubernetes-engine/docs/concepts/node-auto-provisioning"
    assert url in k8s_pod.__doc__ and url in (REPO / "docs" / "multihost.md").read_text()
    for case in ("2x8 GPUs, jax detection", "2x8 GPUs, env detection"):
        assert pod_security.violations(pod(generate(CASES[case])), "restricted") == []
    # a non-root user asked for on a TPU gets the restricted contexts
    mine = pod(generate([*CASES["v5e 2x4, 1 host of 8 chips"], "--run-as", "2000:2000"]))
    assert pod_security.violations(mine, "restricted") == []


@pytest.mark.parametrize("case", CASES)
def test_every_pod_has_a_writable_home_and_compilation_cache(case, monkeypatch):
    """A user with no passwd entry gets HOME=/, and ~/.cache/dew under it fails every case:
    HOME and XDG_CACHE_HOME lie in an emptyDir (writable by any user), and dew's default
    compilation cache, read with the pod's variables, lands in it."""
    spec = pod(generate(CASES[case]))
    [container] = spec["containers"]
    env = {v["name"]: v["value"] for v in container["env"] if "value" in v}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    home = env["HOME"]
    assert volumes[mounts[home]] == {"name": mounts[home], "emptyDir": {}}
    monkeypatch.setenv("HOME", home)
    monkeypatch.setenv("XDG_CACHE_HOME", env["XDG_CACHE_HOME"])
    cache = trainer.default_compilation_cache_dir()
    assert cache.is_relative_to(home) and cache != Path(home), cache


def test_every_pod_requests_cpu_and_memory_and_limits_only_its_devices():
    gpu = pod(generate(TWO_BY_EIGHT))["containers"][0]["resources"]
    assert gpu == {
        "requests": {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": 8},
        "limits": {"nvidia.com/gpu": 8},
    }
    tpu = pod(generate(CASES["v5e 2x4, 2 hosts of 4 chips"]))["containers"][0]["resources"]
    assert tpu["requests"] == {"cpu": "8", "memory": "32Gi", "google.com/tpu": 4}
    given = pod(generate([*TWO_BY_EIGHT, "--cpu", "500m", "--memory", "200Gi"]))
    requests = given["containers"][0]["resources"]["requests"]
    assert (requests["cpu"], requests["memory"]) == ("500m", "200Gi")


def test_the_gpu_and_tpu_pods_ask_for_their_own_nodes():
    gpu = pod(generate(TWO_BY_EIGHT))
    devices = {"nvidia.com/gpu": 8}
    assert gpu["containers"][0]["resources"]["limits"] == devices
    assert gpu["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert "nodeSelector" not in gpu
    manifests = generate([*V5E_2X4, "--hosts", "2", "--devices-per-host", "4"])
    tpu = pod(manifests)
    chips = {"google.com/tpu": 4}
    assert tpu["containers"][0]["resources"]["limits"] == chips
    assert tpu["nodeSelector"] == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
        "cloud.google.com/gke-tpu-topology": "2x4",
    }
    assert tpu["tolerations"][0]["key"] == "google.com/tpu"
    env = {v["name"]: v.get("value") for v in tpu["containers"][0]["env"]}
    assert (env["JAX_PLATFORMS"], env["DEW_CLUSTER"]) == ("tpu", "gke-tpu")
    assert not {"JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID"} & set(env)
    assert [m["kind"] for m in manifests] == ["ServiceAccount", "Service", "JobSet"]  # no Role
    assert tpu["automountServiceAccountToken"] is False
    annotations = manifests[-1]["metadata"]["annotations"]
    assert annotations == {
        "alpha.jobset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-nodepool"
    }
    for spec in (gpu, tpu):  # never two pods of the run on one node
        [term] = spec["affinity"]["podAntiAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]
        assert term["topologyKey"] == "kubernetes.io/hostname"
        assert term["labelSelector"] == {"matchLabels": {kubernetes.JOBSET_LABEL: "dew-step"}}


def test_the_pods_run_as_the_images_user_and_the_priority_class_given():
    spec = pod(generate([*TWO_BY_EIGHT, "--priority-class", "bench-high"]))
    assert k8s_pod.RUN_AS_GPU == "10001:10001"
    assert spec["securityContext"] == {
        "runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001, "fsGroup": 10001,
        "seccompProfile": {"type": "RuntimeDefault"},
    }  # fmt: skip
    dockerfile = (REPO / "docker" / "Dockerfile").read_text()
    assert "useradd --uid 10001 --user-group" in dockerfile and "\nUSER dew\n" in dockerfile
    assert spec["priorityClassName"] == "bench-high"
    assert "priorityClassName" not in pod(generate(TWO_BY_EIGHT))
    spec = pod(generate([*TWO_BY_EIGHT, "--run-as", "2000:3000"]))
    assert (spec["securityContext"]["runAsUser"], spec["securityContext"]["fsGroup"]) == (
        2000,
        3000,
    )


BROKEN = {
    "host namespaces": lambda p: p.update(hostNetwork=True),
    "privileged": lambda p: p["containers"][0]["securityContext"].update(privileged=True),
    "capabilities": lambda p: p["containers"][0]["securityContext"]["capabilities"].update(
        add=["SYS_ADMIN"]
    ),
    "host ports": lambda p: p["containers"][0]["ports"][0].update(hostPort=55527),
    "hostPath": lambda p: p["volumes"].append({"name": "h", "hostPath": {"path": "/"}}),
    "volume types": lambda p: p["volumes"].append({"name": "n", "nfs": {"path": "/"}}),
    "privilege escalation": lambda p: p["containers"][0]["securityContext"].pop(
        "allowPrivilegeEscalation"
    ),
    "running as non-root:": lambda p: p["securityContext"].pop("runAsNonRoot"),
    "running as non-root user": lambda p: p["securityContext"].update(runAsUser=0),
    "seccomp": lambda p: p["securityContext"].pop("seccompProfile"),
    "does not drop ALL": lambda p: p["containers"][0]["securityContext"].pop("capabilities"),
    "SELinux": lambda p: p["securityContext"].update(seLinuxOptions={"type": "spc_t"}),
    "sysctls": lambda p: p["securityContext"].update(sysctls=[{"name": "kernel.msgmax"}]),
}  # fmt: skip


@pytest.mark.parametrize("control", BROKEN)
def test_the_restricted_check_refuses_a_pod_that_breaks_a_control(control):
    spec = copy.deepcopy(pod(generate(TWO_BY_EIGHT)))
    BROKEN[control](spec)
    found = pod_security.violations(spec)
    assert any(control in line for line in found), found


def test_a_wrong_field_fails_validation():
    """The schemas can fail: a misspelt JobSet field, a Job field of the wrong type, a value
    outside the CRD's enum, an unknown pod field, and an unknown field of a Service."""
    manifests = generate(TWO_BY_EIGHT)
    version = VERSIONS[0]

    def broken(change) -> list[str]:
        jobset = copy.deepcopy(manifests[-1])
        change(jobset["spec"])
        return problems(jobset, version)

    network = lambda s: s["network"].update(enableDnsHostnames=True)  # noqa: E731
    assert any("enableDnsHostnames" in line for line in broken(network))
    parallelism = lambda s: s["replicatedJobs"][0]["template"]["spec"].update(parallelism="2")  # noqa: E731
    assert any("parallelism" in line for line in broken(parallelism))
    strategy = lambda s: s["failurePolicy"].update(restartStrategy="Sometimes")  # noqa: E731
    assert any("restartStrategy" in line for line in broken(strategy))
    field = lambda s: s["replicatedJobs"][0]["template"]["spec"]["template"]["spec"].update(  # noqa: E731
        podAntiAffinity={}
    )
    assert any("podAntiAffinity" in line for line in broken(field))
    service = copy.deepcopy(manifests[-2])
    service["spec"]["headless"] = True
    assert problems(service, version) != []


def test_the_crd_is_the_pinned_release_and_the_docs_install_it():
    readme = (CRD_FOLDER / "README.md").read_text()
    assert hashlib.sha256(CRD.read_bytes()).hexdigest() in readme
    assert f"tag `{JOBSET_VERSION}`" in readme
    crd = yaml.safe_load(CRD.read_text())
    assert crd["metadata"]["name"] == "jobsets.jobset.x-k8s.io"
    docs = (REPO / "docs" / "multihost.md").read_text()
    installs = re.findall(r"jobset/releases/download/(v[0-9.]+)/manifests\.yaml", docs)
    assert installs and set(installs) == {JOBSET_VERSION}
    assert json.dumps(crd_validator().schema).count('"additionalProperties": false') > 100
