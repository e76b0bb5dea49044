"""The manifests of a multi-host step benchmark on Kubernetes, from the options the SLURM
recipe takes (`nox -s k8s-manifests`, docs/multihost.md):

    python -m dew.bench.multihost.kubernetes --hosts 2 --devices-per-host 8 \\
        --image registry/dew@sha256:<64 hex> [--out FILE] [-- benchmark_step.py flags]

One YAML stream, applied with `kubectl apply -f`: a ServiceAccount, the Role and
RoleBinding JAX's Kubernetes detection needs (list pods, get jobs; nothing else), the
headless Service the pods find each other through, and a JobSet of one indexed Job, one
pod per host (pod anti-affinity on the node's hostname), each holding `--devices-per-host`
GPUs (nvidia.com/gpu) or, with `--accelerator tpu-... --topology AxB`, the chips of one
host of a GKE TPU slice (k8s_accelerator), and running `tools/benchmark_step.py` in the
image. Process 0 writes the record to the results claim, `/results/<name>/step.json`.
GPU pods pass a namespace that enforces the "restricted" Pod Security level, TPU pods the
"baseline" level (they run as root, as GKE's TPU examples do); each requests CPU and memory
and has a writable home (k8s_pod says why).
The image is taken by digest only: a tag can move between the pods' pulls, and a record
names what ran. Nothing here resolves a tag (no registry is asked); a reference without a
digest is refused.

For GPUs, `--detection jax` (default) leaves the coordinator, process count and id to JAX's own
Kubernetes detection (jax._src.clusters.k8s_cluster), which asks the API server for this
pod and its Job; the image must hold the `kubernetes` package (`jax[k8s]`). `--detection
env` sets JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and JAX_PROCESS_ID from the JobSet's
names instead, needs no API access and so gets no Role. On a TPU slice JAX's GKE TPU
detection reads what GKE puts in the pods: no API access, no Role, no --detection.

Standard library only: the noxfile calls `main` before any environment exists. Bad input
is one line, exit 2.
"""

from __future__ import annotations

import argparse
import math
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from dew.bench.common.arguments import OneLineParser
from dew.bench.common.errors import EXIT_OK, EXIT_USAGE, UsageError, WriteFailed, say
from dew.bench.common.files import atomic_write, check_output_file
from dew.bench.multihost import k8s_accelerator, k8s_names, k8s_pod, yaml_text
from dew.bench.multihost.k8s_accelerator import Accelerator
from dew.bench.multihost.k8s_run import (
    JOIN_S,
    RESULTS_MOUNT,
    record_path,
    run_deadline,
    tool_args,
    value,
)

PROG = "k8s-manifests"
COORDINATOR_PORT = k8s_accelerator.GPU_COORDINATOR_PORT
REPLICATED_JOB = "workers"
HEARTBEAT_TIMEOUT_S = 60  # DEW_HEARTBEAT_TIMEOUT_S, as the SLURM recipe sets it
# Labels the JobSet controller and the Job controller put on every pod, read back through
# the downward API into the variables dew.bench.record.capture names the pod by.
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"
JOB_LABEL = "job-name"
POD_FIELDS = {
    "DEW_POD_NAME": "metadata.name",
    "DEW_POD_NAMESPACE": "metadata.namespace",
    "DEW_NODE_NAME": "spec.nodeName",
    "DEW_JOB_NAME": f"metadata.labels['{JOB_LABEL}']",
    "DEW_JOBSET_NAME": f"metadata.labels['{JOBSET_LABEL}']",
}
JAX_DETECTION_NEEDS = (
    "--detection jax: the image must hold the `kubernetes` package (jax[k8s]); dew's CUDA "
    "images do (locks/cuda12.txt, cuda13.txt), another image without it stops each pod in "
    "one line: give that one --detection env"
)
COMPLETION_INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
# JobSet's exclusive placement: each Job alone in one topology domain (here a node pool,
# so the hosts of a TPU slice are one slice's). Not used per node: it puts all of a Job's
# pods in one domain, and one pod per node is the anti-affinity below.
EXCLUSIVE_TOPOLOGY = "alpha.jobset.sigs.k8s.io/exclusive-topology"
HOSTNAME_LABEL = "kubernetes.io/hostname"


