"""The Trainer over JAX's distributed runtime: 2 loopback processes x 4 CPU devices (gloo)
against this process's 8 devices, and the environment parsing that decides whether to join."""

import json
import math
import signal
import sys
import time

import pytest

from dew.bench.multihost.launch import Launch
from dew.train import distributed
from dew.train.mesh import MeshSpec
from dew.train.trainer import Trainer

ARCHITECTURE = "simple_dit"
STEPS = 3
# Each process: join from DEW_* variables, train 3 steps of the same seeded batch on an
# fsdp=8 mesh spanning both processes, print what it saw as one JSON line.
WORKER = f"""
import json
from dew.train import distributed
cluster = distributed.initialize()
import jax
from dew.train.mesh import MeshSpec
from dew.train.trainer import Trainer
trainer = Trainer({ARCHITECTURE!r}, preset="cpu-smoke", mesh=MeshSpec(fsdp=8),
                  compilation_cache_dir=None)
state = trainer.init()
batch = trainer.example_batch(8)
for _ in range({STEPS}):
    state, metrics = trainer.step(state, batch)
largest = max(jax.tree.leaves(state.params), key=lambda leaf: leaf.size)
print(json.dumps({{
    "method": cluster.method if cluster else None,
    "process": jax.process_index(), "processes": jax.process_count(),
    "devices": jax.device_count(), "local_devices": jax.local_device_count(),
    "loss": float(metrics["train/loss"]), "gflop": trainer.flops / 1e9,
    "local_shard_rows": [s.data.size for s in largest.addressable_shards],
    "global_size": largest.size,
}}))
"""


@pytest.mark.slow
def test_two_processes_of_four_devices_match_one_process_of_eight(tmp_path):
    launch = Launch([sys.executable, "-c", WORKER], 2, 4, tmp_path, heartbeat_s=30)
    codes, failure = launch.start().wait(timeout_s=600)
    assert failure is None, failure
    assert codes == [0, 0]
    results = [json.loads(out.strip().splitlines()[-1]) for out in launch.stdout]

    trainer = Trainer(ARCHITECTURE, preset="cpu-smoke", mesh=MeshSpec(fsdp=8),
                      compilation_cache_dir=None)  # fmt: skip
    state = trainer.init()
    batch = trainer.example_batch(8)
    for _ in range(STEPS):
        state, metrics = trainer.step(state, batch)
    loss = float(metrics["train/loss"])
    gflop = trainer.flops / 1e9

    for index, result in enumerate(results):
        assert result["method"] == "env"
        assert (result["process"], result["processes"]) == (index, 2)
        assert (result["devices"], result["local_devices"]) == (8, 4)
        # parameters split over the global fsdp axis: each process holds 4 of 8 shards
        assert result["local_shard_rows"] == [result["global_size"] // 8] * 4
        assert math.isfinite(result["loss"])
        assert result["loss"] == pytest.approx(loss, rel=1e-4, abs=1e-5)
        assert result["gflop"] == pytest.approx(gflop, rel=1e-9)
    print(f"loss after {STEPS} steps: 2x4 {[r['loss'] for r in results]}, 1x8 {loss}")


def test_single_process_environment_joins_nothing():
    assert distributed.detect({}) is None
    assert distributed.detect({"DEW_NUM_PROCESSES": "1"}) is None
    assert distributed.detect({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "1"}) is None


def test_dew_variables_win_over_jax_variables():
    cluster = distributed.detect(
        {
            "DEW_COORDINATOR_ADDRESS": "10.0.0.1:1234",
            "JAX_COORDINATOR_ADDRESS": "10.9.9.9:1",
            "JAX_NUM_PROCESSES": "4",
            "JAX_PROCESS_ID": "3",
            "DEW_HEARTBEAT_TIMEOUT_S": "15",
        }
    )
    assert cluster == distributed.Cluster(
        "env", "10.0.0.1:1234", 4, 3, 300, 15, "10.0.0.1", coordinator_port=1234, index=3
    )


def test_slurm_step_of_several_tasks_is_left_to_jax_detection():
    cluster = distributed.detect({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "16"})
    assert cluster is not None and cluster.method == "slurm"
    assert cluster.coordinator_address is None and cluster.process_id is None


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"JAX_NUM_PROCESSES": "two"}, "JAX_NUM_PROCESSES='two' is not a process count"),
        ({"DEW_NUM_PROCESSES": "2", "DEW_PROCESS_ID": "0"}, "needs DEW_COORDINATOR_ADDRESS"),
        (
            {"DEW_NUM_PROCESSES": "2", "DEW_PROCESS_ID": "2", "DEW_COORDINATOR_ADDRESS": "h:1"},
            "DEW_PROCESS_ID='2' is not a process id; valid: 0..1",
        ),
        (
            {"DEW_NUM_PROCESSES": "2", "DEW_PROCESS_ID": "0", "DEW_COORDINATOR_ADDRESS": "h"},
            "needs a port",
        ),
        ({"DEW_HEARTBEAT_TIMEOUT_S": "0"}, "DEW_HEARTBEAT_TIMEOUT_S='0'"),
        # dew's manifests expect JAX's Kubernetes detection: outside a pod it cannot work
        ({"DEW_CLUSTER": "kubernetes"}, "DEW_CLUSTER=kubernetes, but"),
        # dew's TPU manifests expect GKE's variables: outside a TPU slice's pod there are none
        ({"DEW_CLUSTER": "gke-tpu", "TPU_WORKER_ID": "0"}, "DEW_CLUSTER=gke-tpu, but TPU_WORKER"),
        ({"DEW_CLUSTER": "gke-tpu", "TPU_WORKER_HOSTNAMES": "a,b"}, "DEW_CLUSTER=gke-tpu, but"),
    ],
)
def test_contradicting_settings_name_the_variable(environ, message):
    with pytest.raises(distributed.DistributedSetupError, match=message.replace("(", r"\(")):
        distributed.detect(environ)


