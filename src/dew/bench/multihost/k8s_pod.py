"""What a pod of the Kubernetes manifests runs with besides its command
(dew.bench.multihost.kubernetes): the user and the security contexts, the CPU and memory it
requests, and a writable home. Standard library only.

The user. GPU pods pass the "restricted" Pod Security level: a numeric non-root user
(`--run-as`, the image's `dew` user by default), no privilege escalation, no capabilities,
the runtime's default seccomp profile; NVIDIA's device files are open to any user. TPU pods
run as GKE's own TPU examples do: as root, with the runtime's default capabilities, not
privileged. GKE documents `privileged: true` as "Required for GKE versions earlier than 1.28
to access TPUs" (https://cloud.google.com/kubernetes-engine/docs/concepts/node-auto-provisioning,
its TPU Deployment example), so these manifests need GKE 1.28 or later; no GKE document or
example shows a non-root user opening the chip (the device files the device plugin hands
the container keep the node's owner and mode), so root it is, which the "baseline" level
admits and "restricted" does not. A non-root `--run-as` on a TPU gets the restricted
contexts, untested.

The home. A user with no passwd entry in the image (any `--run-as` of an image not built
for it) gets HOME=/, which it cannot write: the default compilation cache
(dew.train.trainer.default_compilation_cache_dir: $XDG_CACHE_HOME, else ~/.cache) would fail
every case. So every pod has an emptyDir at HOME_MOUNT, with HOME and XDG_CACHE_HOME in it.

Requests. CPU and memory are requested, so that the scheduler counts them and the pods are
not the first evicted: by default 2 CPUs and 8 GiB per device the pod holds (GKE's smallest
TPU host, ct5lp-hightpu-1t, has 24 vCPUs and 48 GB for its one chip). No CPU or memory
limit: a CFS quota would throttle the host side of a timed step, and a memory limit would
end a run at an arbitrary line.
"""

from __future__ import annotations

import re

from dew.bench.common.errors import UsageError

RUN_AS_GPU = "10001:10001"  # the image's `dew` user and group (docker/Dockerfile)
RUN_AS_TPU = "0:0"  # root, as GKE's TPU examples run
HOME_MOUNT = "/dew-home"
HOME_VOLUME = "home"
CPU_PER_DEVICE = 2
MEMORY_PER_DEVICE_GI = 8
# Kubernetes quantities (k8s.io/apimachinery resource.Quantity), the forms a user writes:
# CPUs as a number (up to 3 decimals) or millicores; memory in bytes with an SI or binary
# suffix.
CPU = re.compile(r"(\d+(\.\d{1,3})?|\d+m)")
MEMORY = re.compile(r"\d+(\.\d+)?(k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?")


def run_as(text: str | None, tpu: bool) -> tuple[int, int]:
    """(uid, gid) of --run-as (default: the accelerator's): numeric, so the kubelet can
    verify runAsNonRoot; root only on a TPU, where GKE's examples run as root."""
    text = text if text is not None else (RUN_AS_TPU if tpu else RUN_AS_GPU)
    uid, _, gid = text.partition(":")
    if not (uid.isdigit() and gid.isdigit()):
        raise UsageError(f"--run-as {text!r} is not UID:GID, two numbers (default {RUN_AS_GPU})")
    if not tpu and (int(uid) == 0 or int(gid) == 0):
        raise UsageError(
            f"--run-as {text!r} is root: GPU pods run as a user other than root (default "
            f"{RUN_AS_GPU}, the image's dew user)"
        )
    return int(uid), int(gid)


def pod_context(uid: int, gid: int) -> dict:
    """The pod's securityContext. Numeric ids, so the kubelet can check runAsNonRoot before
    the container starts; the results volume is given the group (where its driver
    supports fsGroup)."""
    if uid == 0:
        return {"runAsUser": 0, "runAsGroup": gid, "seccompProfile": {"type": "RuntimeDefault"}}
    return {
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": gid,
        "fsGroup": gid,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_context(uid: int) -> dict:
    """The container's securityContext: the restricted level's rules for a non-root user;
    for root (a TPU pod) the runtime's default capabilities, as GKE's TPU examples have."""
    if uid == 0:
        return {"allowPrivilegeEscalation": False}
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def requests(cpu: str | None, memory: str | None, devices: int) -> dict[str, str]:
    """The pod's CPU and memory requests: the given quantities, else per device."""
    cpu = cpu if cpu is not None else str(CPU_PER_DEVICE * devices)
    memory = memory if memory is not None else f"{MEMORY_PER_DEVICE_GI * devices}Gi"
    if not CPU.fullmatch(cpu) or not float(cpu.removesuffix("m")) > 0:
        raise UsageError(f"--cpu {cpu!r} is not a number of CPUs > 0 (e.g. 8, 0.5, 500m)")
    if not MEMORY.fullmatch(memory) or not float(re.match(r"[\d.]+", memory)[0]) > 0:
        raise UsageError(f"--memory {memory!r} is not an amount of memory > 0 (e.g. 64Gi, 512Mi)")
    return {"cpu": cpu, "memory": memory}


def home_environment() -> dict[str, str]:
    return {"HOME": HOME_MOUNT, "XDG_CACHE_HOME": f"{HOME_MOUNT}/.cache"}


def home_mount() -> dict:
    return {"name": HOME_VOLUME, "mountPath": HOME_MOUNT}


def home_volume() -> dict:
    return {"name": HOME_VOLUME, "emptyDir": {}}
