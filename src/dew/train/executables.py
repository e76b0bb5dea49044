"""A train step compiled in one process and run in another.

On a TPU one process at a time holds the chip, opening it costs about 10 s, and compiling
is CPU work that needs no chip. So compiling processes (JAX_PLATFORMS=cpu,
ALLOW_MULTIPLE_LIBTPU_LOAD=1) compile for the chip's topology without holding it, side by
side, and save what they made; the one process that holds the chip loads and runs it:

    devices = topology_devices("v5e:1x1")                 # a compiling process
    trainer = Trainer(architecture, config, devices=devices)
    trainer.compile(host_batch)
    save_program(folder, trainer, host_batch)             # the step, its first inputs

    program = Program(folder)                             # the process holding the chip
    state, batch = program.init(), program.batch()
    state, metrics = program.step(state, batch)

What is saved: the step's executable as `jax.experimental.serialize_executable` writes it,
with its input and output tree structures; the initial state, computed on this process's
CPU (its values are the Trainer's: JAX's threefry gives the same numbers on every
backend), and the example batch, as host arrays. The holder puts them into the step's own
input shardings. XLA's TPU compile is deterministic, so the executable a holder loads is
the one it would have compiled itself.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import jax
import numpy as np

from dew import platforms

STEP_FILE, INPUTS_FILE = "step.executable", "inputs.npz"


def topology_devices(name: str) -> list[Any]:
    """The devices a compile for the topology `name` targets without holding them, as its
    platform gives them (dew.platforms: "v5e:1x1" a TPU's, "cpu" this process's CPU).
    ValueError for a name no platform compiles for."""
    platform = platforms.of_topology(name)
    return platforms.resolve(platform.compile_devices)(name)


def initial_state_on_host(trainer) -> Any:
    """The trainer's initial state computed on this process's default devices (the CPU in
    a compiling process), as host arrays."""
    from dew.train.trainer import INIT_COMPILER_OPTIONS

    init = trainer._init_traced.lower().compile(compiler_options=INIT_COMPILER_OPTIONS)
    return jax.device_get(init(trainer._condition_params))


def save_program(folder: str | Path, trainer, host_batch) -> Path:
    """Write the trainer's compiled step (compile it first), its initial state and the
    example batch under `folder`."""
    from jax.experimental.serialize_executable import serialize

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / STEP_FILE).write_bytes(pickle.dumps(serialize(trainer.compiled)))
    state = jax.tree.leaves(initial_state_on_host(trainer))
    batch = jax.tree.leaves(host_batch)
    arrays = {f"state_{i}": np.asarray(a) for i, a in enumerate(state)}
    arrays |= {f"batch_{i}": np.asarray(a) for i, a in enumerate(batch)}
    np.savez(folder / INPUTS_FILE, **arrays)
    return folder


class Program:
    """A saved program's step loaded onto this process's devices (the executable only: the
    inputs are read when asked for): `init()` the initial state and `batch()` the example
    batch, each in the step's input shardings; `step(state, batch)` one step, the state
    donated (as the Trainer's)."""

    def __init__(self, folder: str | Path):
        from jax.experimental.serialize_executable import deserialize_and_load

        self.folder = Path(folder)
        payload, in_tree, out_tree = pickle.loads((self.folder / STEP_FILE).read_bytes())
        self.compiled = deserialize_and_load(payload, in_tree, out_tree)
        self._state_shardings, self._batch_shardings = self.compiled.input_shardings[0]

    def init(self) -> Any:
        return self._placed("state_", self._state_shardings)

    def batch(self) -> Any:
        return self._placed("batch_", self._batch_shardings)

    def step(self, state: Any, batch: Any) -> tuple[Any, dict[str, Any]]:
        return self.compiled(state, batch)

    def _placed(self, prefix: str, shardings: Any) -> Any:
        """The saved arrays named `prefix`<i> on the devices, as the tree of `shardings`:
        one device_put for them all (JAX batches the transfers)."""
        leaves = jax.tree.leaves(shardings)
        with np.load(self.folder / INPUTS_FILE) as inputs:
            arrays = _numbered(inputs, prefix)
        if len(leaves) != len(arrays):
            raise ValueError(
                f"the saved program holds {len(arrays)} arrays; its step takes {len(leaves)}"
            )
        placed = jax.device_put(arrays, leaves)
        return jax.tree.unflatten(jax.tree.structure(shardings), placed)


def _numbered(inputs: Any, prefix: str) -> list[np.ndarray]:
    names = [name for name in inputs.files if name.startswith(prefix)]
    return [inputs[name] for name in sorted(names, key=lambda n: int(n[len(prefix) :]))]
