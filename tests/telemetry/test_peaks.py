"""The dense bf16 peak table: exact JAX device kinds, longest match, None when unsure."""

import pytest

from dew.platforms import peaks as platform_peaks
from dew.telemetry.peaks import peak_bf16_flops, peak_entry


@pytest.mark.parametrize(
    ("device_kind", "tflops"),
    [
        ("NVIDIA H100 80GB HBM3", 989.4),
        ("NVIDIA H100 PCIe", 756.0),
        ("NVIDIA H100 NVL", 835.0),
        ("NVIDIA GeForce RTX 4080", 97.5),
        ("NVIDIA GeForce RTX 4090", 165.2),
        ("NVIDIA GeForce RTX 3090", 71.0),
        ("NVIDIA H200", 989.0),
        ("NVIDIA H200 NVL", 835.0),
        ("NVIDIA A100-SXM4-80GB", 312.0),
        ("NVIDIA A100 80GB PCIe", 312.0),
        ("NVIDIA B200", 2250.0),
        ("NVIDIA L4", 121.0),
        ("NVIDIA L40S", 362.0),
        ("TPU v4", 275.0),
        ("TPU v5 lite", 197.0),
        ("TPU v5", 459.0),
        ("TPU v5p", 459.0),
        ("TPU v6 lite", 918.0),
    ],
)
def test_known_device_kinds(device_kind, tflops):
    assert peak_bf16_flops(device_kind) == pytest.approx(tflops * 1e12)


@pytest.mark.parametrize(
    "device_kind",
    [
        "cpu",
        "",
        "NVIDIA GeForce RTX 4080 SUPER",  # a different part than the RTX 4080
        "NVIDIA GeForce RTX 4090 Laptop GPU",
        "NVIDIA L40",  # "L4" must not match inside it
        "NVIDIA H100",  # SXM or PCIe? not a guess
        "TPU v4 lite",
        "Some Future Accelerator 9000",
    ],
)
def test_unknown_or_ambiguous_device_kinds_give_none(device_kind):
    assert peak_bf16_flops(device_kind) is None


def test_longest_key_wins_and_every_entry_cites_a_source():
    assert peak_entry("NVIDIA H200 NVL")[0] == "H200 NVL"
    assert peak_entry("TPU v5 lite")[0] == "TPU v5 lite"
    assert all(peak.source and peak.tflops > 0 for peak in platform_peaks().values())


@pytest.mark.parametrize(
    "device_kind",
    [
        "NVIDIA H100 80GB HBM3 MIG 1g.10gb",
        "NVIDIA H100 80GB HBM3 MIG 3g.40gb",
        "NVIDIA A100-SXM4-40GB MIG 1g.5gb",
        "NVIDIA H200 MIG 7g.141gb",  # the whole card as one instance: still not the card
    ],
)
def test_a_mig_instance_gets_no_peak_and_says_why(device_kind):
    from dew.telemetry.instrumentation import mfu
    from dew.telemetry.peaks import no_peak_reason

    assert peak_entry(device_kind) is None and peak_bf16_flops(device_kind) is None
    assert mfu(1e12, 0.01, device_kind) is None
    assert no_peak_reason(device_kind) == (
        f"util is null: {device_kind} is a MIG instance, a share of the card's SMs, "
        "and the whole card's peak is not its own"
    )


@pytest.mark.parametrize("device_kind", ["NVIDIA H100 80GB HBM3", "cpu", "", "NVIDIA AMIGO"])
def test_a_whole_card_or_a_cpu_needs_no_reason(device_kind):
    from dew.telemetry.peaks import no_peak_reason

    assert no_peak_reason(device_kind) is None
