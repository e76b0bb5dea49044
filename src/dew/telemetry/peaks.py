"""Dense bf16 peak FLOP/s by JAX device kind: the denominator of utilisation.

Dense means without 2:4 structured sparsity (datasheets often print the sparse figure
first, twice the dense one), and bf16 with fp32 accumulation where a datasheet tells the
two apart. An unknown device or a CPU gives None, never a guess: a wrong peak would make
every utilisation figure wrong without anyone noticing. Nor does a MIG instance, a share of
a card (no_peak_reason).
"""

from __future__ import annotations

import functools
import re

from dew import platforms
from dew.platforms import Peak

# Each platform's table is its own (dew.platforms: `peaks` of its module). Keys are matched
# inside `jax.Device.device_kind` as whole words ("A100" inside "NVIDIA A100-SXM4-80GB",
# "H100 80GB HBM3" inside "NVIDIA H100 80GB HBM3"); the longest key that matches wins, so
# "H200 NVL" beats "H200" and "TPU v5 lite" beats "TPU v5".


# A key followed by one of these words names a different part ("RTX 4080 SUPER", "TPU v4
# lite"): no match, hence None rather than a neighbour's peak.
_VARIANT_WORDS = frozenset({"super", "ti", "laptop", "mobile", "lite", "max-q"})


@functools.cache
def _pattern(key: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![A-Za-z0-9]){re.escape(key)}(?![A-Za-z0-9])(?:[\s_-]+([\w-]+))?", re.I)


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
    table = platforms.peaks()
    for key in table:
        found = _pattern(key).search(device_kind or "")
        if found is None:
            continue
        following = (found.group(1) or "").lower()
        if following in _VARIANT_WORDS and following not in key.lower():
            continue
        if best is None or len(key) > len(best[0]):
            best = (key, table[key])
    return best


def peak_bf16_flops(device_kind: str) -> float | None:
    """Dense bf16 peak in FLOP/s for a `jax.Device.device_kind`, or None if not in the table."""
    entry = peak_entry(device_kind)
    return entry[1].tflops * 1e12 if entry else None