def parser() -> argparse.ArgumentParser:
    parse = OneLineParser(
        prog=PROG,
        description=__doc__.split("\n\n")[0],
        hint="tools/benchmark_step.py flags go after a second --",
    )
    parse.add_argument("--hosts", type=int, required=True, help="pods, one per node (>= 1)")
    parse.add_argument(
        "--devices-per-host", type=int, required=True, help="GPUs (or TPU chips) per pod"
    )
    parse.add_argument("--image", required=True, help="the bench-gpu image, REF@sha256:DIGEST")
    parse.add_argument(
        "--accelerator", choices=k8s_accelerator.CHOICES, default=k8s_accelerator.GPU,
        help="nvidia-gpu, or a GKE TPU (cloud.google.com/gke-tpu-accelerator) with --topology",
    )  # fmt: skip
    parse.add_argument("--topology", help="the TPU slice's, e.g. 2x4 (gke-tpu-topology)")
    parse.add_argument("--name", default="dew-step", help="the JobSet, Service and account")
    parse.add_argument("--namespace", default="default", help="where every object goes")
    parse.add_argument("--results-claim", default="dew-results", help="a ReadWriteMany PVC")
    parse.add_argument(
        "--case-timeout", type=float, help="seconds per case (default: the tool's deadlines)"
    )
    parse.add_argument(
        "--detection", choices=("jax", "env"),
        help="GPUs: jax (default): JAX's Kubernetes detection (the image needs jax[k8s]); "
        "env: JAX_* variables, no API access",
    )  # fmt: skip
    parse.add_argument(
        "--run-as",
        help=f"UID:GID the pods run as (default: GPUs {k8s_pod.RUN_AS_GPU}, the image's dew "
        f"user, never root; TPUs {k8s_pod.RUN_AS_TPU}, root, as GKE's TPU examples)",
    )
    parse.add_argument(
        "--cpu", help=f"CPUs each pod requests (default {k8s_pod.CPU_PER_DEVICE} per device)"
    )
    parse.add_argument(
        "--memory",
        help=f"memory each pod requests (default {k8s_pod.MEMORY_PER_DEVICE_GI}Gi per device)",
    )
    parse.add_argument("--priority-class", help="the pods' PriorityClass (default: none)")
    parse.add_argument("--out", type=Path, help="write here (default: stdout)")
    parse.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    parse.add_argument("tool_args", nargs="*", help="after --: tools/benchmark_step.py flags")
    return parse


def main(argv: Sequence[str] | None = None, exit_on_error: bool = False) -> int:
    """Write the manifests; the exit code. `exit_on_error`: raise SystemExit with it instead
    of returning a failure (the nox session: nox's own exit code is 1 whatever failed)."""
    code = _write(sys.argv[1:] if argv is None else list(argv))
    if code != EXIT_OK and exit_on_error:
        raise SystemExit(code)
    return code


def _write(argv: list[str]) -> int:
    try:
        args = parser().parse_args(argv)  # not intermixed: the tool's flags follow a --
        text = manifests_text(args, argv)
        if args.out is None:
            sys.stdout.write(text)
        else:
            check_output_file(args.out, flag="--out", overwrite=args.overwrite)
            atomic_write(args.out, text)
            print(f"{PROG}: wrote {args.out}", file=sys.stderr)
        if detection(args) == "jax":
            print(f"{PROG}: {JAX_DETECTION_NEEDS}", file=sys.stderr)
    except UsageError as error:
        say(PROG, str(error))
        return EXIT_USAGE
    except WriteFailed as error:
        say(PROG, str(error))
        return 1
    return EXIT_OK


def manifests_text(args: argparse.Namespace, argv: Sequence[str]) -> str:
    """The YAML stream, headed by the command that made it."""
    check(args)
    objects = manifests(args)
    header = [
        f"Generated by `nox -s k8s-manifests -- {shlex.join(_without_output(argv))}`",
        "(dew.bench.multihost.kubernetes; docs/multihost.md says what it needs and how",
        "results come back). Apply: kubectl apply -f THIS_FILE",
        "Follow every pod's log (kubectl follows at most 5 unless told):",
        f"  {follow_logs(args)}",
    ]
    return yaml_text.documents(objects, header)


def _without_output(argv: Sequence[str]) -> list[str]:
    """The command line less where it wrote: the same manifests wherever they are kept."""
    kept, skip = [], False
    for arg in argv:
        if skip or arg == "--overwrite" or arg.startswith("--out="):
            skip = False
            continue
        skip = arg == "--out"
        if not skip:
            kept.append(arg)
    return kept


