"""The optimized-HLO FLOP count against XLA's cost_analysis() for the functions the
telemetry tests check, compiled on this machine's default backend. Prints a Markdown table
for docs/research/benchmark-parity.md.

    JAX_PLATFORMS=cpu .venv/bin/python scripts/telemetry_ratios.py
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax import lax

from dew.bench.common import cli
from dew.telemetry.instrumentation import cost_analysis_flops, hlo_flops

PROG = "telemetry_ratios"


@dataclasses.dataclass(frozen=True)
class Args:
    """The optimized-HLO FLOP count against XLA's cost_analysis() for the functions the
    telemetry tests check, as a Markdown table. Takes no flags."""


def conv(x, w, stride, groups):
    return lax.conv_general_dilated(
        x,
        w,
        (stride, stride),
        ((1, 1), (1, 1)),
        dimension_numbers=("NHWC", "HWIO", "NHWC"),
        feature_group_count=groups,
    )


def conv_cases():
    x = jnp.ones((2, 16, 16, 8))
    for stride, groups, label in [
        (1, 1, "3x3"),
        (2, 1, "3x3 stride 2"),
        (2, 8, "depthwise 3x3 stride 2"),
    ]:
        w = jnp.ones((3, 3, 8 // groups, 16))
        r = jnp.ones((2, 16 // stride, 16 // stride, 16))
        yield f"conv {label} forward", (lambda x, w, s=stride, g=groups: conv(x, w, s, g)), (x, w)
        loss = lambda x, w, r, s=stride, g=groups: (conv(x, w, s, g) * r).sum()
        yield f"conv {label} forward+backward", jax.value_and_grad(loss, (0, 1)), (x, w, r)


def scan_layers(x, ws):
    return lax.scan(lambda h, w: (jnp.tanh(h @ w), None), x, ws)[0].sum()


def attention(q, k, v):
    weights = jax.nn.softmax(jnp.einsum("bthd,bshd->bhts", q, k), axis=-1)
    return jnp.einsum("bhts,bshd->bthd", weights, v)


class Mlp(nnx.Module):
    def __init__(self, rngs):
        self.up = nnx.Linear(64, 256, rngs=rngs)
        self.down = nnx.Linear(256, 16, rngs=rngs)

    def __call__(self, x):
        return self.down(jax.nn.gelu(self.up(x)))


def mlp_train_step():
    graphdef, params = nnx.split(Mlp(nnx.Rngs(0)), nnx.Param)
    optimizer = optax.adam(1e-3)

    def step(params, opt_state, x, y):
        loss_fn = lambda p: jnp.mean((nnx.merge(graphdef, p)(x) - y) ** 2)
        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step, (params, optimizer.init(params), jnp.ones((32, 64)), jnp.ones((32, 16)))


def cases():
    yield (
        "batched dot 4x(32x64 @ 64x48)",
        (
            lambda a, b: jnp.einsum("bij,bjk->bik", a, b),
            (jnp.ones((4, 32, 64)), jnp.ones((4, 64, 48))),
        ),
    )
    qkv = jnp.ones((2, 128, 4, 32))
    yield "attention einsums B2 T128 H4 D32", (attention, (qkv, qkv, qkv))
    for label, fn, args in conv_cases():
        yield label, (fn, args)
    xs = (jnp.ones((64, 128)), jnp.ones((6, 128, 128)))
    yield "lax.scan of 6 matmul layers, forward", (scan_layers, xs)
    yield (
        "lax.scan of 6 matmul layers, forward+backward",
        (jax.value_and_grad(scan_layers, (0, 1)), xs),
    )
    yield "Flax MLP train step with adam", mlp_train_step()


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    prog = "scripts/telemetry_ratios.py"
    return cli.run(PROG, lambda: print_table(cli.parse(Args, argv, prog=prog)))


def print_table(args: Args) -> int:
    print(f"backend: {jax.default_backend()}\n")
    print("| function | optimized HLO FLOP | cost_analysis() FLOP | HLO / cost_analysis |")
    print("|---|---:|---:|---:|")
    for label, (fn, args) in cases():
        compiled = jax.jit(fn).lower(*args).compile()
        ours = hlo_flops(compiled.as_text()).total
        xla = cost_analysis_flops(compiled)
        ratio = f"{ours / xla:.3f}x" if xla else "n/a"
        print(f"| {label} | {ours:,.0f} | {xla:,.0f} | {ratio} |")
    return cli.EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
