"""The parity table: our small preset against the published step table.

    python scripts/parity_table.py [--architectures simple_dit causal_transformer ...]
        [--published results/published/2026-09-02-rtx4080-6b0f119-small.json]
        [--json-out parity.json] [--condition-in-state]

For every registered architecture with a published row: build the Trainer (small preset,
bf16, one device, the condition table a constant as on 2026-09-02, or in the state with
--condition-in-state for the 2026-09-05 rerun), compile the train step
ahead of time on this machine (not run) at the published batch, and print params ours /
published, GFLOP/step ours (dew.telemetry, optimized HLO) / published, and compile
seconds. Exit 0 when every params cell is equal and every GFLOP within 0.1%.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_PUBLISHED = REPO / "results" / "published" / "2026-09-02-rtx4080-6b0f119-small.json"
GFLOP_TOLERANCE = 1e-3  # relative


def published_rows(path: Path) -> dict[str, dict]:
    """architecture -> {"params", "gflop", "batch"} from a published record."""
    record = json.loads(path.read_text())
    rows: dict[str, dict] = {}
    for row in record["rows"]:
        # the architecture's plain row: not a per-case variant (head_chunks, MoE), with figures
        plain = row.get("case") is None and row.get("head_chunks") is None
        figures = row.get("params") is not None and row.get("gflop_per_step") is not None
        if plain and figures and row.get("status", "ok") == "ok":
            rows.setdefault(
                row["architecture"],
                {"params": row["params"], "gflop": row["gflop_per_step"], "batch": row["batch"]},
            )
    return rows


def measure(architecture: str, batch: int, condition_in_state: bool) -> dict:
    from dew.train.trainer import Trainer

    trainer = Trainer(
        architecture,
        preset="small",
        condition_in_state=condition_in_state,
        compilation_cache_dir=None,
    )
    trainer.compile(trainer.example_batch(batch))
    return {  # a published params cell counts the condition table where it is in the state
        "params": trainer.param_counts["backbone"] + trainer.param_counts["condition"],
        "condition_params": trainer.param_counts["condition"],
        "gflop": trainer.flops / 1e9,
        "compile_s": trainer.compile_seconds,
    }


def row_ok(ours: dict, published: dict) -> bool:
    return (
        ours.get("params") == published["params"]
        and ours.get("gflop") is not None
        and abs(ours["gflop"] / published["gflop"] - 1) <= GFLOP_TOLERANCE
    )


def format_table(rows: list[dict]) -> str:
    header = (
        f"{'architecture':<20} {'params ours':>12} {'published':>12} "
        f"{'GFLOP ours':>11} {'published':>10} {'diff %':>7} {'compile s':>9}  status"
    )
    lines = [header, "-" * len(header)]
    for row in rows:
        ours, pub = row["ours"], row["published"]
        if "error" in ours:
            lines.append(
                f"{row['architecture']:<20} {'-':>12} {pub['params']:>12,} {'-':>11} "
                f"{pub['gflop']:>10.1f} {'-':>7} {'-':>9}  {ours['error']}"
            )
            continue
        diff = 100 * (ours["gflop"] / pub["gflop"] - 1)
        lines.append(
            f"{row['architecture']:<20} {ours['params']:>12,} {pub['params']:>12,} "
            f"{ours['gflop']:>11.3f} {pub['gflop']:>10.1f} {diff:>+7.3f} "
            f"{ours['compile_s']:>9.1f}  {'ok' if row['ok'] else 'MISMATCH'}"
        )
    return "\n".join(lines)


def write_json(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as f:
        json.dump(rows, f, indent=2)
    os.replace(f.name, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--architectures", nargs="*", default=None)
    parser.add_argument("--published", type=Path, default=DEFAULT_PUBLISHED)
    parser.add_argument("--json-out", type=Path, default=None)
    parser.add_argument(
        "--condition-in-state",
        action="store_true",
        help="the caption table as a trainable leaf (the 2026-09-05 rerun; +99,840 params)",
    )
    args = parser.parse_args(argv)

    from dew.models import registry

    if not args.published.is_file():
        print(f"error: published record {args.published} does not exist", file=sys.stderr)
        return 2
    published = published_rows(args.published)
    registered = set(registry.names())
    coverable = [name for name in published if name in registered]
    wanted = args.architectures if args.architectures else coverable
    for name in wanted:
        if name not in coverable:
            print(
                f"error: no registered architecture with a published row named {name!r};"
                f" valid: {', '.join(coverable)}",
                file=sys.stderr,
            )
            return 2

    rows = []
    for name in wanted:
        try:
            ours = measure(name, published[name]["batch"], args.condition_in_state)
        except Exception as error:  # a failing architecture is a row, not the end of the table
            traceback.print_exc(file=sys.stderr)
            ours = {"error": f"failed: {type(error).__name__}: {error}".splitlines()[0]}
        gc.collect()
        rows.append(
            {
                "architecture": name,
                "ours": ours,
                "published": published[name],
                "ok": "error" not in ours and row_ok(ours, published[name]),
            }
        )
        print(f"measured {name}", file=sys.stderr, flush=True)
    print(format_table(rows))
    missing = [name for name in published if name not in registered]
    if missing and not args.architectures:
        print(f"not registered yet (no row): {', '.join(missing)}")
    if args.json_out:
        write_json(args.json_out, rows)
    return 0 if all(row["ok"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
