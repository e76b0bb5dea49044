"""The loader benchmark's kind ("data"): a row per loader configuration (DataRow), judged
on its samples/s (a rate: as ms per batch for the statistics). Two rows are one model
when batch and image size agree; the site holds its rows against the step records
(the keep-up verdict)."""

from __future__ import annotations

from typing import ClassVar

from dew.bench.analysis import repeats, tables
from dew.bench.analysis.kinds import Kind, register
from dew.bench.record.schema import BenchmarkRun, DataRepeat, DataRow


class LoaderKind(Kind):
    name: ClassVar[str] = "data"
    row_model: ClassVar[type[DataRow]] = DataRow
    timings: ClassVar[tuple[str, ...]] = ("samples_per_s",)
    ratio_fields: ClassVar[tuple[str, ...]] = (
        "samples_per_s", "p50_ms", "p95_ms", "first_batch_s",
    )  # fmt: skip
    rates: ClassVar[frozenset[str]] = frozenset({"samples_per_s"})
    feeds_steps: ClassVar[bool] = True
    settings_in_rows: ClassVar[bool] = True

    def figures(self, row: DataRow, timing: str) -> list[float]:
        """ms per batch of each repeat (the row's own samples/s without repeats)."""
        figures = [1e3 * row.batch / r.samples_per_s for r in row.repeats or [] if r.samples_per_s]
        if not figures and row.samples_per_s:
            figures = [1e3 * row.batch / row.samples_per_s]
        return figures

    def summarize(
        self, row: DataRow, repeats_: list[DataRepeat], first: DataRow | None = None
    ) -> DataRow:
        return repeats.summarize_data(row, repeats_)

    def table(self, record: BenchmarkRun, fmt: str = "tsv") -> str:
        return tables.data_table(record.rows, fmt)

    def page_table(self, record: BenchmarkRun) -> tuple[list[str], list[list[str]]]:
        """The table with each row's label first (the loader table's first cell is the
        dataset alone)."""
        headers, rows = super().page_table(record)
        rows = [[r.label(), *cells[1:]] for r, cells in zip(record.rows, rows, strict=True)]
        return ["row", *headers[1:]], rows

    def model_difference(self, run: DataRow, ref: DataRow) -> tuple[str | None, list[str]]:
        if run.batch != ref.batch or run.image_size != ref.image_size:
            return "batch or image size differs", []
        # Another worker or thread count is another loader, not the same one measured again
        # (8 workers against 0 read as a 596% change): never judged as a reproduction
        settings = ("workers", "threads", "steps", "warmup")
        differ = [f"{name} {getattr(run, name)} v {getattr(ref, name)}" for name in settings
                  if getattr(run, name) != getattr(ref, name)]  # fmt: skip
        if differ:
            return f"loader settings differ ({', '.join(differ)})", []
        return None, []


LOADER = register(LoaderKind())
