"""Device memory of a step: the allocator's peak, and the compiler's static estimate.

The allocator's peak only rises within a process (there is no API to reset it), so a
benchmark row owns it only when the row has the process to itself. The compiler's
`memory_analysis()` is per executable and exists on CPU as well.
"""

from __future__ import annotations

# `memory_analysis()` attribute -> the key it is reported under.
COMPILER_MEMORY_FIELDS = {
    "argument_size_in_bytes": "argument_bytes",
    "output_size_in_bytes": "output_bytes",
    "alias_size_in_bytes": "alias_bytes",
    "temp_size_in_bytes": "temp_bytes",
    "peak_memory_in_bytes": "peak_bytes",
}


def peak_bytes_in_use(device) -> int | None:
    """The allocator's peak bytes in use on `device` so far, or None (CPUs report none)."""
    try:
        stats = device.memory_stats()
    except Exception:  # some backends raise instead of returning None
        return None
    if not stats or "peak_bytes_in_use" not in stats:
        return None
    return int(stats["peak_bytes_in_use"])


def compiler_memory(compiled) -> dict[str, int | None]:
    """The compiler's static memory estimate of an executable, in bytes.

    Keys: argument_bytes, output_bytes, alias_bytes, temp_bytes, peak_bytes; a value is None
    where the backend does not report it. peak_bytes falls back to argument + output + temp
    - alias (what XLA's own peak adds up to) where the backend gives no peak of its own.
    """
    try:
        analysis = compiled.memory_analysis()
    except Exception:  # backends without the analysis raise rather than return None
        analysis = None
    if isinstance(analysis, list | tuple):
        analysis = analysis[0] if analysis else None
    report: dict[str, int | None] = {}
    for attribute, key in COMPILER_MEMORY_FIELDS.items():
        value = getattr(analysis, attribute, None) if analysis is not None else None
        report[key] = int(value) if value is not None else None
    parts = [report[k] for k in ("argument_bytes", "output_bytes", "temp_bytes", "alias_bytes")]
    if not report["peak_bytes"] and None not in parts:
        argument, output, temp, alias = parts
        report["peak_bytes"] = argument + output + temp - alias
    return report