def check(args: argparse.Namespace) -> None:
    """Refuse, in one line, what would fail only once the pods run (or never start)."""
    if args.hosts < 1:
        raise UsageError(f"--hosts {args.hosts} is not a number of pods; give 1 or more")
    if args.devices_per_host < 1:
        raise UsageError(f"--devices-per-host {args.devices_per_host}: give 1 or more")
    accelerator(args)  # its refusal: a topology that does not fit, --topology for GPUs
    if args.detection is not None and args.accelerator != k8s_accelerator.GPU:
        raise UsageError("--detection is for GPUs: on a TPU slice JAX's GKE TPU detection joins")
    k8s_names.check_image(args.image)
    k8s_names.check_jobset_name(args.name, REPLICATED_JOB, args.hosts)
    k8s_names.check_label("--namespace", args.namespace)
    k8s_names.check_subdomain("--results-claim", args.results_claim)
    if args.priority_class is not None:
        k8s_names.check_subdomain("--priority-class", args.priority_class)
    run_as(args)  # its refusal: root on GPUs, or not numeric
    pod_requests(args)  # its refusal: not a quantity
    if args.case_timeout is not None and not 0 < args.case_timeout < math.inf:
        raise UsageError(f"--case-timeout {args.case_timeout:g} is not a number of seconds > 0")
    if value(args.tool_args, "--json-out") is not None:
        raise UsageError(f"--json-out is the manifests': the record goes to {record_path(args)}")
    run_deadline(args)  # its refusal, before anything is written


def accelerator(args: argparse.Namespace) -> Accelerator:
    return k8s_accelerator.accelerator(
        args.accelerator, args.topology, args.hosts, args.devices_per_host
    )


def detection(args: argparse.Namespace) -> str | None:
    """How GPU pods join: "jax" (default) or "env"; None on a TPU slice (GKE's variables)."""
    if args.accelerator != k8s_accelerator.GPU:
        return None
    return args.detection or "jax"


def run_as(args: argparse.Namespace) -> tuple[int, int]:
    return k8s_pod.run_as(args.run_as, accelerator(args).tpu)


def pod_requests(args: argparse.Namespace) -> dict[str, str]:
    return k8s_pod.requests(args.cpu, args.memory, args.devices_per_host)


def follow_logs(args: argparse.Namespace) -> str:
    """The command that follows every pod's log at once: by default kubectl follows at
    most 5 (--max-log-requests) and refuses a selector that matches more."""
    return (
        f"kubectl logs -f -n {args.namespace} -l {JOBSET_LABEL}={args.name} --prefix "
        f"--max-log-requests {args.hosts}"
    )


def pod_hostname(name: str, index: int) -> str:
    """The hostname the JobSet gives the pod of this completion index (in Job 0)."""
    return f"{name}-{REPLICATED_JOB}-0-{index}"


# --- the objects -------------------------------------------------------------------------


def manifests(args: argparse.Namespace) -> list[dict]:
    """ServiceAccount, (Role, RoleBinding,) Service, JobSet: in the order they must exist."""
    objects = [service_account(args)]
    if detection(args) == "jax":
        objects += [role(args), role_binding(args)]
    return [*objects, headless_service(args), jobset(args)]


def _metadata(args: argparse.Namespace, name: str | None = None) -> dict:
    labels = {"app.kubernetes.io/name": "dew", "app.kubernetes.io/instance": args.name}
    return {"name": name or args.name, "namespace": args.namespace, "labels": labels}


def service_account(args: argparse.Namespace) -> dict:
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _metadata(args)}
    # Without the API (env detection) no token is mounted at all.
    return account | ({} if detection(args) == "jax" else {"automountServiceAccountToken": False})


def role(args: argparse.Namespace) -> dict:
    """What K8sCluster asks the API server, and nothing more: list pods (its own, by IP)
    and get its Job (the process count, the JobSet label). It lists services only for a
    Job outside a JobSet, to explain a missing subdomain: not granted."""
    rules = [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get"]},
    ]
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _metadata(args),
        "rules": rules,
    }


def role_binding(args: argparse.Namespace) -> dict:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _metadata(args),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": args.name},
        "subjects": [{"kind": "ServiceAccount", "name": args.name, "namespace": args.namespace}],
    }


