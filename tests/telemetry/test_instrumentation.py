"""hlo_flops on jitted functions compiled for CPU, against figures worked out by hand."""

import re

import jax
import jax.numpy as jnp
import optax
import pytest
from flax import nnx
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec

from dew.telemetry.instrumentation import (
    HloParseError,
    compiled_flops,
    cost_analysis_flops,
    hlo_flops,
    mfu,
)


def compile_cpu(fn, *args):
    return jax.jit(fn).lower(*args).compile()


def dot_flops(m, k, n, batch=1):
    return 2 * batch * m * n * k


def test_batched_dot_counts_two_times_result_times_contracted():
    a = jnp.ones((4, 32, 64))
    b = jnp.ones((4, 64, 48))
    compiled = compile_cpu(lambda a, b: jnp.einsum("bij,bjk->bik", a, b), a, b)
    count = hlo_flops(compiled.as_text())
    assert count.total == dot_flops(32, 64, 48, batch=4)
    assert count.by_kind["dot"] == count.total
    assert count.op_counts["dot"] == 1
    assert compiled_flops(compiled) == count.total


def test_sharded_program_counts_per_device():
    mesh = jax.make_mesh((8,), ("data",))
    rows = NamedSharding(mesh, PartitionSpec("data"))
    x = jax.ShapeDtypeStruct((256, 128), jnp.float32, sharding=rows)
    w = jax.ShapeDtypeStruct((128, 64), jnp.float32, sharding=NamedSharding(mesh, PartitionSpec()))
    compiled = jax.jit(lambda x, w: x @ w).lower(x, w).compile()
    assert compiled_flops(compiled) == dot_flops(256, 128, 64) / 8


def test_attention_einsums_count_both_products_full_square():
    b, t, h, d = 2, 128, 4, 32
    q = k = v = jnp.ones((b, t, h, d))

    def attention(q, k, v):
        scores = jnp.einsum("bthd,bshd->bhts", q, k)
        mask = jnp.tril(jnp.ones((t, t), bool))
        weights = jax.nn.softmax(jnp.where(mask, scores, -1e9), axis=-1)
        return jnp.einsum("bhts,bshd->bthd", weights, v)

    count = hlo_flops(compile_cpu(attention, q, k, v).as_text())
    assert count.total == 2 * (2 * b * h * t * t * d)


def _conv(x, w, stride, groups):
    return lax.conv_general_dilated(
        x,
        w,
        (stride, stride),
        ((1, 1), (1, 1)),
        dimension_numbers=("NHWC", "HWIO", "NHWC"),
        feature_group_count=groups,
    )


