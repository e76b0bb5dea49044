"""No silent zeros: every custom call the FLOP counter does not know is listed with the
number of times one step runs it (a while body's calls times the loop's trips)."""

from pathlib import Path

from dew.telemetry.instrumentation import hlo_flops

FIXTURES = Path(__file__).parent / "fixtures"
UNKNOWN = "__gpu$xla.gpu.triton"


def test_an_unknown_custom_call_is_listed_with_its_count():
    count = hlo_flops((FIXTURES / "ragged_dot_and_unknown.hlo").read_text())
    assert count.unknown_custom_calls == (UNKNOWN,)
    assert count.unknown_custom_call_counts == {UNKNOWN: 1}


def test_an_unknown_call_in_a_while_body_counts_once_per_trip():
    hlo = (FIXTURES / "triton_while.hlo").read_text()
    # A Pallas kernel inside the scanned layer (trip count 4) and one more after the loop.
    in_body = (
        f"  %custom-call.9 = bf16[8192,768]{{1,0}} custom-call(%gemm_fusion_dot.2), "
        f'custom_call_target="{UNKNOWN}"\n'
    )
    hlo = hlo.replace(
        "  %constant.11 = s32[] constant(1)\n", in_body + "  %constant.11 = s32[] constant(1)\n"
    )
    after = (
        f"  %custom-call.10 = f32[8192,256]{{1,0}} custom-call(%cudnn_fusion.1), "
        f'custom_call_target="{UNKNOWN}"\n'
        "  %custom-call.11 = f32[8192,256]{1,0} custom-call(%cudnn_fusion.1), "
        'custom_call_target="my_own_kernel"\n'
    )
    hlo = hlo.replace("  ROOT %tuple.21", after + "  ROOT %tuple.21")
    count = hlo_flops(hlo)
    assert count.unknown_custom_call_counts == {UNKNOWN: 4 + 1, "my_own_kernel": 1}
    assert count.unknown_custom_calls == (UNKNOWN, "my_own_kernel")
    assert count.total == hlo_flops((FIXTURES / "triton_while.hlo").read_text()).total  # as 0
