"""The manifests of a multi-host step benchmark on Kubernetes, from the options the SLURM
recipe takes (`nox -s k8s-manifests`, docs/multihost.md):

    python -m dew.bench.multihost.kubernetes --hosts 2 --devices-per-host 8 \\
        --image registry/dew@sha256:<64 hex> [--out FILE] [-- benchmark_step.py flags]

One YAML stream, applied with `kubectl apply -f`: a ServiceAccount, the Role and
RoleBinding JAX's Kubernetes detection needs (list pods, get jobs; nothing else), the
headless Service the pods find each other through, and a JobSet of one indexed Job, one
pod per host, each holding `--devices-per-host` GPUs (nvidia.com/gpu) and running
`tools/benchmark_step.py` in the image. Process 0 writes the record to the results claim,
`/results/<name>/step.json`. The image is taken by digest only: a tag can move between
the pods' pulls, and a record names what ran. Nothing here resolves a tag (no registry is
asked); a reference without a digest is refused.

`--detection jax` (default) leaves the coordinator, process count and id to JAX's own
Kubernetes detection (jax._src.clusters.k8s_cluster), which asks the API server for this
pod and its Job; the image must hold the `kubernetes` package (`jax[k8s]`). `--detection
env` sets JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and JAX_PROCESS_ID from the JobSet's
names instead, needs no API access and so gets no Role.

Standard library only: the noxfile calls `main` before any environment exists. Bad input
is one line, exit 2.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from dew.bench.common.arguments import OneLineParser
from dew.bench.common.errors import EXIT_OK, EXIT_USAGE, UsageError, WriteFailed, say
from dew.bench.common.files import atomic_write, check_output_file
from dew.bench.multihost import yaml_text

PROG = "k8s-manifests"
# JAX's Kubernetes detection puts the coordinator on this port of pod 0 (K8sCluster.
# _coordinator_port); --detection env uses it too, so both read the same.
COORDINATOR_PORT = 55527
REPLICATED_JOB = "workers"
RESULTS_MOUNT = "/results"
# The tool's own deadlines per case (dew.bench.sweep.settings.case_deadlines, one compile
# job: a cluster's cases compile one at a time): 30 min to compile, 10 min per 100 steps
# to time. In a cluster the cases run in the processes that joined, not in a child the
# tool could kill, so the Job's activeDeadlineSeconds is what ends a hung run.
COMPILE_S, TIMED_S, TIMED_STEPS = 1800.0, 600.0, 100
JOIN_S = 300  # DEW_INIT_TIMEOUT_S's default: the first connection to the coordinator
HEARTBEAT_TIMEOUT_S = 60  # DEW_HEARTBEAT_TIMEOUT_S, as the SLURM recipe sets it
MAX_REPEATS = 15  # --max-repeats' default, the most rounds --repeats auto runs
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}")
DNS_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")  # RFC 1035: Services, JobSets
MAX_HOSTNAME = 63  # a pod's hostname <name>-workers-<job>-<index> is one DNS label
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


def parser() -> argparse.ArgumentParser:
    parse = OneLineParser(
        prog=PROG,
        description=__doc__.split("\n\n")[0],
        hint="tools/benchmark_step.py flags go after a second --",
    )
    parse.add_argument("--hosts", type=int, required=True, help="pods, one per node (>= 1)")
    parse.add_argument("--devices-per-host", type=int, required=True, help="GPUs per pod")
    parse.add_argument("--image", required=True, help="the bench-gpu image, REF@sha256:DIGEST")
    parse.add_argument("--name", default="dew-step", help="the JobSet, Service and account")
    parse.add_argument("--namespace", default="default", help="where every object goes")
    parse.add_argument("--results-claim", default="dew-results", help="a ReadWriteMany PVC")
    parse.add_argument(
        "--case-timeout", type=float, help="seconds per case (default: the tool's deadlines)"
    )
    parse.add_argument(
        "--detection", choices=("jax", "env"), default="jax",
        help="jax: JAX's Kubernetes detection (the image needs jax[k8s]); env: JAX_* variables",
    )  # fmt: skip
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
        if args.detection == "jax":
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
        raise UsageError(f"--devices-per-host {args.devices_per_host}: give 1 or more GPUs")
    if not DIGEST.search(args.image):
        raise UsageError(
            f"--image {args.image} names no digest: give REF@sha256:<64 hex> (after a push, "
            "`podman image inspect --format '{{index .RepoDigests 0}}' TAG`); a tag can move "
            "between the pods' pulls and is not resolved here"
        )
    for flag, value in (("--name", args.name), ("--namespace", args.namespace)):
        if not DNS_LABEL.fullmatch(value) or len(value) > MAX_HOSTNAME:
            raise UsageError(f"{flag} {value!r} is not a DNS label (a-z, 0-9, -; 63 at most)")
    hostname = pod_hostname(args.name, args.hosts - 1)
    if len(hostname) > MAX_HOSTNAME:
        raise UsageError(
            f"--name {args.name!r} makes pod hostnames like {hostname} ({len(hostname)} "
            f"characters); a hostname is at most {MAX_HOSTNAME}: give a shorter --name"
        )
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", args.results_claim):
        raise UsageError(f"--results-claim {args.results_claim!r} is not a claim name")
    if args.case_timeout is not None and not 0 < args.case_timeout < math.inf:
        raise UsageError(f"--case-timeout {args.case_timeout:g} is not a number of seconds > 0")
    if _value(args.tool_args, "--json-out") is not None:
        raise UsageError(f"--json-out is the manifests': the record goes to {record_path(args)}")
    run_deadline(args)  # its refusal, before anything is written


def pod_hostname(name: str, index: int) -> str:
    """The hostname the JobSet gives the pod of this completion index (in Job 0)."""
    return f"{name}-{REPLICATED_JOB}-0-{index}"


def record_path(args: argparse.Namespace) -> str:
    return f"{RESULTS_MOUNT}/{args.name}/step.json"


def devices(args: argparse.Namespace) -> int:
    return args.hosts * args.devices_per_host


def tool_args(args: argparse.Namespace) -> list[str]:
    """The step tool's flags: the user's, else the GPU recipe's (simple_dit, 8 samples per
    device, one fsdp axis over every device); a mesh over every device unless given."""
    given = list(args.tool_args)
    if not given:
        case = {"architecture": "simple_dit", "batch": 8 * devices(args)}
        given = ["--preset", "small", "--cases", json.dumps([case])]
    if _value(given, "--mesh") is None:
        given += ["--mesh", json.dumps({"fsdp": devices(args)})]
    return [*given, "--json-out", record_path(args)]


def _value(args: Sequence[str], name: str) -> str | None:
    """The last value of `--name VALUE` or `--name=VALUE` (the one the tool keeps)."""
    found = None
    for index, arg in enumerate(args):
        if arg == name:
            found = args[index + 1] if index + 1 < len(args) else ""
        elif arg.startswith(name + "="):
            found = arg.split("=", 1)[1]
    return found


def run_deadline(args: argparse.Namespace) -> int:
    """The Job's activeDeadlineSeconds: the time to join, then every case's deadline for
    each of its repeats. Counting the cases needs them named (`--cases`, `--step`): the
    presets are not readable with the standard library alone."""
    flags = tool_args(args)
    cases_json, step = _value(flags, "--cases"), _value(flags, "--step")
    if cases_json is None and step is None:
        raise UsageError(
            "name the cases with --cases JSON (or --step): the run's deadline is the "
            "per-case deadline times the cases, and a preset's cases are not counted here"
        )
    try:
        cases = json.loads(cases_json) if cases_json is not None else []
    except ValueError as error:
        raise UsageError(f"--cases is not valid JSON: {error}") from None
    if not isinstance(cases, list):
        raise UsageError("--cases is not a JSON list of cases")
    count = len(cases) + (step is not None)
    repeats_text = _value(flags, "--repeats") or "1"
    if repeats_text == "auto":
        repeats_text = _value(flags, "--max-repeats") or str(MAX_REPEATS)
    if not repeats_text.isdigit() or int(repeats_text) < 1:
        raise UsageError(f"--repeats {repeats_text!r} is not a number of repeats")
    steps_text = _value(flags, "--steps") or str(TIMED_STEPS)
    if not steps_text.isdigit():
        raise UsageError(f"--steps {steps_text!r} is not a number of steps")
    per_case = args.case_timeout or COMPILE_S + TIMED_S * max(1.0, int(steps_text) / TIMED_STEPS)
    return JOIN_S + math.ceil(per_case * count * int(repeats_text))


# --- the objects -------------------------------------------------------------------------


def manifests(args: argparse.Namespace) -> list[dict]:
    """ServiceAccount, (Role, RoleBinding,) Service, JobSet: in the order they must exist."""
    objects = [service_account(args)]
    if args.detection == "jax":
        objects += [role(args), role_binding(args)]
    return [*objects, headless_service(args), jobset(args)]


def _metadata(args: argparse.Namespace, name: str | None = None) -> dict:
    labels = {"app.kubernetes.io/name": "dew", "app.kubernetes.io/instance": args.name}
    return {"name": name or args.name, "namespace": args.namespace, "labels": labels}


def service_account(args: argparse.Namespace) -> dict:
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _metadata(args)}
    # Without the API (env detection) no token is mounted at all.
    return account | ({} if args.detection == "jax" else {"automountServiceAccountToken": False})


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
            "ports": [{"name": "coordinator", "port": COORDINATOR_PORT}],
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
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": _metadata(args),
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
    gpus = {"nvidia.com/gpu": args.devices_per_host}
    container = {
        "name": "dew",
        "image": args.image,
        "command": ["python", "tools/benchmark_step.py"],
        "args": tool_args(args),
        "env": environment(args),
        "ports": [{"name": "coordinator", "containerPort": COORDINATOR_PORT}],
        "resources": {"requests": gpus, "limits": gpus},
        "volumeMounts": [
            {"name": "results", "mountPath": RESULTS_MOUNT},
            {"name": "shm", "mountPath": "/dev/shm"},
        ],
    }
    return {
        "serviceAccountName": args.name,
        "automountServiceAccountToken": args.detection == "jax",
        "restartPolicy": "Never",
        "containers": [container],
        "volumes": [
            {"name": "results", "persistentVolumeClaim": {"claimName": args.results_claim}},
            # NCCL's buffers live in /dev/shm, 64 MiB in a container by default
            {"name": "shm", "emptyDir": {"medium": "Memory"}},
        ],
    }


def environment(args: argparse.Namespace) -> list[dict]:
    """The pod's variables: the platform, the watch's timeout, the facts the record names
    the pod by and, with --detection env, the cluster JAX would otherwise detect."""
    values = {
        "JAX_PLATFORMS": "cuda",
        "DEW_INIT_TIMEOUT_S": str(JOIN_S),  # the join, pod 0's name included: the deadline's
        "DEW_HEARTBEAT_TIMEOUT_S": str(HEARTBEAT_TIMEOUT_S),
    }
    if args.detection == "jax":  # a pod that cannot detect the cluster stops in one line
        values["DEW_CLUSTER"] = "kubernetes"
    else:
        coordinator = f"{pod_hostname(args.name, 0)}.{args.name}:{COORDINATOR_PORT}"
        values |= {"JAX_COORDINATOR_ADDRESS": coordinator, "JAX_NUM_PROCESSES": str(args.hosts)}
    env = [{"name": name, "value": value} for name, value in values.items()]
    fields = dict(POD_FIELDS)
    if args.detection == "env":
        fields["JAX_PROCESS_ID"] = COMPLETION_INDEX
    env += [
        {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}
        for name, path in fields.items()
    ]
    return env


if __name__ == "__main__":
    sys.exit(main())
