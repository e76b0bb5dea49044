import jax
import pytest
from jax.sharding import PartitionSpec

from dew.train.mesh import MeshSpec, batch_shardings, leaf_spec


def test_leaf_spec_splits_largest_divisible_axis():
    assert leaf_spec((384, 1536), 8, 256) == PartitionSpec(None, "fsdp")
    # the largest axis (6) does not split over 8: the next one that does is taken
    assert leaf_spec((6, 64), 8, 256) == PartitionSpec(None, "fsdp")


def test_leaf_spec_replicates_small_or_indivisible_leaves():
    assert leaf_spec((255,), 8, 256) == PartitionSpec()
    assert leaf_spec((3, 5, 7, 11), 8, 256) == PartitionSpec()
    assert leaf_spec((), 8, 256) == PartitionSpec()
    assert leaf_spec((4096,), 1, 256) == PartitionSpec()


def test_mesh_spec_builds_axes_over_devices():
    mesh = MeshSpec(data=2, fsdp=4).build()
    assert dict(mesh.shape) == {"data": 2, "fsdp": 4}


def test_mesh_spec_needing_more_devices_than_exist_names_the_count():
    with pytest.raises(ValueError, match=f"needs {len(jax.devices()) + 1} devices"):
        MeshSpec(fsdp=len(jax.devices()) + 1).build()


def test_batch_the_mesh_cannot_split_is_an_error_naming_it():
    import numpy as np

    mesh = MeshSpec(fsdp=8).build()
    with pytest.raises(ValueError, match="batch size 6 cannot be split"):
        batch_shardings({"images": np.zeros((6, 4))}, mesh)
