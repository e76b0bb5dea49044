"""Dense bf16 peak FLOP/s by JAX device kind: the denominator of utilisation.

Dense means without 2:4 structured sparsity (datasheets often print the sparse figure
first, twice the dense one), and bf16 with fp32 accumulation where a datasheet tells the
two apart. An unknown device or a CPU gives None, never a guess: a wrong peak would make
every utilisation figure wrong without anyone noticing. Nor does a MIG instance, a share of
a card (no_peak_reason).
"""

from __future__ import annotations

import re
from typing import NamedTuple


class Peak(NamedTuple):
    tflops: float
    source: str


# Keys are matched inside `jax.Device.device_kind` as whole words ("A100" inside
# "NVIDIA A100-SXM4-80GB", "H100 80GB HBM3" inside "NVIDIA H100 80GB HBM3"); the longest key
# that matches wins, so "H200 NVL" beats "H200" and "TPU v5 lite" beats "TPU v5".
PEAK_BF16_TFLOPS: dict[str, Peak] = {
    "RTX 4080": Peak(97.5, "NVIDIA Ada GPU Architecture whitepaper, GeForce RTX 4080 column"),
    "RTX 4090": Peak(165.2, "NVIDIA Ada GPU Architecture whitepaper, GeForce RTX 4090 column"),
    "RTX 3090": Peak(71.0, "NVIDIA Ampere GA102 GPU Architecture whitepaper, RTX 3090 column"),
    "A100": Peak(312.0, "NVIDIA A100 Tensor Core GPU datasheet (SXM and PCIe)"),
    "H100 80GB HBM3": Peak(989.4, "NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column"),
    "H100 SXM": Peak(989.4, "NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column"),
    "H100 SXM5": Peak(989.4, "NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column"),
    "H100 PCIe": Peak(756.0, "NVIDIA H100 Tensor Core GPU datasheet, H100 PCIe column"),
    "H100 NVL": Peak(835.0, "NVIDIA H100 NVL datasheet, per GPU"),
    "H200": Peak(989.0, "NVIDIA H200 Tensor Core GPU datasheet, H200 SXM column"),
    "H200 NVL": Peak(835.0, "NVIDIA H200 Tensor Core GPU datasheet, H200 NVL column"),
    "B200": Peak(2250.0, "NVIDIA DGX B200 / HGX B200 datasheet, per GPU, dense"),
    "L4": Peak(121.0, "NVIDIA L4 Tensor Core GPU datasheet"),
    "L40S": Peak(362.0, "NVIDIA L40S GPU datasheet"),
    "TPU v4": Peak(275.0, "Google Cloud TPU v4 system architecture page"),
    "TPU v5 lite": Peak(197.0, "Google Cloud TPU v5e system architecture page"),
    "TPU v5e": Peak(197.0, "Google Cloud TPU v5e system architecture page"),
    "TPU v5": Peak(459.0, "Google Cloud TPU v5p system architecture page"),
    "TPU v5p": Peak(459.0, "Google Cloud TPU v5p system architecture page"),
    "TPU v6 lite": Peak(918.0, "Google Cloud TPU v6e (Trillium) system architecture page"),
    "TPU v6e": Peak(918.0, "Google Cloud TPU v6e (Trillium) system architecture page"),
}

# A key followed by one of these words names a different part ("RTX 4080 SUPER", "TPU v4
# lite"): no match, hence None rather than a neighbour's peak.
_VARIANT_WORDS = frozenset({"super", "ti", "laptop", "mobile", "lite", "max-q"})

_KEY_PATTERNS = {
    key: re.compile(rf"(?<![A-Za-z0-9]){re.escape(key)}(?![A-Za-z0-9])(?:[\s_-]+([\w-]+))?", re.I)
    for key in PEAK_BF16_TFLOPS
}


# A MIG instance's device kind is its card's with the profile after it ("NVIDIA H100 80GB
# HBM3 MIG 1g.10gb"). It holds a share of the card's SMs that its name does not state
# exactly (a 1g slice of an H100 SXM: 16 of 132 SMs, not 1/7), so it gets no peak: the
# card's would understate its utilisation several times over, a guessed share would be a
# guess.
_MIG = re.compile(r"(?<![A-Za-z0-9])MIG(?![A-Za-z0-9])")


def no_peak_reason(device_kind: str) -> str | None:
    """Why a device the table would match has no peak (a MIG instance), for the row's note;
    None otherwise (a CPU or an unknown kind needs no saying)."""
    if _MIG.search(device_kind or ""):
        return (
            f"util is null: {device_kind} is a MIG instance, a share of the card's SMs, "
            "and the whole card's peak is not its own"
        )
    return None


def peak_entry(device_kind: str) -> tuple[str, Peak] | None:
    """The table entry for a device kind (longest matching key), or None (also for a MIG
    instance of a card in the table: no_peak_reason)."""
    if no_peak_reason(device_kind):
        return None
    best: tuple[str, Peak] | None = None
    for key, pattern in _KEY_PATTERNS.items():
        found = pattern.search(device_kind or "")
        if found is None:
            continue
        following = (found.group(1) or "").lower()
        if following in _VARIANT_WORDS and following not in key.lower():
            continue
        if best is None or len(key) > len(best[0]):
            best = (key, PEAK_BF16_TFLOPS[key])
    return best


def peak_bf16_flops(device_kind: str) -> float | None:
    """Dense bf16 peak in FLOP/s for a `jax.Device.device_kind`, or None if not in the table."""
    entry = peak_entry(device_kind)
    return entry[1].tflops * 1e12 if entry else None
