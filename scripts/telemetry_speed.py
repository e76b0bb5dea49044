"""How long the HLO FLOP counter takes against the compile it follows.

Builds a plain Flax NNX decoder train step the size of the published causal_transformer
row (vocab 50304, width 768, 3 layers, 12 heads, SwiGLU 3072, 512 tokens, batch 16, adam),
compiles it ahead of time on this machine's default backend, and prints the compile time,
the size of the optimized HLO, the time `hlo_flops` takes to count it, and both FLOP figures.

    JAX_PLATFORMS=cpu .venv/bin/python scripts/telemetry_speed.py
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from dew.bench.common import cli
from dew.telemetry.instrumentation import cost_analysis_flops, hlo_flops

PROG = "telemetry_speed"

VOCAB, WIDTH, LAYERS, HEADS, HIDDEN, SEQ, BATCH = 50304, 768, 3, 12, 3072, 512, 16


class Block(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        dense = lambda a, b: nnx.Linear(a, b, use_bias=False, dtype=jnp.bfloat16, rngs=rngs)
        self.attention_norm = nnx.RMSNorm(WIDTH, rngs=rngs)
        self.qkv = dense(WIDTH, 3 * WIDTH)
        self.out = dense(WIDTH, WIDTH)
        self.mlp_norm = nnx.RMSNorm(WIDTH, rngs=rngs)
        self.gate = dense(WIDTH, HIDDEN)
        self.up = dense(WIDTH, HIDDEN)
        self.down = dense(HIDDEN, WIDTH)

    def __call__(self, x):
        b, s, _ = x.shape
        q, k, v = jnp.split(self.qkv(self.attention_norm(x)), 3, axis=-1)
        heads = lambda t: t.reshape(b, s, HEADS, WIDTH // HEADS)
        mask = jnp.tril(jnp.ones((s, s), bool))
        attended = jax.nn.dot_product_attention(heads(q), heads(k), heads(v), mask=mask)
        x = x + self.out(attended.reshape(b, s, WIDTH))
        h = self.mlp_norm(x)
        return x + self.down(jax.nn.silu(self.gate(h)) * self.up(h))


class Decoder(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.embed = nnx.Embed(VOCAB, WIDTH, rngs=rngs)
        self.blocks = nnx.List([Block(rngs) for _ in range(LAYERS)])
        self.norm = nnx.RMSNorm(WIDTH, rngs=rngs)

    def __call__(self, tokens):
        x = self.embed(tokens).astype(jnp.bfloat16)
        for block in self.blocks:
            x = block(x)
        x = self.norm(x).astype(jnp.float32)
        return x @ self.embed.embedding[...].T  # tied head, logits in fp32


@dataclasses.dataclass(frozen=True)
class Args:
    """How long the HLO FLOP counter takes against the compile of a causal_transformer-sized
    decoder train step. Takes no flags."""


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    prog = "scripts/telemetry_speed.py"
    return cli.run(PROG, lambda: time_counter(cli.parse(Args, argv, prog=prog)))


def time_counter(args: Args) -> int:
    model = Decoder(nnx.Rngs(0))
    graphdef, params = nnx.split(model, nnx.Param)
    optimizer = optax.adam(1e-4)
    opt_state = optimizer.init(params)

    def loss_fn(params, tokens):
        logits = nnx.merge(graphdef, params)(tokens[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

    def train_step(params, opt_state, tokens):
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    tokens = jax.ShapeDtypeStruct((BATCH, SEQ + 1), jnp.int32)
    lowered = jax.jit(train_step, donate_argnums=(0, 1)).lower(params, opt_state, tokens)
    start = time.perf_counter()
    compiled = lowered.compile()
    compile_seconds = time.perf_counter() - start

    start = time.perf_counter()
    text = compiled.as_text()
    as_text_seconds = time.perf_counter() - start
    start = time.perf_counter()
    count = hlo_flops(text)
    count_seconds = time.perf_counter() - start

    analytic = 6 * BATCH * SEQ * (LAYERS * (4 * WIDTH**2 + 3 * WIDTH * HIDDEN) + VOCAB * WIDTH)
    analytic += 12 * LAYERS * BATCH * SEQ**2 * WIDTH
    xla = cost_analysis_flops(compiled)
    print(f"backend                 {jax.default_backend()} ({jax.devices()[0].device_kind})")
    print(f"compile seconds         {compile_seconds:.2f}")
    print(f"optimized HLO           {len(text) / 1e6:.2f} MB, {text.count(chr(10))} lines")
    print(f"as_text seconds         {as_text_seconds:.3f}")
    print(f"hlo_flops seconds       {count_seconds:.3f}")
    print(f"hlo_flops / compile     {100 * count_seconds / compile_seconds:.2f}%")
    print(f"hlo GFLOP/step          {count.total / 1e9:.3f}  ops {count.op_counts}")
    print(f"analytic GFLOP/step     {analytic / 1e9:.3f}  (6 * tokens * matmul params + attn)")
    if xla is not None:
        print(
            f"cost_analysis GFLOP     {xla / 1e9:.3f}  "
            f"(hlo / cost_analysis = {count.total / xla:.3f}x)"
        )
    print(f"unknown custom calls    {list(count.unknown_custom_calls)}")
    return cli.EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
