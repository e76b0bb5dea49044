"""hlo_flops on hand-written GPU-format HLO (fixtures/), each figure from its formula.

The fixtures follow what XLA's GPU backend prints (as_text preamble, cuBLAS/cuDNN custom
calls with their backend_config JSON, Triton and cuDNN fusions, a while loop with
known_trip_count), so the GPU paths of the counter are checked on a CPU-only machine. Each
fixture is also read by XLA's own HLO parser, which rejects malformed text.
"""

import re
from pathlib import Path

import pytest

from dew.telemetry.instrumentation import HloParseError, hlo_flops

FIXTURES = Path(__file__).parent / "fixtures"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


@pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.glob("*.hlo")))
def test_fixture_is_well_formed_hlo(name):
    from jaxlib import _hlo

    assert _hlo.hlo_module_from_text(fixture(name)).name.startswith("jit_")


def product_flops(batch, m, n, k):
    """2 x result elements (batch x m x n) x contracted size (k)."""
    return 2 * batch * m * n * k


def test_cublas_gemm_calls_count_their_result_times_contracted_size():
    count = hlo_flops(fixture("cublas_gemm.hlo"))
    batched = product_flops(8, 128, 256, 64)  # __cublas$gemm, batch dim 0, contracting 2
    head = product_flops(1, 512, 50304, 768)  # __cublas$lt$matmul, rhs contracting dim 1
    fp8 = product_flops(1, 256, 1024, 512)  # __cublas$lt$matmul$f8, scale operands beside
    assert count.by_kind["cublas_gemm"] == batched + head + fp8
    assert count.op_counts["cublas_gemm"] == 3
    assert count.total == count.by_kind["cublas_gemm"]
    assert count.unknown_custom_calls == ()


def conv_flops(output_elements, taps, input_features_per_group):
    return 2 * output_elements * taps * input_features_per_group


