"""What a pod of the Kubernetes manifests holds (dew.bench.multihost.kubernetes): NVIDIA GPUs
(the default), or the hosts of one TPU slice in a GKE node pool. For each, the resource it
requests, the node selectors, the taint its nodes carry, JAX's platform, and how the pods
form the runtime. Standard library only.

A GKE TPU slice is named by its accelerator and topology (the node labels
cloud.google.com/gke-tpu-accelerator and cloud.google.com/gke-tpu-topology); each pod takes
every chip of its node (google.com/tpu: chips per host), and GKE's webhook gives the pods of
an indexed Job TPU_WORKER_HOSTNAMES and TPU_WORKER_ID, which JAX's own GKE TPU detection
reads. Topologies and chips per host are GKE's ("Plan TPUs in GKE"): v5e and v6e slices are
2D; 2x4 is one host of 8 chips (ct5lp-hightpu-8t, ct6e-standard-8t) or two of 4 (-4t).
"""

from __future__ import annotations

import dataclasses

from dew.bench.common.errors import UsageError

GPU = "nvidia-gpu"
GPU_RESOURCE = "nvidia.com/gpu"
TPU_RESOURCE = "google.com/tpu"
TPU_ACCELERATOR_LABEL = "cloud.google.com/gke-tpu-accelerator"
TPU_TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-topology"
NODE_POOL_LABEL = "cloud.google.com/gke-nodepool"
# Where JAX's Kubernetes detection puts the coordinator (K8sCluster._coordinator_port);
# --detection env uses it too, so both read the same.
GPU_COORDINATOR_PORT = 55527
TPU_COORDINATOR_PORT = 8482  # JAX's TPU clusters' (cloud_tpu_cluster.coordinator_port)
# A 2D slice's topology -> the chips per host of the machine types that make it.
_SLICES_2D = {
    "1x1": (1,),
    "2x2": (4,),
    "2x4": (8, 4),
    "4x4": (4,),
    "4x8": (4,),
    "8x8": (4,),
    "8x16": (4,),
    "16x16": (4,),
}
TPUS = {"tpu-v5-lite-podslice": _SLICES_2D, "tpu-v6e-slice": _SLICES_2D}  # v5e, v6e
CHOICES = (GPU, *TPUS)


@dataclasses.dataclass(frozen=True)
class Accelerator:
    """One pod's share: `count` of `resource`, on nodes matching `node_selector`."""

    name: str
    resource: str
    count: int
    platform: str  # JAX_PLATFORMS
    coordinator_port: int
    node_selector: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def tpu(self) -> bool:
        return self.resource == TPU_RESOURCE

    def tolerations(self) -> list[dict]:
        """GKE and the NVIDIA GPU operator taint accelerator nodes with the resource's name."""
        return [{"key": self.resource, "operator": "Exists", "effect": "NoSchedule"}]


def fits(topology: str, tpu: str) -> list[tuple[int, int]]:
    """(hosts, chips per host) for each machine type that makes this slice."""
    chips = 1
    for side in topology.split("x"):
        chips *= int(side)
    return [(chips // per_host, per_host) for per_host in TPUS[tpu][topology]]


def accelerator(name: str, topology: str | None, hosts: int, per_host: int) -> Accelerator:
    """The accelerator of `--accelerator`, checked against `--topology`, `--hosts` and
    `--devices-per-host`; UsageError in one line when they do not fit."""
    if name == GPU:
        if topology is not None:
            raise UsageError("--topology is a TPU slice's: give it with a TPU --accelerator")
        return Accelerator(GPU, GPU_RESOURCE, per_host, "cuda", GPU_COORDINATOR_PORT)
    slices = TPUS[name]
    if topology not in slices:
        given = "no --topology" if topology is None else f"--topology {topology!r}"
        raise UsageError(
            f"{given}: a {name} slice on GKE is one of {', '.join(slices)} (its node pool's "
            f"{TPU_TOPOLOGY_LABEL})"
        )
    shapes = fits(topology, name)
    if (hosts, per_host) not in shapes:
        valid = " or ".join(f"--hosts {h} --devices-per-host {c}" for h, c in shapes)
        raise UsageError(
            f"--hosts {hosts} --devices-per-host {per_host} does not fit a {name} {topology} "
            f"slice ({shapes[0][0] * shapes[0][1]} chips): give {valid}"
        )
    selector = {TPU_ACCELERATOR_LABEL: name, TPU_TOPOLOGY_LABEL: topology}
    return Accelerator(name, TPU_RESOURCE, per_host, "tpu", TPU_COORDINATOR_PORT, selector)
