"""The Trainer end to end on the cpu-smoke simple_dit: 3 steps on 8 simulated devices."""

import math

import jax
import numpy as np
import pytest

from dew.train import trainer as trainer_module
from dew.train.mesh import MeshSpec
from dew.train.trainer import Trainer


@pytest.fixture(scope="module")
def smoke_trainer():
    return Trainer(
        "simple_dit", preset="cpu-smoke", mesh=MeshSpec(fsdp=8), compilation_cache_dir=None
    )


def test_three_steps_on_fsdp8_train_with_sharded_donated_state(smoke_trainer):
    trainer = smoke_trainer
    state = trainer.init()
    batch = trainer.example_batch(8)
    head_before = np.asarray(state.params["model"]["head"]["kernel"][...])
    losses = []
    for _ in range(3):
        previous = state
        state, metrics = trainer.step(state, batch)
        losses.append(float(metrics["train/loss"]))
        assert all(leaf.is_deleted() for leaf in jax.tree.leaves(previous.params))
    assert all(math.isfinite(loss) for loss in losses)
    assert int(state.step) == 3
    assert metrics["train/loss"].dtype == np.float32
    assert not np.array_equal(head_before, np.asarray(state.params["model"]["head"]["kernel"][...]))
    kernel = state.params["model"]["blocks"][0]["mlp"]["up"]["kernel"][...]
    assert "fsdp" in kernel.sharding.spec
    shard_shapes = {s.data.shape for s in kernel.addressable_shards}
    assert shard_shapes == {(kernel.shape[0], kernel.shape[1] // 8)}
    # adam moments are split like their parameters
    mu = state.opt_state[0].mu["model"]["blocks"][0]["mlp"]["up"]["kernel"][...]
    assert mu.sharding.spec == kernel.sharding.spec
    assert metrics["train/mfu"] is None  # a CPU has no published peak


def test_a_small_state_computed_on_one_device_is_the_sharded_one(monkeypatch):
    # Trainer.init computes a small state on one device and places it; a large one is
    # computed in place, sharded: the same values, in the same shardings.
    def initial_state():
        trainer = Trainer(
            "simple_dit", preset="cpu-smoke", mesh=MeshSpec(fsdp=8), compilation_cache_dir=None
        )
        return trainer._init_on_one_device, trainer.init()

    one_device, placed = initial_state()
    monkeypatch.setattr(trainer_module, "ONE_DEVICE_INIT_BYTES", 0)
    sharded_too, sharded = initial_state()
    assert one_device and not sharded_too
    for a, b in zip(jax.tree.leaves(placed), jax.tree.leaves(sharded), strict=True):
        assert a.sharding == b.sharding
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert any("fsdp" in leaf.sharding.spec for leaf in jax.tree.leaves(placed))


def test_example_batch_is_deterministic_pixels_and_caption(smoke_trainer):
    a, b = smoke_trainer.example_batch(8), smoke_trainer.example_batch(8)
    assert a["images"].dtype == np.float32 and a["images"].shape == (8, 16, 16, 3)
    assert 0 <= a["images"].min() and a["images"].max() <= 255
    np.testing.assert_array_equal(a["images"], b["images"])
    assert a["text_ids"].shape == (8, 77) and (a["text_ids"][:, 0] == 1).all()


def test_condition_in_state_adds_the_char_table():
    # for every architecture, as the 2026-09-05 table counts it (the decoder included)
    for architecture in ("simple_dit", "causal_transformer"):
        trainer = Trainer(
            architecture, preset="cpu-smoke", condition_in_state=True, compilation_cache_dir=None
        )
        assert trainer.param_counts["condition"] == 130 * 768
        constant = Trainer(architecture, preset="cpu-smoke", compilation_cache_dir=None)
        assert constant.param_counts == {
            "backbone": trainer.param_counts["backbone"],
            "condition": 0,
        }


def test_batch_the_mesh_cannot_split_is_a_clear_error(smoke_trainer):
    with pytest.raises(ValueError, match="batch size 6 cannot be split"):
        smoke_trainer.compile(smoke_trainer.example_batch(6))


def test_unknown_architecture_lists_valid_names():
    with pytest.raises(ValueError, match="unknown architecture 'nope'.*simple_dit"):
        Trainer("nope", compilation_cache_dir=None)


def test_unknown_dtype_is_an_error():
    with pytest.raises(ValueError, match="unknown dtype 'fp8'"):
        Trainer("simple_dit", preset="cpu-smoke", dtype="fp8", compilation_cache_dir=None)


def test_float32_dtype_reaches_the_model_config():
    trainer = Trainer("simple_dit", preset="cpu-smoke", dtype="float32", compilation_cache_dir=None)
    assert trainer.config.dtype == "float32"


def test_compilation_cache_dir_turns_on_the_persistent_cache(tmp_path):
    Trainer("simple_dit", preset="cpu-smoke", compilation_cache_dir=tmp_path / "jax")
    try:
        assert jax.config.jax_compilation_cache_dir == str(tmp_path / "jax")
        jax.jit(lambda x: x * 3 + 1).lower(np.arange(5.0)).compile()
        assert any((tmp_path / "jax").iterdir())
    finally:
        Trainer("simple_dit", preset="cpu-smoke", compilation_cache_dir=None)


def test_a_step_from_the_persistent_cache_keeps_its_real_compile_time(tmp_path):
    # The second Trainer reads the executable the first one wrote: its compile_seconds is
    # the original compile's as the cache keeps it (whole seconds, truncated by JAX), its
    # load_seconds the read.
    first = Trainer("causal_transformer", preset="cpu-smoke", compilation_cache_dir=tmp_path)
    first.compile(first.example_batch(8))
    assert not first.loaded_from_cache and first.load_seconds is None
    second = Trainer("causal_transformer", preset="cpu-smoke", compilation_cache_dir=tmp_path)
    second.compile(second.example_batch(8))
    assert second.loaded_from_cache
    assert second.load_seconds < first.compile_seconds
    assert second.compile_seconds == int(second.compile_seconds)
    assert first.compile_seconds - 1.5 <= second.compile_seconds <= first.compile_seconds
    Trainer("causal_transformer", preset="cpu-smoke", compilation_cache_dir=None)  # cache off
