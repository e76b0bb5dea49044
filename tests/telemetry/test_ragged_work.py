"""The work count (`FlopCount.work`) against a count by hand of a mixture of experts' layer.

The layer is dew's own (dew.models.decoder.MixtureOfExperts), tiny: T = 128 tokens,
d = 32, hidden h = 64, E = 8 experts, top k = 2, so T·k = 256 routed rows. By hand, from
its shapes, the matrix work of its forward and backward:

- the experts' gate, up and down products, each 2·(T·k)·d·h on the rows routed, three
  times over (the forward, the input gradient, the weight gradient): 9 · 2·T·k·d·h;
- the router's Dense(d -> E), a plain dot, three times over: 3 · 2·T·d·E.

`fixtures/tpu_moe_layer.hlo` is that layer's forward and backward compiled for a TPU
(`jax.jit(jax.grad(loss)).lower(...).compile()` for the devices of
`dew.train.executables.topology_devices("v5e:1x1")`, libtpu 0.0.46.3, jax 0.11.1, without
the chip; loss = sum(layer(x) * y)), with the Mosaic kernels' bodies and the other
instructions' backend configs cut to keep it small. Its XLA writes the forward and the
weight gradient over all E experts, masked (convolutions), and the input gradient as its
own Mosaic kernel (`ragged-dot-none`, a `tpu_custom_call` stating its cost).

`fixtures/tpu_moe_layer_libtpu_0_0_42.hlo` is the same layer compiled the same way by the
TPU host's own stack (libtpu 0.0.42.1, jax 0.10.2), cut the same way. Its XLA writes the
forward and the input gradient as Mosaic kernels, and the weight gradient over all E
experts, masked, as convolutions whose metadata names nothing: each operand is the routed
rows broadcast to every expert, each expert's copy masked to its own rows.
"""

import re
from pathlib import Path

import pytest

from dew.telemetry.instrumentation import hlo_flops

FIXTURES = Path(__file__).parent / "fixtures"
T, D, H, E, K = 128, 32, 64, 8, 2
EXPERT_PRODUCT = 2 * T * K * D * H  # one of gate, up, down on the routed rows
ROUTER = 3 * 2 * T * D * E  # forward, input gradient, weight gradient
BY_HAND = 9 * EXPERT_PRODUCT + ROUTER


def test_the_tpu_programs_work_count_is_the_count_by_hand():
    count = hlo_flops((FIXTURES / "tpu_moe_layer.hlo").read_text())
    assert count.work == BY_HAND == 9_633_792
    # Executed: the forward's and the weight gradient's 6 products over all 8 experts; the
    # 3 input-gradient kernels are calls the executed count cannot see (0, named).
    assert count.total == 6 * E * EXPERT_PRODUCT + ROUTER
    assert count.unknown_custom_call_counts["tpu_custom_call"] == 4
    # The 3 kernels state their cost; the one that computes the groups' offsets states none.
    assert count.work_unknown_custom_call_counts["tpu_custom_call"] == 1


def test_libtpu_0_0_42s_program_s_work_count_is_the_count_by_hand():
    count = hlo_flops((FIXTURES / "tpu_moe_layer_libtpu_0_0_42.hlo").read_text())
    assert count.work == BY_HAND
    # Executed: the weight gradient's 3 products over all 8 experts; the forward's and the
    # input gradient's 6 kernels, and the one for the groups' offsets, count 0 (named).
    assert count.total == 3 * E * EXPERT_PRODUCT + ROUTER
    assert count.unknown_custom_call_counts["tpu_custom_call"] == 7
    assert count.work_unknown_custom_call_counts["tpu_custom_call"] == 1


# Each edit makes the weight gradient's convolutions products the masks do not split by
# expert, which the work count keeps whole: a mask over the expert and an output feature
# rather than the rows, or rows that differ from expert to expert.
NOT_BY_GROUP = {
    "mask_not_over_rows": (
        r"(pred\[8,256,\d+\]\S* broadcast\(%mask[.\d]*\)), dimensions=\{0,1\}",
        r"\1, dimensions={0,2}",
    ),
    "rows_per_expert": (
        r"(broadcast\(%(?:activations|kernel)[.\d]*\)), dimensions=\{1,2\}",
        r"\1, dimensions={0,1,2}",
    ),
}


@pytest.mark.parametrize("edit", NOT_BY_GROUP, ids=list(NOT_BY_GROUP))
def test_a_masked_product_not_split_by_group_counts_whole(edit):
    pattern, replacement = NOT_BY_GROUP[edit]
    hlo, edits = re.subn(
        pattern, replacement, (FIXTURES / "tpu_moe_layer_libtpu_0_0_42.hlo").read_text()
    )
    assert edits == 6  # both operands of each of the 3 convolutions
    count = hlo_flops(hlo)
    assert count.work == BY_HAND + 3 * (E - 1) * EXPERT_PRODUCT


def test_a_ragged_dot_and_mosaic_calls_count_their_work():
    count = hlo_flops((FIXTURES / "mosaic_and_ragged_gradient.hlo").read_text())
    routed = 2 * 4096 * 768 * 3072  # 4096 rows, each through one of 8 kernels 768 x 3072
    # The weight gradient's ragged-dot: each expert's kernel from its own rows, not all.
    assert count.by_kind["ragged_dot"] == 8 * routed
    # Its work, plus two Mosaic calls' stated cost: XLA's (int64 as a string) and Pallas's.
    assert count.work == 3 * routed
    assert count.unknown_custom_call_counts == {"tpu_custom_call": 3}
    assert count.work_unknown_custom_call_counts == {"tpu_custom_call": 1}


def test_a_mosaic_call_whose_cost_is_no_number_is_named_not_counted():
    hlo = (FIXTURES / "mosaic_and_ragged_gradient.hlo").read_text()
    broken = hlo.replace('"flops":"19327352832"', '"flops":"many"')
    count = hlo_flops(broken)
    assert count.work == 2 * (2 * 4096 * 768 * 3072)
    assert count.work_unknown_custom_call_counts == {"tpu_custom_call": 2}


def test_the_cpu_does_every_experts_product_and_counts_it():
    """JAX lowers a ragged dot on the CPU to dense products over every expert, masked: the
    CPU does 8x the routed work, and its optimized HLO shows plain dots, which no count can
    tell from any other, so the work count is the executed count there."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    from flax import nnx

    from dew.models.decoder import MixtureOfExperts

    layer = MixtureOfExperts(D, H, E, K, rngs=nnx.Rngs(0), dtype=jnp.bfloat16)
    graph, params = nnx.split(layer)

    def loss(params, x, y):
        return (nnx.merge(graph, params)(x) * y).sum()

    tokens = jnp.ones((T, D), jnp.bfloat16)
    compiled = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(params, tokens, tokens).compile()
    count = hlo_flops(compiled.as_text())
    assert count.total == count.work == 9 * E * EXPERT_PRODUCT + ROUTER
