"""The first GPU run's A/A stage: several records of the same three fast rows on the same
stack, so the history fit (dew.bench.analysis.levels.history) learns this device kind's run and
process levels instead of borrowing another kind's.

Standard library only (scripts/first_gpu_run.py imports it before dew's dependencies are
there).

Each record is one run of the step tool over NOISE_ARCHITECTURES with --repeats 2 (two
fresh processes a case, interleaved round-robin across the cases by the tool itself), the
order of the cases reversed every other record, and JAX's compilation cache shared by the
records (the first record compiles, the others load: the stage's seconds go to timing, not
compiling). Records are made while the stage's share of the budget lasts, at least two
when there is time for them, each under a timeout from what is left. What they measure is
a lower bound on the run level: every record falls inside one lease of one machine, within
minutes, while a user's two runs can be days and machines apart.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

# Three fast rows of different families: a plain DiT, a hybrid DiT and a JEPA encoder;
# each steps in about 10 ms on the RTX 4080 and compiles in 20-30 s on the H200 host
# (unet took 44 s there: too long for the stage's share).
NOISE_ARCHITECTURES = ("simple_dit", "hybrid_dit", "jepa_encoder")
NOISE_REPEATS = 2
RECORD_MIN_S = 45.0  # a record is not started with less left than this
NOISE_SHARE_S = 230.0  # the stage's share: a first record compiles (~150 s on the H200)
NOISE_MAX_RECORDS = 6  # beyond this a lease is better spent on other rows


def noise_argv(preset: str, out: Path, index: int, steps: int | None) -> list[str]:
    """The step tool's arguments for the index-th A/A record (from 1); the tool's own
    --steps unless given (the H200's first A/A records, at 50 steps, read a 15% process
    level: a 150 ms window is too short to time a 3 ms step)."""
    names = list(NOISE_ARCHITECTURES)
    if index % 2 == 0:  # every other record in the other order: no case always goes first
        names.reverse()
    argv = ["tools/benchmark_step.py", "--preset", preset, "--format", "md"]
    argv += ["--architectures", *names, "--repeats", str(NOISE_REPEATS)]
    argv += ["--steps", str(steps)] if steps else []
    argv += ["--compilation-cache-dir", str(out / "xla")]
    argv += ["--idle-check", "warn", "--gpu-check", "warn"]
    argv += ["--json-out", str(out / f"aa-{index}.json")]
    return argv


def run_noise(
    preset: str,
    out: Path,
    left: Callable[[], float],
    run_tool: Callable[..., int],
    steps: int | None = None,
    most: int = NOISE_MAX_RECORDS,
) -> tuple[str, bool]:
    """Make up to `most` A/A records while `left()` (the stage's seconds) allows;
    `run_tool(name, argv, timeout=..., table=...)` runs one. The stage's line, and whether
    it failed: no record finished (a record cut by the stage's share keeps its rows, and is
    no failure when one before it finished)."""
    made, failed = [], []
    index = 1
    while index <= most and left() >= RECORD_MIN_S:
        name = f"aa-{index}"
        code = run_tool(
            name, noise_argv(preset, out, index, steps), timeout=left(), table=f"{name}.md"
        )
        (made if code == 0 else failed).append(f"{name} ({'ok' if code == 0 else code})")
        if code not in (0, 1):  # cut or broken: another record would fare no better
            break
        index += 1
    rows = ", ".join(NOISE_ARCHITECTURES)
    if not made and not failed:
        return "skipped: no time left for an A/A record", True
    line = f"{len(made) + len(failed)} A/A records of {rows} x {NOISE_REPEATS} repeats: "
    line += ", ".join(made + failed)
    return line, not made