def headless_service(args: argparse.Namespace) -> dict:
    """The JobSet's subdomain, named as the JobSet: JAX's detection puts the coordinator at
    `<job>-0.<jobset name>`. The JobSet controller finds it and creates no other.
    Addresses are published before the pods are ready: they must find each other to be."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(args),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {JOBSET_LABEL: args.name},
            "ports": [{"name": "coordinator", "port": accelerator(args).coordinator_port}],
        },
    }


def jobset(args: argparse.Namespace) -> dict:
    job = {
        "parallelism": args.hosts,
        "completions": args.hosts,
        "completionMode": "Indexed",  # JOB_COMPLETION_INDEX: the process id
        "backoffLimit": 0,  # a dead pod fails the run: a case is not resumable mid-way
        "activeDeadlineSeconds": run_deadline(args),
        "template": {"spec": pod_spec(args)},
    }
    metadata = _metadata(args)
    if accelerator(args).tpu and args.hosts > 1:  # a slice's hosts are one node pool's
        metadata["annotations"] = {EXCLUSIVE_TOPOLOGY: k8s_accelerator.NODE_POOL_LABEL}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": metadata,
        "spec": {
            "failurePolicy": {"maxRestarts": 0},
            "network": {
                "enableDNSHostnames": True,  # <name>-workers-0-<index>.<name>
                "subdomain": args.name,
                "publishNotReadyAddresses": True,
            },
            "replicatedJobs": [{"name": REPLICATED_JOB, "replicas": 1, "template": {"spec": job}}],
        },
    }


def pod_spec(args: argparse.Namespace) -> dict:
    chosen = accelerator(args)
    devices = {chosen.resource: chosen.count}
    uid, gid = run_as(args)
    container = {
        "name": "dew",
        "image": args.image,
        "command": ["python", "tools/benchmark_step.py"],
        "args": tool_args(args),
        "env": environment(args),
        "ports": [{"name": "coordinator", "containerPort": chosen.coordinator_port}],
        # CPU and memory requested, not limited (k8s_pod); the devices both, as they must be
        "resources": {"requests": pod_requests(args) | devices, "limits": devices},
        "securityContext": k8s_pod.container_context(uid),
        "volumeMounts": [
            {"name": "results", "mountPath": RESULTS_MOUNT},
            {"name": "shm", "mountPath": "/dev/shm"},
            k8s_pod.home_mount(),
        ],
    }
    spec = {
        "serviceAccountName": args.name,
        "automountServiceAccountToken": detection(args) == "jax",
        "restartPolicy": "Never",
        "securityContext": k8s_pod.pod_context(uid, gid),
        "affinity": one_pod_per_node(args),
        "tolerations": chosen.tolerations(),
    }
    if chosen.node_selector:
        spec["nodeSelector"] = dict(chosen.node_selector)
    if args.priority_class is not None:
        spec["priorityClassName"] = args.priority_class
    return spec | {
        "containers": [container],
        "volumes": [
            {"name": "results", "persistentVolumeClaim": {"claimName": args.results_claim}},
            # NCCL's buffers live in /dev/shm, 64 MiB in a container by default
            {"name": "shm", "emptyDir": {"medium": "Memory"}},
            k8s_pod.home_volume(),
        ],
    }


def one_pod_per_node(args: argparse.Namespace) -> dict:
    """No two of this JobSet's pods on one node: each pod is one host of the run."""
    term = {
        "labelSelector": {"matchLabels": {JOBSET_LABEL: args.name}},
        "topologyKey": HOSTNAME_LABEL,
    }
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def environment(args: argparse.Namespace) -> list[dict]:
    """The pod's variables: the platform, the join's and the watch's timeouts, the facts
    the record names the pod by and, with --detection env, the cluster JAX would otherwise
    detect."""
    chosen = accelerator(args)
    values = {
        "JAX_PLATFORMS": chosen.platform,
        **k8s_pod.home_environment(),  # writable whatever the user (k8s_pod)
        "DEW_INIT_TIMEOUT_S": str(JOIN_S),  # the join, pod 0's name included: the deadline's
        "DEW_HEARTBEAT_TIMEOUT_S": str(HEARTBEAT_TIMEOUT_S),
    }
    if chosen.tpu:  # a slice's pods join through JAX's GKE TPU detection; one host alone
        # (said outright: an image with the kubernetes package would try JAX's Kubernetes
        # detection, which needs the token these pods do not mount)
        values |= {"DEW_CLUSTER": "gke-tpu"} if args.hosts > 1 else {"DEW_NUM_PROCESSES": "1"}
    elif detection(args) == "jax":  # a pod that cannot detect the cluster stops in one line
        values["DEW_CLUSTER"] = "kubernetes"
    else:
        coordinator = f"{pod_hostname(args.name, 0)}.{args.name}:{COORDINATOR_PORT}"
        values |= {"JAX_COORDINATOR_ADDRESS": coordinator, "JAX_NUM_PROCESSES": str(args.hosts)}
    env = [{"name": name, "value": value} for name, value in values.items()]
    fields = dict(POD_FIELDS)
    if detection(args) == "env":
        fields["JAX_PROCESS_ID"] = COMPLETION_INDEX
    env += [
        {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}
        for name, path in fields.items()
    ]
    return env


if __name__ == "__main__":
    sys.exit(main())