def test_cudnn_convolutions_count_the_forward_figure_of_the_convolution_they_describe():
    count = hlo_flops(fixture("cudnn_conv.hlo"))
    # A strided 3x3 layer, 32 -> 64 channels on 16 x 64 x 64: output 16 x 32 x 32 x 64.
    strided_forward = conv_flops(16 * 32 * 32 * 64, 3 * 3, 32)
    # Its input gradient and filter gradient count what the forward counts: 3x together.
    layer = 3 * strided_forward
    # convBiasActivationForward, NCHW, padded 3x3 stride 2, 16 -> 32 channels on 4 x 32 x 32.
    fused = conv_flops(4 * 32 * 16 * 16, 3 * 3, 16)
    # convForwardGraph, stride 2, feature_group_count=4: 64 input channels, 16 per group.
    grouped = conv_flops(2 * 8 * 8 * 128, 3 * 3, 64 // 4)
    assert count.by_kind["cudnn_conv"] == layer + fused + grouped
    assert count.op_counts["cudnn_conv"] == 5
    assert count.total == count.by_kind["cudnn_conv"]


def attention_product(b, n, t, s, d):
    return 2 * b * n * t * s * d


def test_cudnn_fused_attention_counts_two_products_forward_four_backward():
    text = fixture("cudnn_fmha.hlo")
    # Causal self-attention, B 4, N 12, T = S 512, head dim 64 for Q and V.
    causal_forward = 2 * attention_product(4, 12, 512, 512, 64)
    causal_backward = 4 * attention_product(4, 12, 512, 512, 64)
    # Biased cross-attention without mask, B 2, N 8, T 256, S 1024, Q head 64, V head 128:
    # QK^T contracts the Q head dim, PV produces the V head dim.
    cross = attention_product(2, 8, 256, 1024, 64) + attention_product(2, 8, 256, 1024, 128)

    full = hlo_flops(text)
    assert full.by_kind["cudnn_fmha"] == causal_forward + causal_backward + cross
    assert full.op_counts["cudnn_fmha"] == 3

    halved = hlo_flops(text, causal_factor=0.5)  # only calls with a causal mask scale
    assert halved.total == 0.5 * (causal_forward + causal_backward) + cross


def test_triton_and_cudnn_fusions_are_entered_and_the_while_body_weighted_by_trip_count():
    count = hlo_flops(fixture("triton_while.hlo"))
    trips = 4  # known_trip_count of the while
    # Body: a __triton_gemm fusion (8192 x 768 @ 768 x 3072) and one whose dot reads nested
    # Triton fusions (8192 x 3072 @ 3072 x 768). Entry: a __cudnn$fusion (8192 x 64 @ 64 x 256).
    body = product_flops(1, 8192, 3072, 768) + product_flops(1, 8192, 768, 3072)
    cudnn_fusion = product_flops(1, 8192, 256, 64)
    assert count.total == trips * body + cudnn_fusion
    assert count.op_counts["dot"] == trips * 2 + 1


def test_trip_count_is_inferred_from_the_constant_bound_when_not_given():
    text = fixture("triton_while.hlo")
    without = re.sub(r'"known_trip_count":\{"n":"\d+"\},"known_init_step":\{[^}]*\},', "", text)
    assert "known_trip_count" not in without and "known_init_step" not in without
    assert hlo_flops(without).total == hlo_flops(text).total


def test_while_without_any_bound_raises():
    text = fixture("triton_while.hlo")
    without = re.sub(r'"known_trip_count":\{"n":"\d+"\},', "", text)
    unbounded = without.replace(
        "compare(%get-tuple-element.13, %constant.12), direction=LT",
        "compare(%get-tuple-element.13, %get-tuple-element.13), direction=LT",
    )
    assert unbounded != without
    with pytest.raises(HloParseError, match="while %while.1"):
        hlo_flops(unbounded)


def test_ragged_dot_counts_active_work_and_unknown_custom_calls_are_listed():
    count = hlo_flops(fixture("ragged_dot_and_unknown.hlo"))
    # 4096 token-slots, each through one expert's 768 x 3072 kernel: the active work only.
    assert count.by_kind["ragged_dot"] == product_flops(1, 4096, 3072, 768)
    assert count.total == count.by_kind["ragged_dot"]
    # A Pallas/Triton kernel call does work the counter cannot see: 0, and named.
    assert count.unknown_custom_calls == ("__gpu$xla.gpu.triton",)


def test_a_tpus_matmul_written_as_a_convolution_counts_as_the_matmul():
    """A TPU's HLO writes some dots as convolutions whose window runs over an input extent
    of 1, or over the axis dilated by size-1 and strided by size, padded by size-1 on both
    sides (the shapes and windows below are hierarchical_mmdit's, unet's and simple_dit's on
    a v5e): one tap of each output position meets the input, and the count is the
    matmul's, as the CPU's HLO of the same step counts it. An ordinary convolution's
    padding taps still count, a 1x1 input's too."""
    count = hlo_flops(fixture("tpu_matmul_as_convolution.hlo"))
    # The input gradient of a 192 -> 192 Linear on 16 x 1024 tokens, batch as the window.
    linear_gradient = product_flops(16, 1024, 192, 192)
    # A 64 -> 4 x 16 Linear on 16 x 1024 rows, the head axis as the window.
    head_split = product_flops(16, 1024, 4 * 16, 64)
    one_pixel = conv_flops(2 * 1 * 1 * 16, 3 * 3, 8)  # SAME 3x3 on 1x1: padding counts
    image = conv_flops(2 * 8 * 8 * 16, 3 * 3, 8)
    # Attention's gradient probs x values on simple_dit: for each of 16 x 6 (batch, head),
    # [256, 256] x [256, 64], batch and heads as windows over their axes dilated by size-1
    # and strided by size (one tap of each output position meets a value, the rest holes).
    attention_gradient = product_flops(16 * 6, 256, 64, 256)
    assert count.by_kind["convolution"] == (
        linear_gradient + head_split + one_pixel + image + attention_gradient
    )
    assert count.op_counts["convolution"] == 5
