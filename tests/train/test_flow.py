"""Flow matching: the interpolant, the velocity target and the logit-normal timesteps."""

from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dew.config import ModelConfig
from dew.models.layers.text_condition import CharTable
from dew.train.objectives import get_objective
from dew.train.objectives.flow import flow_loss, interpolate, logit_normal_timesteps


class _Config(ModelConfig):
    """A model config with only what the objective reads: the sample's layout and dtype."""

    objective: ClassVar[str] = "flow"
    image_size: int = 4
    channels: int = 2


class _Probe:
    """A model that records what it was called with and predicts zero velocity."""

    def __call__(self, x, t, text, text_mask):
        self.x, self.t = x, t
        return jnp.zeros_like(x, jnp.float32)


def test_interpolant_runs_from_data_at_0_to_noise_at_1():
    x0 = jnp.arange(6.0).reshape(3, 2)
    x1 = -10.0 * jnp.ones((3, 2))
    t = jnp.array([0.0, 0.25, 1.0])
    xt = interpolate(x0, x1, t)
    np.testing.assert_allclose(xt[0], x0[0])
    np.testing.assert_allclose(xt[1], 0.75 * x0[1] + 0.25 * x1[1])
    np.testing.assert_allclose(xt[2], x1[2])


def test_loss_is_zero_exactly_for_the_velocity_x1_minus_x0():
    x0, x1 = jax.random.normal(jax.random.key(1), (2, 3, 4, 4, 2))
    t = jnp.array([0.1, 0.5, 0.9])

    def oracle(x, t_in, text, mask):
        np.testing.assert_allclose(x, interpolate(x0, x1, t), rtol=1e-6)
        return x1 - x0

    assert float(flow_loss(oracle, x0, x1, t, None, None, dtype=jnp.float32)) == 0.0
    zero = lambda x, *_: jnp.zeros_like(x)
    expected = float(jnp.mean(jnp.square(x1 - x0)))
    assert float(flow_loss(zero, x0, x1, t, None, None, dtype=jnp.float32)) == pytest.approx(
        expected, rel=1e-6
    )


def test_objective_feeds_the_interpolant_of_data_and_gaussian_noise_at_its_t():
    objective = get_objective("flow")(_Config(dtype="float32"))
    batch = jax.tree.map(jnp.asarray, objective.example_batch(64))
    probe = _Probe()
    loss, _ = objective.loss(probe, batch, jax.random.key(0), condition=CharTable(8))
    x0 = batch["images"] / 127.5 - 1.0
    s = probe.t[:, None, None, None]
    noise = (probe.x - (1 - s) * x0) / s  # invert x_t = (1 - t)·x0 + t·x1 for x1
    # x1 is standard normal noise (the interpolant runs towards it as t grows) ...
    assert abs(float(noise.mean())) < 0.05 and float(noise.std()) == pytest.approx(1.0, abs=0.05)
    # ... and with a zero prediction the loss is the mean square of the target x1 - x0.
    assert float(loss) == pytest.approx(float(jnp.mean(jnp.square(noise - x0))), rel=1e-3)


def test_timesteps_are_logit_normal_0_1():
    t = logit_normal_timesteps(jax.random.key(0), 100_000)
    assert float(t.min()) > 0.0 and float(t.max()) < 1.0
    logits = jnp.log(t) - jnp.log1p(-t)
    assert float(logits.mean()) == pytest.approx(0.0, abs=0.02)
    assert float(logits.std()) == pytest.approx(1.0, abs=0.02)
