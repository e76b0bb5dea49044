"""The step benchmark's kind ("step"): a row per case (StepRow), judged on its ms/step.

Two rows are one model when batch, sample, GFLOP/step (within matching.GFLOP_TOLERANCE)
and params agree (params that differ only by the condition encoder's table are the same
backbone); a leftover row pairs with the reference row whose case settings it extends
(a published record predates settings a run now records); both sides' compiled programs
are compared by their fingerprints (dew.bench.analysis.programs).
"""

from __future__ import annotations

from typing import ClassVar

from dew.bench.analysis import programs, repeats, tables
from dew.bench.analysis.kinds import Kind, register
from dew.bench.analysis.matching import same_gflop
from dew.bench.record.schema import BenchmarkRun, StepRepeat, StepRow


class StepKind(Kind):
    name: ClassVar[str] = "step"
    row_model: ClassVar[type[StepRow]] = StepRow
    timings: ClassVar[tuple[str, ...]] = ("ms_per_step", "p50_ms")  # p50 where no ms/step
    ratio_fields: ClassVar[tuple[str, ...]] = (
        "ms_per_step", "p50_ms", "samples_per_s", "util", "peak_gib",
    )  # fmt: skip
    charted: ClassVar[bool] = True
    interleaved: ClassVar[bool] = True

    def figures(self, row: StepRow, timing: str) -> list[float]:
        if timing == "ms_per_step" and row.repeats:
            return [r.ms_per_step for r in row.repeats if r.ms_per_step]
        return [getattr(row, timing)]

    def summarize(
        self, row: StepRow, repeats_: list[StepRepeat], first: StepRow | None = None
    ) -> StepRow:
        return repeats.summarize_step(row, repeats_, first=first)

    def table(self, record: BenchmarkRun, fmt: str = "tsv") -> str:
        compile_only = bool(record.settings.compile_only)
        return tables.step_table(record.rows, fmt, compile_only=compile_only)

    def model_difference(self, run: StepRow, ref: StepRow) -> tuple[str | None, list[str]]:
        notes = []
        ra, rb = run.key(), ref.key()
        if ra[1] is not None and rb[1] is not None and ra[1] != rb[1]:
            return f"batch differs ({ra[1]} vs {rb[1]})", notes
        if run.sample and ref.sample and run.sample != ref.sample:
            return f"sample differs ({run.sample} vs {ref.sample})", notes
        ga, gb = run.gflop_per_step, ref.gflop_per_step
        if ga is not None and gb is not None and not same_gflop(ga, gb):
            return f"GFLOP/step differs ({ga:.4g} vs {gb:.4g})", notes
        if run.params is not None and ref.params is not None and run.params != ref.params:
            delta = run.params - ref.params
            ca, cb = run.condition_params, ref.condition_params
            if ca is not None and cb is not None and ca - cb == delta:
                # The condition encoder's table moved between constant and state: the same
                # backbone doing the same arithmetic, so the times compare.
                notes.append(
                    f"params differ by {delta:+,}, all in the condition encoder "
                    f"(condition_params {ca:,} vs {cb:,}): same backbone"
                )
            else:
                return f"params differ ({run.params:,} vs {ref.params:,})", notes
        return None, notes

    def partner(self, row: StepRow, left_ref: list) -> tuple[StepRow | None, str | None]:
        """The one reference row of the same architecture, batch, head_chunks and
        attention_impl whose case settings `row`'s extend (the one sharing most)."""
        key = row.key()
        settings = set(key[4])
        extended = [r for r in left_ref if r.key()[:4] == key[:4] and set(r.key()[4]) < settings]
        most = max((len(r.key()[4]) for r in extended), default=-1)
        closest = [r for r in extended if len(r.key()[4]) == most]
        if len(closest) != 1:
            return None, None
        extra = sorted(settings - set(closest[0].key()[4]))
        shown = ", ".join(f"{name}={value}" for name, value in extra)
        return closest[0], f"matched to {closest[0].label()}, which does not record {shown}"

    def compiled(self, run: StepRow, ref: StepRow) -> tuple[str | None, list[str]]:
        """programs.between, and the notes that say how the programs differ: the
        fingerprints when they do, and a side whose repeats compiled otherwise."""
        compiled = programs.between(run, ref)
        notes = []
        if compiled not in (None, programs.SAME):
            notes.append(
                f"compiled: {compiled} (run: {programs.describe(run)}; "
                f"reference: {programs.describe(ref)})"
            )
        for side, row in (("run", run), ("reference", ref)):
            warning = programs.repeats_warning(row.repeats or [])
            if warning:
                notes.append(f"{side}: {warning}")
        return compiled, notes


STEP = register(StepKind())
