"""Joining JAX's distributed runtime from the environment, before the backend starts.

    from dew.train import distributed
    cluster = distributed.initialize()   # None: a single process, nothing to join

Where the coordinator, the process count and this process's id come from, first match wins:
- DEW_COORDINATOR_ADDRESS, DEW_NUM_PROCESSES, DEW_PROCESS_ID (what `dew.bench.multihost.launch`
  sets for loopback processes), else JAX's own JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES,
  JAX_PROCESS_ID (a Kubernetes indexed Job sets these from the completion index);
- a SLURM step with more than one task (SLURM_NTASKS > 1): JAX's SLURM detection reads the
  node list, task count and task id itself;
- a pod of a multi-host TPU slice on GKE (DEW_CLUSTER=gke-tpu, which
  dew.bench.multihost.kubernetes sets): JAX's GKE TPU detection reads TPU_WORKER_HOSTNAMES
  and TPU_WORKER_ID, which GKE puts in the pod;
- a Kubernetes pod where JAX's own detection works (the `kubernetes` package is installed);
  DEW_CLUSTER=kubernetes (dew.bench.multihost.kubernetes sets it) makes a pod where it
  cannot a one-line error rather than a process alone.

JAX is told which of its detections to use (`cluster_detection_method`): left to itself
it tries each in turn, and its Kubernetes one reads the pod's service-account token, which
a pod given the variables (dew's --detection env) has none of: "Service token file does
not exist" before the runtime forms.

On CPU the cross-process collectives need gloo, which must be chosen before the backend
starts. A dead peer must not hang the others: the runtime's heartbeat timeout
(DEW_HEARTBEAT_TIMEOUT_S, default 30) makes every other process stop, and the initial
join gives up after DEW_INIT_TIMEOUT_S (default 300): first waiting for the coordinator's
name to resolve (a pod 0 still being scheduled has none yet; JAX's own Kubernetes detection
gives up after about a minute), then, in every process but the coordinator, for its port to
accept a connection (a pod 0 that has its address but whose process has not started: its
image still pulling), then for the whole cluster. Each wait ends in one line: the first two
as DistributedSetupError, the last (a process waiting in JAX's join for a peer that never
came) from a watch that stops the process with EXIT_PEER_LOST before JAX's own deadline,
whose reaction is a fatal abort (exit 134, a multi-line log and a stack dump). After the
join a PeerWatch does the same for a peer lost mid-run ("dew: process 0 of 2 stops:
process 1 stopped answering 15 s ago"): under SLURM or Kubernetes that line is what a user
reads.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import sys
import threading
import time
from collections.abc import Mapping

INIT_TIMEOUT_S = 300
HEARTBEAT_TIMEOUT_S = 30
SHUTDOWN_TIMEOUT_S = 30
EXIT_PEER_LOST = 3  # a process stopped because the run lost a peer (or its coordinator)
# JAX's join is given this much longer than DEW_INIT_TIMEOUT_S, so that dew's one line,
# not JAX's abort, ends a join that never completes.
JOIN_GRACE_S = 15
# (dew's name, JAX's name) for each setting; dew's wins where both are set.
# JAX's cluster_detection_method for each of dew's methods: "deactivate" where dew gives
# every setting; None (try each) for Kubernetes, whose detection JAX gives no name.
JAX_DETECTION = {"env": "deactivate", "slurm": "slurm", "gke-tpu": "gketpu", "kubernetes": None}
TPU_HOSTS = ("TPU_PROCESS_ADDRESSES", "TPU_WORKER_HOSTNAMES")  # what JAX's GkeTpuCluster reads
VARIABLES = {
    "coordinator_address": ("DEW_COORDINATOR_ADDRESS", "JAX_COORDINATOR_ADDRESS"),
    "num_processes": ("DEW_NUM_PROCESSES", "JAX_NUM_PROCESSES"),
    "process_id": ("DEW_PROCESS_ID", "JAX_PROCESS_ID"),
}


class DistributedSetupError(ValueError):
    """The environment describes an impossible or incomplete cluster (one line)."""


@dataclasses.dataclass(frozen=True)
class Cluster:
    """How this process joins: `method` is "env", "slurm", "gke-tpu" or "kubernetes"; under
    the last three JAX reads the coordinator, count and id itself (None here).
    `coordinator_host`: the name to wait for before joining, where dew knows it;
    `coordinator_port` (env; else JAX's port for the method, read when joining) and
    `index`, this process's id where the environment says it: every process but 0 waits
    for the coordinator's port before it joins."""

    method: str
    coordinator_address: str | None = None
    num_processes: int | None = None
    process_id: int | None = None
    init_timeout_s: int = INIT_TIMEOUT_S
    heartbeat_timeout_s: int = HEARTBEAT_TIMEOUT_S
    coordinator_host: str | None = None
    coordinator_port: int | None = None
    index: int | None = None


def _first(environ: Mapping[str, str], names: tuple[str, ...]) -> tuple[str, str] | None:
    for name in names:
        value = environ.get(name, "").strip()
        if value:
            return name, value
    return None


def _whole(environ: Mapping[str, str], name: str, default: int, minimum: int) -> int:
    text = environ.get(name, "").strip()
    if not text:
        return default
    if not text.isdigit() or int(text) < minimum:
        raise DistributedSetupError(f"{name}={text!r} is not a whole number >= {minimum}")
    return int(text)


def detect(environ: Mapping[str, str] | None = None) -> Cluster | None:
    """The cluster this process belongs to, or None for a single process.

    Raises DistributedSetupError naming the variable when the settings contradict.
    """
    environ = os.environ if environ is None else environ
    timeouts = {
        "init_timeout_s": _whole(environ, "DEW_INIT_TIMEOUT_S", INIT_TIMEOUT_S, 1),
        "heartbeat_timeout_s": _whole(environ, "DEW_HEARTBEAT_TIMEOUT_S", HEARTBEAT_TIMEOUT_S, 2),
    }
    found = {key: _first(environ, names) for key, names in VARIABLES.items()}
    if found["num_processes"] is not None:
        name, text = found["num_processes"]
        if not text.isdigit() or int(text) < 1:
            raise DistributedSetupError(f"{name}={text!r} is not a process count (a whole >= 1)")
        count = int(text)
        if count == 1:
            return None
        missing = [VARIABLES[key][0] for key, value in found.items() if value is None]
        if missing:
            raise DistributedSetupError(
                f"{name}={count} needs {' and '.join(missing)} (or their JAX_ names) as well"
            )
        id_name, id_text = found["process_id"]
        if not id_text.isdigit() or int(id_text) >= count:
            raise DistributedSetupError(
                f"{id_name}={id_text!r} is not a process id; valid: 0..{count - 1}"
            )
        address = found["coordinator_address"][1]
        if ":" not in address:
            raise DistributedSetupError(
                f"{found['coordinator_address'][0]}={address!r} needs a port (host:port)"
            )
        host, port = address.rsplit(":", 1)
        if not port.isdigit():
            raise DistributedSetupError(
                f"{found['coordinator_address'][0]}={address!r}: the port {port!r} is not a number"
            )
        return Cluster(
            "env", address, count, int(id_text), **timeouts, coordinator_host=host,
            coordinator_port=int(port), index=int(id_text),
        )  # fmt: skip
    if environ.get("SLURM_JOB_ID") and _slurm_tasks(environ) > 1:
        return Cluster("slurm", **timeouts)
    if environ.get("DEW_CLUSTER", "").strip() == "gke-tpu":
        return _gke_tpu(environ, timeouts)
    if environ.get("KUBERNETES_SERVICE_HOST") and _has_kubernetes_client():
        job, jobset = environ.get("DEW_JOB_NAME", ""), environ.get("DEW_JOBSET_NAME", "")
        # Where JAX's detection puts the coordinator in a JobSet: pod 0 of the Job; and the
        # process id it reads, the Job controller's completion index.
        host = f"{job}-0.{jobset}" if job and jobset else None
        index = _index(environ, "JOB_COMPLETION_INDEX")
        return Cluster("kubernetes", **timeouts, coordinator_host=host, index=index)
    if environ.get("DEW_CLUSTER", "").strip() == "kubernetes":
        # dew's manifests (--detection jax) say the pod must join: never run it alone
        raise DistributedSetupError(
            "DEW_CLUSTER=kubernetes, but JAX's Kubernetes detection needs a pod "
            "(KUBERNETES_SERVICE_HOST) and the `kubernetes` package (jax[k8s]), which dew's "
            "images lack: install it in the image, or generate the manifests with "
            "--detection env"
        )
    return None


def _gke_tpu(environ: Mapping[str, str], timeouts: dict) -> Cluster | None:
    """A pod of a TPU slice on GKE: one host runs alone, more join through JAX's detection."""
    found = _first(environ, TPU_HOSTS)
    if found is None or not environ.get("TPU_WORKER_ID", "").strip():
        raise DistributedSetupError(
            "DEW_CLUSTER=gke-tpu, but TPU_WORKER_HOSTNAMES and TPU_WORKER_ID are not set: GKE "
            "sets them in the pods of a TPU slice node pool (cloud.google.com/gke-tpu-* node "
            "selectors, google.com/tpu requested); run the manifests on one"
        )
    hosts = [name.strip() for name in found[1].split(",") if name.strip()]
    if len(hosts) == 1:
        return None
    if environ.get("MEGASCALE_COORDINATOR_ADDRESS", "").strip():  # several slices: JAX's own
        return Cluster("gke-tpu", **timeouts)
    # JAX's GkeTpuCluster: the coordinator is the first host (its port JAX's), process id
    # TPU_WORKER_ID.
    host = hosts[0].split(":")[0]
    index = _index(environ, "TPU_WORKER_ID")
    return Cluster("gke-tpu", **timeouts, coordinator_host=host, index=index)


def _index(environ: Mapping[str, str], name: str) -> int | None:
    text = environ.get(name, "").strip()
    return int(text) if text.isdigit() else None


def _slurm_tasks(environ: Mapping[str, str]) -> int:
    text = environ.get("SLURM_NTASKS", environ.get("SLURM_NPROCS", "1")).strip()
    return int(text) if text.isdigit() else 1


def _has_kubernetes_client() -> bool:
    import importlib.util

    return importlib.util.find_spec("kubernetes") is not None


def initialize(environ: Mapping[str, str] | None = None) -> Cluster | None:
    """Join the cluster the environment describes (once); None for a single process.

    Call before anything asks JAX for devices: gloo and the process's place in the
    cluster are fixed when the backend starts.
    """
    import jax

    cluster = detect(environ)
    if cluster is None or jax.distributed.is_initialized():
        return cluster
    # Cross-process collectives on CPU; the setting only concerns the CPU client. Under
    # SLURM and Kubernetes the unset arguments are JAX's own auto-detection.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    deadline = time.monotonic() + cluster.init_timeout_s  # one budget for the whole join
    if cluster.coordinator_host:
        wait_for_name(cluster.coordinator_host, cluster.init_timeout_s)
        port = cluster.coordinator_port or _jax_port(cluster.method)
        if port is not None and cluster.index not in (None, 0):  # 0 is the coordinator
            wait_for_port(cluster.coordinator_host, port, deadline - time.monotonic())
    joined = _watch_join(cluster, deadline)
    try:
        jax.distributed.initialize(
            coordinator_address=cluster.coordinator_address,
            num_processes=cluster.num_processes,
            process_id=cluster.process_id,
            cluster_detection_method=JAX_DETECTION[cluster.method],
            initialization_timeout=max(1, round(deadline - time.monotonic())) + JOIN_GRACE_S,
            heartbeat_timeout_seconds=cluster.heartbeat_timeout_s,
            shutdown_timeout_seconds=SHUTDOWN_TIMEOUT_S,
        )
    finally:
        joined.set()
    watch_peers(cluster)
    return cluster


def _jax_port(method: str) -> int | None:
    """The coordinator's port JAX's own detection uses for `method` (None where JAX names
    none, or no longer where dew reads it: the join then goes on without the port wait)."""
    try:
        if method == "kubernetes":
            from jax._src.clusters.k8s_cluster import K8sCluster

            return int(K8sCluster._coordinator_port)
        if method == "gke-tpu":
            from jax._src.clusters import cloud_tpu_cluster

            return int(cloud_tpu_cluster.coordinator_port)
    except (ImportError, AttributeError, ValueError):
        return None
    return None


def wait_for_port(host: str, port: int, timeout_s: float, connect=None) -> None:
    """Return once the coordinator accepts a connection on `port`; DistributedSetupError
    after `timeout_s`. A pod 0 whose name resolves but whose process has not started (its
    image still pulling, or it stopped) refuses or drops the connection; JAX's client would
    wait out its whole timeout and then abort the process."""
    connect = connect or socket.create_connection
    deadline = time.monotonic() + max(0.0, timeout_s)
    pause = 0.25
    while True:
        left = deadline - time.monotonic()
        try:
            connect((host, port), max(0.1, min(5.0, left))).close()
            return
        except OSError as error:  # refused, unreachable, timed out
            left = deadline - time.monotonic()
            if left <= 0:
                raise DistributedSetupError(
                    f"the coordinator {host}:{port} (process 0) accepted no connection within "
                    f"{max(0.0, timeout_s):.0f} s ({error.strerror or error}): its process has "
                    "not started (pod 0 still pulling its image?) or has stopped; see its log "
                    "(DEW_INIT_TIMEOUT_S sets the wait)"
                ) from None
        time.sleep(min(pause, left))
        pause = min(pause * 2, 2.0)


def _watch_join(cluster: Cluster, deadline: float) -> threading.Event:
    """A thread that stops this process in one line, with EXIT_PEER_LOST, if the join has
    not completed by `deadline` (set the event it returns once it has). JAX's own deadline
    comes JOIN_GRACE_S later: its reaction is a fatal abort, exit 134, a multi-line log."""
    joined = threading.Event()

    def watch() -> None:
        if joined.wait(max(0.0, deadline - time.monotonic())):
            return
        who = "this process"
        if cluster.index is not None:
            count = f" of {cluster.num_processes}" if cluster.num_processes else ""
            who = f"process {cluster.index}{count}"
        print(
            f"dew: {who} stops: the cluster did not form within {cluster.init_timeout_s} s "
            "(a process that never started or never joined: see the other processes' logs; "
            "DEW_INIT_TIMEOUT_S sets the wait)",
            file=sys.stderr,
            flush=True,
        )
        os._exit(EXIT_PEER_LOST)  # the main thread is inside JAX's join and cannot be woken

    threading.Thread(target=watch, name="dew-join-watch", daemon=True).start()
    return joined


def wait_for_name(host: str, timeout_s: float, resolve=None) -> None:
    """Return once `host` resolves; DistributedSetupError after `timeout_s`. A pod's name is
    in DNS only once the pod is scheduled and has an address; until then it does not resolve."""
    resolve = resolve or socket.gethostbyname
    deadline = time.monotonic() + timeout_s
    pause = 0.5
    while True:
        try:
            resolve(host)
            return
        except OSError as error:  # socket.gaierror: not (yet) in DNS
            left = deadline - time.monotonic()
            if left <= 0:
                raise DistributedSetupError(
                    f"the coordinator's name {host} did not resolve within {timeout_s:g} s "
                    f"({error}): is pod 0 scheduled? (DEW_INIT_TIMEOUT_S sets the wait)"
                ) from None
        time.sleep(min(pause, left))
        pause = min(pause * 2, 5.0)


class PeerWatch:
    """A thread that stops this process, in one line, when a peer stops answering.

    The runtime's own reaction to a dead peer is a fatal abort, a multi-line log and a
    stack dump, after the heartbeat timeout; its hook for a gentler one
    (missed_heartbeat_callback) aborts too in this jaxlib, unable to hand Python the
    status. So every process also beats through the key-value store every `interval_s`,
    and a peer whose beat has not moved for `stale_s` (half the runtime's timeout, so
    this comes first), or a coordinator that no longer answers, ends this process with
    one line on stderr and EXIT_PEER_LOST. A process that finished marks itself done:
    one waiting at the shutdown barrier is not lost.
    """

    def __init__(self, client, index: int, count: int, stale_s: float, interval_s: float):
        self.client, self.index, self.stale_s, self.interval_s = client, index, stale_s, interval_s
        self.peers = [peer for peer in range(count) if peer != index]
        self.count = count
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dew-peer-watch", daemon=True)

    def start(self) -> PeerWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching and tell the peers this process is done (not lost)."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join()
        with contextlib.suppress(Exception):  # the coordinator may be gone already
            self.client.key_value_set(_beat_key(self.index), "done", allow_overwrite=True)

    def _run(self) -> None:
        seen = {peer: (None, time.monotonic()) for peer in self.peers}
        beat = 0
        while not self._stop.wait(self.interval_s):
            beat += 1
            try:
                self.client.key_value_set(_beat_key(self.index), str(beat), allow_overwrite=True)
                values = {peer: self._beat_of(peer) for peer in list(seen)}
            except Exception as error:  # the coordinator's answer, not a peer's
                if self._stop.is_set():
                    return
                self._lost(f"the coordinator (process 0) no longer answers ({_first_line(error)})")
            now = time.monotonic()
            for peer, value in values.items():
                if value == "done":
                    del seen[peer]
                elif value != seen[peer][0]:
                    seen[peer] = (value, now)
                elif now - seen[peer][1] > self.stale_s:
                    self._lost(f"process {peer} stopped answering {now - seen[peer][1]:.0f} s ago")

    def _beat_of(self, peer: int) -> str | None:
        try:
            return self.client.key_value_try_get(_beat_key(peer))
        except Exception as error:
            if "NOT_FOUND" in str(error):  # not beating yet
                return None
            raise

    def _lost(self, why: str) -> None:
        print(
            f"dew: process {self.index} of {self.count} stops: {why}", file=sys.stderr, flush=True
        )
        os._exit(EXIT_PEER_LOST)  # no clean shutdown: it would wait on the peer that is gone


def _beat_key(index: int) -> str:
    return f"dew/alive/{index}"


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:200]


def watch_peers(cluster: Cluster) -> PeerWatch:
    """Start this process's PeerWatch (stopped at exit, before JAX's own shutdown)."""
    import atexit

    import jax
    from jax._src.distributed import global_state

    heartbeat = cluster.heartbeat_timeout_s
    watch = PeerWatch(
        global_state.client,
        jax.process_index(),
        jax.process_count(),
        stale_s=heartbeat / 2,
        interval_s=max(0.5, min(2.0, heartbeat / 10)),
    ).start()
    # atexit runs last-registered first: this stops before JAX's shutdown barrier.
    atexit.register(watch.stop)
    return watch


def process_count() -> int:
    """Processes in the run; 1 without starting a backend when none was joined."""
    import jax

    return jax.process_count() if jax.distributed.is_initialized() else 1


def process_index() -> int:
    import jax

    return jax.process_index() if jax.distributed.is_initialized() else 0