@pytest.mark.parametrize(
    ("stride", "groups"),
    [(1, 1), (2, 1), (1, 4), (2, 8)],
    ids=["plain", "strided", "grouped", "depthwise-strided"],
)
def test_convolution_forward_and_gradients(stride, groups):
    n, size, c_in, c_out = 2, 16, 8, 16
    x = jnp.ones((n, size, size, c_in))
    w = jnp.ones((3, 3, c_in // groups, c_out))
    out_size = size // stride
    # Every tap counts, the padded ones included (the published convention).
    forward = 2 * n * out_size * out_size * c_out * 9 * (c_in // groups)

    count = hlo_flops(compile_cpu(lambda x, w: _conv(x, w, stride, groups), x, w).as_text())
    assert count.by_kind["convolution"] == forward
    assert count.op_counts["convolution"] == 1

    r = jnp.ones((n, out_size, out_size, c_out))

    def loss(x, w, r):
        return (_conv(x, w, stride, groups) * r).sum()

    step = compile_cpu(jax.value_and_grad(loss, argnums=(0, 1)), x, w, r)
    both = hlo_flops(step.as_text())
    # Forward, input gradient (a base-dilated convolution when strided: divided by the
    # dilation) and filter gradient (batch-grouped when depthwise) each count the forward.
    assert both.by_kind["convolution"] == 3 * forward
    assert both.op_counts["convolution"] == 3


def _scan_layers(x, ws):
    def layer(h, w):
        return jnp.tanh(h @ w), None

    return lax.scan(layer, x, ws)[0]


def test_scan_counts_the_body_trip_count_times_where_cost_analysis_counts_it_once():
    layers, m, d = 6, 64, 128
    x, ws = jnp.ones((m, d)), jnp.ones((layers, d, d))
    compiled = compile_cpu(lambda x, ws: _scan_layers(x, ws).sum(), x, ws)
    one_layer = dot_flops(m, d, d)
    assert hlo_flops(compiled.as_text()).total == layers * one_layer
    xla = cost_analysis_flops(compiled)
    assert xla is not None
    assert one_layer <= xla < 2 * one_layer  # one body, plus some elementwise work


def test_scan_gradient_counts_forward_and_both_backward_products_per_layer():
    layers, m, d = 4, 32, 64
    x, ws = jnp.ones((m, d)), jnp.ones((layers, d, d))
    step = jax.value_and_grad(lambda x, ws: _scan_layers(x, ws).sum(), argnums=(0, 1))
    count = hlo_flops(compile_cpu(step, x, ws).as_text())
    assert count.total == 3 * layers * dot_flops(m, d, d)


def test_trip_count_is_inferred_from_the_counter_when_the_backend_config_lacks_it():
    layers, m, d = 5, 64, 128
    x, ws = jnp.ones((m, d)), jnp.ones((layers, d, d))
    text = compile_cpu(lambda x, ws: _scan_layers(x, ws).sum(), x, ws).as_text()
    assert '"known_trip_count"' in text
    stripped = re.sub(r',?"known_trip_count":\{"n":"\d+"\}', "", text)
    stripped = re.sub(r',?"known_init_step":\{[^}]*\}', "", stripped)
    assert "known_trip_count" not in stripped and "known_init_step" not in stripped
    assert hlo_flops(stripped).total == layers * dot_flops(m, d, d)


def test_while_with_a_data_dependent_bound_raises_instead_of_counting_once():
    w = jnp.ones((32, 32))

    def loop(x):
        return lax.while_loop(lambda c: c[1] < c[0].sum(), lambda c: (c[0] @ w, c[1] + 1), (x, 0))

    text = compile_cpu(loop, jnp.ones((32, 32))).as_text()
    with pytest.raises(HloParseError, match="known_trip_count"):
        hlo_flops(text)


def test_conditional_counts_its_most_expensive_branch():
    x, w = jnp.ones((64, 128)), jnp.ones((128, 128))

    def branchy(p, x, w):
        return lax.cond(p > 0, lambda x: x @ w, lambda x: (x @ w) @ w, x)

    text = compile_cpu(branchy, 1.0, x, w).as_text()
    assert "conditional(" in text
    assert hlo_flops(text).total == 2 * dot_flops(64, 128, 128)


def test_non_json_backend_config_does_not_break_the_parse():
    x, w = jnp.ones((64, 128)), jnp.ones((128, 128))
    text = compile_cpu(lambda x, w: lax.top_k(x @ w, 4)[0], x, w).as_text()
    assert "{is_stable = true}" in text  # CPU TopK's config is not JSON
    count = hlo_flops(text)
    assert count.total == dot_flops(64, 128, 128)
    assert count.unknown_custom_calls == ()


class _Mlp(nnx.Module):
    def __init__(self, d_in, hidden, d_out, rngs):
        self.up = nnx.Linear(d_in, hidden, rngs=rngs)
        self.down = nnx.Linear(hidden, d_out, rngs=rngs)

    def __call__(self, x):
        return self.down(jax.nn.gelu(self.up(x)))


def test_flax_train_step_with_adam():
    batch, d_in, hidden, d_out = 32, 64, 256, 16
    graphdef, params = nnx.split(_Mlp(d_in, hidden, d_out, nnx.Rngs(0)), nnx.Param)
    optimizer = optax.adam(1e-3)

    def train_step(params, opt_state, x, y):
        def loss_fn(params):
            return jnp.mean((nnx.merge(graphdef, params)(x) - y) ** 2)

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    x, y = jnp.ones((batch, d_in)), jnp.ones((batch, d_out))
    compiled = compile_cpu(train_step, params, optimizer.init(params), x, y)
    up, down = dot_flops(batch, d_in, hidden), dot_flops(batch, hidden, d_out)
    # Forward both layers; backward: down's kernel and input gradients, up's kernel
    # gradient only (nothing needs the gradient of x). Adam adds no matmuls.
    assert compiled_flops(compiled) == 3 * down + 2 * up


def test_mfu_divides_by_the_device_peak_and_is_none_without_one():
    assert mfu(989e12, 1.0, "NVIDIA H200") == pytest.approx(1.0)
    assert mfu(97.5e12 * 0.405 * 0.0164, 0.0164, "NVIDIA GeForce RTX 4080") == pytest.approx(0.405)
    assert mfu(1e12, 1.0, "cpu") is None
    assert mfu(1e12, 0.0, "NVIDIA H200") is None
    assert mfu(None, 1.0, "NVIDIA H200") is None
