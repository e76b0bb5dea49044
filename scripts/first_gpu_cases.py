"""Which cases the first GPU run measures, and the tables it writes from its records.

Standard library only (scripts/first_gpu_run.py imports it before dew's dependencies are
there).

The choice: the small preset's 18 cases cannot each compile three times and be timed in
the step stage's share of a 480 s budget (the RTX 4080's compiles alone sum to about 245 s
for its 12 published rows, once). So the cases are the published rows (results/published,
the newest figure of each plain case) that fit, cheapest first (`choose`), each costed as

    repeats x (compile_s + PER_REPEAT_S + (warmup + 3 x steps + GPU_WINDOW_STEPS) x ms/step)

from the published compile_s and ms/step (the dispatch, synced and GPU windows run the
steps at most: a slow row's synced window is cut to a second; PER_REPEAT_S is a process's
trace, lower, FLOP count and init), after STEP_FIXED_S for the tool's own start (device
probe, environment, idle check). The published figures are the RTX 4080's: a faster card
costs less, so the estimate errs on the safe side. On CUDA one case more comes first, the
cheapest published architecture with attention_impl cudnn: the fused attention path, which
only a GPU runs. Cases without published figures (the architectures the tables have no row
for, the MoE case) are left out, each with why.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

PER_REPEAT_S = 10.0  # a case's process: trace and lower, the FLOP count, init
STEP_FIXED_S = 30.0  # the step tool: imports, the device probe, capture, the idle check
GPU_WINDOW_STEPS = 20  # the GPU window's extra steps at most (it spans 1 s at least)
MIN_WINDOW_S = 1.0
CUDNN_FIRST = ("simple_dit", "simple_udit", "hybrid_dit", "uvit")  # attention, cheap
# The small preset's cases, as the step tool names them: (architecture, batch, moe).
SMALL = (
    ("unet", 16), ("uvit", 16), ("simple_udit", 16), ("simple_dit", 16), ("simple_mmdit", 16),
    ("hierarchical_mmdit", 16), ("hybrid_dit", 16), ("video_dit", 4), ("unet_3d", 4),
    ("jepa_encoder", 16), ("jepa_video_encoder", 4), ("causal_transformer", 16),
    ("unet_2d_condition", 4), ("sd3_transformer", 4), ("flux_transformer", 4),
    ("multimodal_transformer", 8), ("diffusion_gemma", 4),
)  # fmt: skip


def published_figures(directory: Path) -> dict[str, dict]:
    """architecture -> the newest published plain row's {compile_s, ms_per_step, record}:
    rows of the preset's own cases only (no head_chunks, attention_impl or case settings)."""
    found: dict[str, dict] = {}
    for path in sorted(directory.glob("*.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if record.get("kind") != "step" or (record.get("settings") or {}).get("preset") != "small":
            continue
        created = str(record.get("created"))
        for row in record.get("rows", []):
            plain = not row.get("head_chunks") and not row.get("attention_impl")
            plain = plain and not set(row.get("case") or {}) - {"batch"}
            figures = (row.get("compile_s"), row.get("ms_per_step"))
            if row.get("status") != "ok" or not plain or None in figures:
                continue
            have = found.get(row["architecture"])
            if have is None or have["created"] <= created:
                found[row["architecture"]] = {
                    "compile_s": figures[0], "ms_per_step": figures[1],
                    "record": path.name, "created": created,
                }  # fmt: skip
    return found


def cost_s(figures: dict, repeats: int, steps: int, warmup: int = 2) -> float:
    """A case's estimated seconds in the step stage over its repeats (module docstring)."""
    ms = figures["ms_per_step"]
    window = max((steps + GPU_WINDOW_STEPS) * ms / 1e3, MIN_WINDOW_S)
    timed = (warmup + 2 * steps) * ms / 1e3 + window
    return repeats * (figures["compile_s"] + PER_REPEAT_S + timed)


def choose(
    figures: dict[str, dict],
    seconds: float,
    *,
    repeats: int,
    steps: int,
    cudnn: bool,
    architectures: list[str] | None = None,
) -> tuple[list[dict], list[dict]]:
    """(chosen, left out): each a {case, label, estimate_s, why} for the step stage's
    `seconds`; chosen cheapest first, the cudnn case before all on CUDA."""
    left = seconds - STEP_FIXED_S
    chosen, out = [], []
    wanted = [name for name, _ in SMALL if not architectures or name in architectures]
    candidates = []
    for name in wanted:
        if name in figures:
            candidates.append(({"architecture": name}, name, cost_s(figures[name], repeats, steps)))
        else:
            out.append(_entry({"architecture": name}, name, None, "no published figures"))
    if not architectures or "causal_transformer" in architectures:
        case = {"architecture": "causal_transformer", "moe": True}
        out.append(_entry(case, "causal_transformer (moe)", None, "no published figures"))
    cheapest = sorted(candidates, key=lambda item: item[2])
    if cudnn:
        first = next((c for c in cheapest if c[1] in CUDNN_FIRST), None)
        if first is not None:
            case = {**first[0], "attention_impl": "cudnn"}
            cheapest.insert(0, (case, f"{first[1]} (attention_impl=cudnn)", first[2]))
    for case, label, estimate in cheapest:
        if estimate <= left:
            left -= estimate
            chosen.append(_entry(case, label, estimate, "fits"))
        else:
            why = f"does not fit: {estimate:.0f} s estimated, {max(left, 0):.0f} s left"
            out.append(_entry(case, label, estimate, why))
    return chosen, out


def _entry(case: dict, label: str, estimate: float | None, why: str) -> dict:
    return {"case": case, "label": label, "estimate_s": estimate, "why": why}


def cases_table(chosen: list[dict], left_out: list[dict], figures: dict, seconds: float) -> str:
    lines = [f"Cases for the step stage's {seconds:.0f} s (published figures: RTX 4080):", ""]
    lines += ["| case | published compile s | published ms/step | estimate s | |"]
    lines += ["|---|---|---|---|---|"]
    for entry, verdict in [*((e, "chosen") for e in chosen), *((e, "left out") for e in left_out)]:
        known = figures.get(entry["case"]["architecture"]) if entry["estimate_s"] else None
        cells = [
            entry["label"],
            f"{known['compile_s']:g}" if known else "—",
            f"{known['ms_per_step']:g}" if known else "—",
            f"{entry['estimate_s']:.0f}" if entry["estimate_s"] else "—",
            verdict if verdict == "chosen" else f"left out: {entry['why']}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def compare_verdicts(path: Path) -> str:
    """' (verdicts: 2 same, 1 slower): REPRODUCED ...' from compare.md: the rows' verdict
    column counted, and the line under its Verdict heading."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return ""
    counts: dict[str, int] = {}
    header, overall = None, ""
    for number, line in enumerate(lines):
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if "verdict" in cells:
            header = cells.index("verdict")
        elif header is not None and len(cells) > header and set(cells[header]) - set("-: "):
            counts[cells[header]] = counts.get(cells[header], 0) + 1
        elif not line.strip():
            header = None
        if line.strip() == "### Verdict":
            overall = next((rest.strip() for rest in lines[number + 1 :] if rest.strip()), "")
    shown = ", ".join(f"{n} {word}" for word, n in sorted(counts.items()))
    return (f" (verdicts: {shown})" if counts else "") + (f": {overall}" if overall else "")


# --- what the compiler chose, per repeat ----------------------------------------------------


def _fingerprints(repeat: dict) -> dict[str, str]:
    """A repeat's fingerprint fields (those named hlo*, *fingerprint*, *autotun*)."""
    found = {}
    for name, value in sorted(repeat.items()):
        if value is None or not re.search(r"^hlo|fingerprint|autotun", name):
            continue
        parts = value.items() if isinstance(value, dict) else [(None, value)]
        for part, text in parts:  # {"program": ..., "kernels": ...}: one column each
            if text is not None:
                found[f"{name}.{part}" if part else name] = str(text)
    return found


def fingerprint_table(record: dict) -> str:
    """Per row: each repeat's fingerprints (first 12 characters), and whether the repeats
    compiled to one program; n/a where the rows carry none."""
    lines = ["| row | repeat | fingerprints | log |", "|---|---|---|---|"]
    for row in record.get("rows", []):
        repeats = row.get("repeats") or []
        seen = [_fingerprints(repeat) for repeat in repeats]
        for number, (repeat, prints) in enumerate(zip(repeats, seen, strict=True), 1):
            shown = ", ".join(f"{k}={v[:12]}" for k, v in prints.items()) or "n/a"
            lines.append(f"| {_label(row)} | {number} | {shown} | {repeat.get('log') or '—'} |")
        if any(seen):
            programs = len({json.dumps(p, sort_keys=True) for p in seen})
            verdict = "one program" if programs == 1 else f"{programs} programs over {len(seen)}"
            lines.append(f"| {_label(row)} | all | {verdict} | |")
        if not repeats:
            lines.append(f"| {_label(row)} | — | n/a ({row.get('status')}) | |")
    return "\n".join(lines) + "\n"


def _label(row: dict) -> str:
    parts = [f"{k}={v}" for k, v in sorted((row.get("case") or {}).items()) if k != "batch"]
    if row.get("attention_impl"):
        parts.insert(0, f"attention_impl={row['attention_impl']}")
    return row["architecture"] + (f" ({', '.join(parts)})" if parts else "")


def _fmt(value, digits: int = 1) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


GPU_HEADERS = (
    "row", "p50 ms", "p50 ms sampled", "change", "SM MHz min/median", "mem MHz", "max °C",
    "W (mean)", "J/step", "samples/kJ", "reasons (GPU 0)", "uncounted custom calls",
    "allocator",
)  # fmt: skip


def gpu_table(record: dict) -> str:
    """Per row: the synced p50 without and with the sampler, and the first card's readings
    (every card is in step.json), and the allocator setting its process ran with."""
    lines = ["| " + " | ".join(GPU_HEADERS) + " |", "|" + "---|" * len(GPU_HEADERS)]
    for row in record["rows"]:
        gpu = row.get("gpu") or {}
        card = (gpu.get("gpus") or [{}])[0]
        plain, sampled = row.get("p50_ms"), gpu.get("p50_ms")
        calls = row.get("uncounted_custom_calls")
        preallocate, fraction = row.get("xla_preallocate"), row.get("xla_mem_fraction")
        cells = [
            _label(row),
            _fmt(plain, 2),
            _fmt(sampled, 2),
            f"{(sampled / plain - 1) * 100:+.1f}%" if plain and sampled else "—",
            f"{_fmt(card.get('sm_clock_mhz_min'), 0)}/{_fmt(card.get('sm_clock_mhz_median'), 0)}",
            _fmt(card.get("memory_clock_mhz_median"), 0),
            _fmt(card.get("temperature_c_max"), 0),
            _fmt(card.get("power_w_mean")),
            _fmt(gpu.get("joules_per_step"), 3),
            _fmt(gpu.get("samples_per_kj")),
            ", ".join(card.get("clocks_event_reasons") or []) or gpu.get("note") or "—",
            ", ".join(f"{k} x{v}" for k, v in calls.items()) if calls else "—",
            "—" if preallocate is None else
            f"preallocate {'on' if preallocate else 'off'}, fraction {fraction or 'default'}",
        ]  # fmt: skip
        if row.get("status") != "ok":
            cells[1] = f"failed: {row.get('error')}"
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
