"""The device mesh and how the train state and batches are laid out over it.

Two axes: `data` (pure data parallelism) and `fsdp` (data parallelism with parameters,
optimizer state and EMA split across devices). A leaf of at least `min_shard_size`
elements is split along its largest axis that `fsdp` divides; smaller leaves (biases,
norms, scalars) are replicated, since splitting them costs more in collectives than it
saves in memory. Batches are split along their first axis over data × fsdp.
"""

from __future__ import annotations

import math

import jax
import numpy as np
import pydantic
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from dew.config import Config

AXES = ("data", "fsdp")
BATCH_AXES = AXES  # the batch is split over every device of the mesh


class MeshSpec(Config):
    """How many devices go to each axis; their product is the number of devices used."""

    data: int = pydantic.Field(default=1, ge=1)
    fsdp: int = pydantic.Field(default=1, ge=1)
    min_shard_size: int = pydantic.Field(default=256, ge=1)

    @property
    def num_devices(self) -> int:
        return self.data * self.fsdp

    def build(self, devices: list[jax.Device] | None = None) -> Mesh:
        devices = jax.devices() if devices is None else devices
        if self.num_devices > len(devices):
            raise ValueError(
                f"MeshSpec(data={self.data}, fsdp={self.fsdp}) needs {self.num_devices} devices;"
                f" {len(devices)} available"
            )
        grid = np.array(devices[: self.num_devices]).reshape(self.data, self.fsdp)
        return Mesh(grid, AXES)


def leaf_spec(shape: tuple[int, ...], fsdp: int, min_shard_size: int) -> PartitionSpec:
    """Split the largest axis that fsdp divides, if the leaf is large enough to be worth it."""
    if fsdp == 1 or math.prod(shape) < min_shard_size:
        return PartitionSpec()
    for axis in sorted(range(len(shape)), key=lambda a: (-shape[a], a)):
        if shape[axis] % fsdp == 0:
            spec = [None] * len(shape)
            spec[axis] = "fsdp"
            return PartitionSpec(*spec)
    return PartitionSpec()


def state_shardings(tree, mesh: Mesh, min_shard_size: int):
    """NamedShardings for every array leaf of a (possibly abstract) state tree."""
    fsdp = mesh.shape["fsdp"]
    return jax.tree.map(
        lambda leaf: NamedSharding(mesh, leaf_spec(tuple(leaf.shape), fsdp, min_shard_size)),
        tree,
    )


def batch_sharding(mesh: Mesh, ndim: int) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec(BATCH_AXES, *([None] * (ndim - 1))))


def check_batch_size(mesh: Mesh, batch_size: int) -> None:
    ways = mesh.shape["data"] * mesh.shape["fsdp"]
    if batch_size % ways:
        raise ValueError(
            f"batch size {batch_size} cannot be split over the mesh's data×fsdp ="
            f" {mesh.shape['data']}×{mesh.shape['fsdp']} = {ways} devices; use a multiple of {ways}"
        )


def batch_shardings(batch, mesh: Mesh):
    """Shardings for a batch dict, after checking every leaf splits over the mesh."""

    def one(leaf):
        check_batch_size(mesh, leaf.shape[0])
        return batch_sharding(mesh, len(leaf.shape))

    return jax.tree.map(one, batch)