# One process is killed once both have joined; the other waits on a key nobody will write.
PEER_DIES = """
import os, signal, sys
from dew.train import distributed
distributed.initialize()
import jax
from jax._src.distributed import global_state
global_state.client.wait_at_barrier("joined", 60_000)
if jax.process_index() == int(sys.argv[1]):
    os.kill(os.getpid(), signal.SIGKILL)
global_state.client.blocking_key_value_get("never-written", 600_000)
"""


def _kill_one(tmp_path, dies: int, heartbeat_s: int = 5):
    command = [sys.executable, "-c", PEER_DIES, str(dies)]
    launch = Launch(command, 2, 1, tmp_path, heartbeat_s=heartbeat_s, forward=False)
    start = time.monotonic()
    # Far past the heartbeat: a survivor still waiting then is killed, and fails the test.
    codes, failure = launch.start().wait(timeout_s=120, grace_s=60)
    return codes, failure, time.monotonic() - start


def test_a_dead_peer_stops_the_other_in_one_line_within_the_heartbeat(tmp_path):
    codes, failure, seconds = _kill_one(tmp_path, dies=1)

    assert codes == [distributed.EXIT_PEER_LOST, -signal.SIGKILL], failure
    log = (tmp_path / "process-0.log").read_text()
    said = [line for line in log.splitlines() if line.startswith("dew:")]
    assert said == ["dew: process 0 of 2 stops: " + said[0].split("stops: ")[1]], log
    assert "process 1 stopped answering" in said[0], log
    # the runtime's own fatal abort (a multi-line log and a stack dump) did not happen
    assert "Terminating process because" not in log and "*** " not in log, log
    assert seconds < 60, f"process 0 took {seconds:.0f} s to stop"
    assert failure.startswith("multihost: process 1 died of SIGKILL; process 0 exited 3 (dew:")
    print(f"{said[0]} (after {seconds:.1f} s, heartbeat 5 s)")


def test_a_dead_coordinator_stops_the_others_at_once(tmp_path):
    """Process 0 hosts the runtime's coordination service: its death closes every peer's
    error stream and the runtime aborts them at once, before any watch of ours could (its
    hook for another reaction aborts too in this jaxlib). The launcher's one line names
    both; the runtime's own multi-line report stays in the survivor's log."""
    codes, failure, seconds = _kill_one(tmp_path, dies=0)

    assert codes[0] == -signal.SIGKILL and codes[1] not in (0, -signal.SIGKILL), failure
    assert seconds < 60, f"process 1 took {seconds:.0f} s to stop"
    assert failure is not None and "\n" not in failure
    assert failure.startswith("multihost: process 0 died of SIGKILL; process 1 "), failure
    print(f"{failure} (after {seconds:.1f} s)")
