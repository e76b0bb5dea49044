"""A benchmark kind as one unit: what its records hold and how they are read.

`Kind` says everything compare (dew.bench.analysis.comparison, matching, report), the
tables and the site need of a kind of record (its `kind` field): the row model, the
timing a verdict is judged on and the ratios shown beside it, a row's timing per repeat,
how repeats make a row, the record's table, when two rows are different models, how a
leftover row finds its partner, and what the site draws of it. `KINDS` maps a record's
kind to its Kind: `KINDS[record.kind]`, never a branch on the name.

A new kind is one module and its registration:

    class EchoKind(Kind):
        name, row_model, timings, ratio_fields = "echo", EchoRow, ("ms",), ("ms",)

    register(EchoKind())

`register` also registers the row model with the schema (record.schema.register_rows),
so the kind's records validate. dew's own kinds are the modules of this package
(`step`, `loader`), imported on the first lookup of KINDS; their row models are the
schema's own (a record validates without this package). The defaults below are what a
kind with one timing field, no compiled program and no chart needs.
"""

from __future__ import annotations

import contextlib
import importlib
import pkgutil
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar, Protocol

from dew.bench.analysis import tables
from dew.bench.record.schema import BenchmarkRun, Record, register_rows, unregister_rows


class Kind(Protocol):
    """One benchmark kind. Subclass it: the methods below are the defaults."""

    name: ClassVar[str]  # the record's `kind`
    row_model: ClassVar[type[Record]]  # its rows: first field the identity, key(), label()
    # The fields a verdict is judged on, in order: the first both rows have decides.
    timings: ClassVar[tuple[str, ...]]
    # The ratios run / reference a comparison shows, the decisive timing's first.
    ratio_fields: ClassVar[tuple[str, ...]]
    rates: ClassVar[frozenset[str]] = frozenset()  # timings where higher is faster
    charted: ClassVar[bool] = False  # its timed rows are the site's series per architecture
    feeds_steps: ClassVar[bool] = False  # its rows feed a step: the site's keep-up verdicts
    interleaved: ClassVar[bool] = False  # `dew ab` runs its rows in interleaved rounds
    # Its rows carry the run's settings (the loader's workers, threads): records are A/A
    # copies (dew.bench.analysis.levels.history) only with the same rows.
    settings_in_rows: ClassVar[bool] = False

    @property
    def timing(self) -> str:
        """The field a verdict is judged on (a row without it falls back to the next)."""
        return self.timings[0]

    def column(self, field: str) -> str:
        """A field as a comparison's headers name it."""
        return tables.COLUMN_NAMES.get(field, field)

    def figures(self, row: Any, timing: str) -> list[float]:
        """The timing of each of the row's repeats (as time: lower is faster); a row
        without repeats is one process with its own figure."""
        repeats = getattr(row, "repeats", None) or []
        if repeats and all(hasattr(repeat, timing) for repeat in repeats):
            return [getattr(repeat, timing) for repeat in repeats]
        return [getattr(row, timing)]

    def summarize(self, row: Any, repeats: list, first: Any = None) -> Any:
        """The row from its repeats (medians, interval, warnings), the measuring code's one
        way to make it; `first` is the row the earlier repeats made (a resumed or repeated
        case), None for a row's first. As it is by default."""
        return row

    def table(self, record: BenchmarkRun, fmt: str = "tsv") -> str:
        """The record's table: the row's label, then every timing."""
        headers = ["row", *(self.column(field) for field in self.timings)]
        body = [
            [row.label(), *(tables.num(getattr(row, f), 2) for f in self.timings)]
            if row.status == "ok" else [row.label(), f"failed: {row.error}"]
            for row in record.rows
        ]  # fmt: skip
        return tables.table(headers, body, fmt)

    def page_table(self, record: BenchmarkRun) -> tuple[list[str], list[list[str]]]:
        """The record's table on its site page: headers and cells (the tsv table's)."""
        lines = self.table(record, "tsv").rstrip("\n").split("\n")
        return lines[0].split("\t"), [line.split("\t") for line in lines[1:]]

    def model_difference(self, run: Any, ref: Any) -> tuple[str | None, list[str]]:
        """Why two rows are different models (None: comparable), and notes; the rows of
        one key are one model by default."""
        return None, []

    def partner(self, row: Any, left_ref: list) -> tuple[Any | None, str | None]:
        """A leftover reference row for a leftover run row of another key, and why they
        pair (None: none; compare then tries the one row of the same name)."""
        return None, None

    def compiled(self, run: Any, ref: Any) -> tuple[str | None, list[str]]:
        """Whether both rows ran the same compiled program (None: not known), and notes."""
        return None, []


class Registry(Mapping[str, Kind]):
    """Kind name -> Kind; dew's own kinds (this package's modules) load on first use."""

    def __init__(self) -> None:
        self._kinds: dict[str, Kind] = {}
        self._loaded = False

    def _load(self) -> dict[str, Kind]:
        if not self._loaded:
            self._loaded = True  # before the imports: each registers itself through us
            for module in pkgutil.iter_modules(__path__):
                importlib.import_module(f"{__name__}.{module.name}")
        return self._kinds

    def __getitem__(self, name: str) -> Kind:
        kinds = self._load()
        if name not in kinds:
            known = ", ".join(sorted(kinds))
            raise KeyError(f"no benchmark kind {name!r} is registered (known: {known})")
        return kinds[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._load())

    def __len__(self) -> int:
        return len(self._load())

    def add(self, kind: Kind) -> None:
        self._kinds[kind.name] = kind

    def remove(self, name: str) -> None:
        self._kinds.pop(name, None)


KINDS = Registry()


def register(kind: Kind) -> Kind:
    """`kind` for records of `kind.name`, its row model for their rows (the schema's)."""
    register_rows(kind.name, kind.row_model)
    KINDS.add(kind)
    return kind


@contextlib.contextmanager
def registered(kind: Kind) -> Iterator[Kind]:
    """`kind` registered for the block only (a test's own kind), then forgotten."""
    register(kind)
    try:
        yield kind
    finally:
        KINDS.remove(kind.name)
        unregister_rows(kind.name)
