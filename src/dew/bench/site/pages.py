"""What each page shows: the index, one page per architecture, one per record.

Functions here turn records and series into plain values for the templates
(templates/*.html.j2); the tables of a record are dew.bench.analysis.tables's, cell for cell.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from dew.bench.analysis import tables as report
from dew.bench.analysis.kinds import KINDS
from dew.bench.analysis.plots import history_svg
from dew.bench.loader.data_command import keep_up_verdicts
from dew.bench.record.schema import DataRow, StepRow
from dew.bench.record.stack import same_device
from dew.bench.site.records import Entry
from dew.bench.site.row_history import Series, repeat_interval

MISSING = report.MISSING
# The step tool's flags that change the compiled step (the rest say how it was run).
STEP_OPTIONS = ("xla_flags", "attention_impl")
VERDICT = re.compile(r"(keeps up|starves the model) \((\d+(?:\.\d+)?)x\)")


def slugify(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "row"


def arch_href(label: str, root: str = "") -> str:
    return f"{root}arch/{slugify(label)}.html"


def run_href(entry: Entry, root: str = "") -> str:
    return f"{root}runs/{entry.slug}.html"


def interval_text(interval, repeats=None) -> str:
    """The interval and its repeats; "—" from fewer than two (history.repeat_interval)."""
    interval = repeat_interval(interval, repeats)
    if not interval:
        return MISSING
    return f"{report.num(interval[0], 2)} – {report.num(interval[1], 2)} ({len(repeats)})"


def stack_text(entry: Entry) -> str:
    """The stack a row ran on, in one phrase: jax, dtype, driver, image and what changes
    the compiled step (XLA_FLAGS less the simulated device count, which the device column
    shows; --xla-flags, --attention-impl); what separates the index's rows of one device."""
    record = entry.record
    env = record.environment
    packages = env.packages or {}
    parts = [f"jax {packages['jax']}" if packages.get("jax") else "jax not recorded"]
    if record.settings.dtype:
        parts.append(record.settings.dtype)
    if env.driver_version:
        parts.append(f"driver {env.driver_version}")
    if env.container and env.container.variant:
        parts.append(f"image {env.container.variant}")
    xla = [
        flag
        for flag in (env.env_flags or {}).get("XLA_FLAGS", "").split()
        if not flag.startswith("--xla_force_host_platform_device_count")
    ]
    if xla:
        parts.append("XLA_FLAGS " + " ".join(xla))
    options = record.settings.options or {}
    parts += [
        f"--{name.replace('_', '-')} {options[name]}"
        for name in STEP_OPTIONS
        if options.get(name) is not None
    ]
    return " · ".join(parts)


# --- the index ----------------------------------------------------------------------------


def latest_rows(series_list: list[Series], entries: list[Entry]) -> list[dict]:
    """One row per series and stack: its newest point, the published row of the same case
    beside it, the keep-up verdict of the newest loader record that can judge it."""
    published = _published_rows(entries)
    data_entries = [e for e in entries if _feeds_steps(e)]
    rows = []
    for series in series_list:
        newest: dict[str, int] = {}
        for index, point in enumerate(series.points):
            newest[stack_text(point.entry)] = index  # points are oldest first
        for stack, index in sorted(newest.items(), key=lambda kv: -kv[1]):
            point = series.points[index]
            change = series.changes[-1] if series.changes else None
            pub = published_beside(point.entry, point.row, published)
            rows.append(
                {
                    "label": series.label,
                    "arch_href": arch_href(series.label),
                    "device": series.device,
                    "preset": series.preset or MISSING,
                    "batch": report.count(series.batch),
                    "stack": stack,
                    "day": point.entry.day,
                    "run_href": run_href(point.entry),
                    "ms": report.num(point.value, 2),
                    "sort": f"{point.value:.6f}",
                    "interval": interval_text(point.interval, point.row.repeats),
                    "util": report.percent(point.row.util),
                    "peak": report.num(point.row.peak_gib, 2),
                    "count": len(series.points),
                    "change": _change_text(series, change) if change else None,
                    "pending": series.pending,
                    "published": _published_text(pub) if pub else "no published row",
                    "published_href": run_href(pub[0]) if pub else None,
                    "keep_up": keep_up(point.entry, point.row, data_entries),
                }
            )
    return rows


def _change_text(series: Series, change) -> str:
    day = series.points[change.index].entry.day
    return f"{change.percent} at {day}"


def _published_rows(entries: list[Entry]) -> list[tuple[Entry, StepRow]]:
    """Every published timed step row, newest record first."""
    found = [
        (entry, row)
        for entry in entries  # oldest first
        if entry.published and _charted(entry)
        for row in entry.record.rows
        if row.status == "ok" and (row.ms_per_step or row.p50_ms)
    ]
    return found[::-1]


def _charted(entry: Entry) -> bool:
    """A record of a kind whose timed rows are the architectures' series (the step's)."""
    return KINDS[entry.record.kind].charted


def _feeds_steps(entry: Entry) -> bool:
    """A record of a kind whose rows feed a step (the loader's): its keep-up verdicts."""
    return KINDS[entry.record.kind].feeds_steps


def published_beside(
    entry: Entry, row: StepRow, published: list[tuple[Entry, StepRow]]
) -> tuple[Entry, StepRow] | None:
    """The newest published row to show beside `row`: the same case and batch (key()), on
    the same device kind, in the same preset; None when there is none (another device's or
    preset's figure is no reference for this one)."""
    kind, preset = _device_kind(entry), entry.record.settings.preset
    for pub_entry, pub_row in published:
        other = _device_kind(pub_entry)
        same_kind = kind is not None and other is not None and same_device(kind, other)
        if pub_row.key() == row.key() and same_kind and pub_entry.record.settings.preset == preset:
            return pub_entry, pub_row
    return None


def _device_kind(entry: Entry) -> str | None:
    devices = entry.record.environment.devices
    return devices.kind if devices and devices.kind else None


def _published_text(pub: tuple[Entry, StepRow]) -> str:
    entry, row = pub
    value = row.ms_per_step if row.ms_per_step is not None else row.p50_ms
    batch = row.key()[1]
    return f"{report.num(value, 2)} ms, batch {batch}, {entry.device}, {entry.day}"


def keep_up(step_entry: Entry, row: StepRow, data_entries: list[Entry]) -> str:
    """The newest loader record's verdict on this row (its fastest configuration at the
    row's image size), or why there is none."""
    for data in reversed(data_entries):
        step_rows = step_entry.record.rows  # a charted record's: the step's rows
        best = None
        for loader_row in data.record.rows:
            if loader_row.status != "ok" or not loader_row.samples_per_s:
                continue
            lines = keep_up_verdicts(loader_row, step_entry.record)
            line = next((ln for r, ln in zip(step_rows, lines, strict=False) if r is row), "")
            found = VERDICT.search(line)
            if found and (best is None or float(found.group(2)) > best[0]):
                best = (float(found.group(2)), found.group(1), loader_row)
        if best:
            ratio, verdict, loader_row = best
            return f"{verdict} ({ratio:.2f}x, {loader_row.label()})"
    return MISSING if data_entries else "no loader record"


def untimed_rows(entries: list[Entry], timed_labels: set[str]) -> list[list[str]]:
    """Rows of step records for architectures with no timed row anywhere."""
    rows = []
    for entry in entries:
        if not _charted(entry):
            continue
        for row in entry.record.rows:
            if row.label() in timed_labels:
                continue
            status = row.status if row.status == "ok" else f"failed: {row.error}"
            rows.append(
                [row.label(), _Link(run_href(entry), entry.slug), report.count(row.params),
                 report.num(row.gflop_per_step, 3), status]
            )  # fmt: skip
    return rows


def loader_rows(entries: list[Entry]) -> list[dict]:
    newest: dict[tuple, tuple[Entry, DataRow]] = {}
    for entry in entries:
        if _feeds_steps(entry):
            for row in entry.record.rows:
                newest[(row.key(), entry.device)] = (entry, row)
    out = []
    for entry, row in sorted(newest.values(), key=lambda er: er[1].label()):
        out.append(
            {
                "label": row.label(),
                "batch": report.count(row.batch),
                "size": report.count(row.image_size),
                "rate": report.num(row.samples_per_s) if row.status == "ok" else "failed",
                "interval": interval_text(row.samples_per_s_ci95, row.repeats),
                "percentiles": f"{report.num(row.p50_ms, 2)} / {report.num(row.p95_ms, 1)}",
                "day": entry.day,
                "run_href": run_href(entry),
            }
        )
    return out


def record_rows(entries: list[Entry]) -> list[list]:
    out = []
    for entry in reversed(entries):
        record = entry.record
        failed = sum(row.status == "failed" for row in record.rows)
        name = ("published: " if entry.published else "") + str(entry.path)
        preset = record.settings.preset or MISSING
        if record.settings.compile_only:
            preset += " (compile only)"
        if record.partial:  # a run cut short is never listed as a whole one
            name += f" (PARTIAL: {record.partial})"
        out.append(
            [entry.day, _Link(run_href(entry), name), record.kind, preset, entry.device,
             entry.commit, len(record.rows), failed]
        )  # fmt: skip
    return out


class _Link(str):
    """A table cell that is a link: rendered by markupsafe as HTML, escaped parts."""

    def __new__(cls, href: str, text: str):
        from markupsafe import escape

        return super().__new__(cls, f'<a href="{escape(href)}">{escape(text)}</a>')

    def __html__(self) -> str:
        return str(self)


# --- an architecture's page ---------------------------------------------------------------


def architecture_page(label: str, series_list: list[Series], entries: list[Entry]) -> dict:
    sections = []
    for number, series in enumerate(series_list):
        changes, points = [], []
        for index, point in enumerate(series.points):
            change = series.change_at(index)
            if change:
                changes.append(
                    {
                        "text": f"{change.percent} ({report.num(change.before, 2)} → "
                        f"{report.num(change.after, 2)} ms/step, segment medians)",
                        "day": point.entry.day,
                        "href": run_href(point.entry, "../"),
                        "diffs": point.diffs,
                        "unknown": point.unknown,
                    }
                )
            points.append(
                {
                    "day": point.entry.day,
                    "href": run_href(point.entry, "../"),
                    "name": point.entry.slug,
                    "commit": point.entry.commit,
                    "ms": report.num(point.value, 2),
                    "interval": interval_text(point.interval, point.row.repeats),
                    "util": report.percent(point.row.util),
                    "peak": report.num(point.row.peak_gib, 2),
                    "warnings": point.row.warnings,
                    "flag": f"change {change.percent}" if change else "",
                    "published": point.entry.published,
                    "diffs": point.diffs,
                    "unknown": point.unknown,
                }
            )
        noise = f", noise σ {series.noise * 100:.1f}% between runs" if series.noise else ""
        sections.append(
            {
                "title": series.title,
                "anchor": f"series-{number}",
                "changes": changes,
                "points": points,
                "count": len(points),
                "noise": noise,
                "pending": series.pending,
            }
        )
    published = [
        {"href": run_href(e, "../"), "text": f"{_published_text((e, r))}"}
        for e in entries
        if e.published and _charted(e)
        for r in e.record.rows
        if r.label() == label and r.status == "ok" and (r.ms_per_step or r.p50_ms)
    ]
    untimed = [
        [_Link(run_href(e, "../"), e.slug), r.sample or MISSING, report.count(r.key()[1]),
         report.count(r.params), report.num(r.gflop_per_step, 3),
         r.status if r.status == "ok" else f"failed: {r.error}"]
        for e in entries
        if _charted(e)
        for r in e.record.rows
        if r.label() == label and (r.status != "ok" or not (r.ms_per_step or r.p50_ms))
    ]  # fmt: skip
    chart = history_svg(series_list) if series_list else None
    return {"label": label, "series": sections, "published": published, "untimed": untimed,
            "chart": chart}  # fmt: skip


# --- a record's page ----------------------------------------------------------------------


def run_page(entry: Entry, entries: Sequence[Entry]) -> dict:
    record = entry.record
    headers, rows = KINDS[record.kind].page_table(record)
    warnings = [f"{row.label()}: {w}" for row in record.rows for w in row.warnings]
    warnings += [f"{row.label()}: failed: {row.error}" for row in record.rows if row.error]
    if record.partial:
        warnings.insert(0, f"PARTIAL: this run did not reach its end ({record.partial})")
    idle = record.idle_check
    if idle and idle.reasons:
        warnings += [f"host not idle: {reason}" for reason in idle.reasons]
    facts = [
        ("file", str(entry.path)),
        ("kind", record.kind + (" (published)" if entry.published else "")),
        ("created", entry.day),
        ("device", entry.device),
        ("commit", entry.commit),
        ("command", record.command or MISSING),
        ("source", record.source or MISSING),
        ("schema version", record.schema_version),
    ]
    settings = record.settings.model_dump(exclude_none=True)
    facts += [(f"setting {k}", v) for k, v in settings.items()]
    keep, against = [], None
    if _feeds_steps(entry):
        against = step_record_for(entry, entries)
        if against:
            for row in record.rows:
                if row.status == "ok" and row.samples_per_s:
                    keep.append(f"{row.label()}:")
                    keep += [f"  {line}" for line in keep_up_verdicts(row, against.record)]
    return {
        "facts": facts,
        "note": record.note,
        "table_headers": headers,
        "table_rows": rows,
        "warnings": warnings,
        "environment": environment_sections(entry),
        "keep_up": keep,
        "keep_up_against": against.slug if against else None,
    }


def step_record_for(data: Entry, entries: Sequence[Entry]) -> Entry | None:
    """The step record a loader record is judged against: the one in its own directory (a
    cpu-smoke or bench-gpu run writes both there), else the newest run made before it."""
    steps = [e for e in entries if _charted(e) and not e.published]
    beside = [e for e in steps if e.path.parent == data.path.parent]
    earlier = [e for e in steps if e.when <= data.when]
    return (beside or earlier or [None])[-1]


def environment_sections(entry: Entry) -> list[tuple[str, list]]:
    env = entry.record.environment

    def fields(model) -> list:
        if model is None:
            return []
        return [(k, v) for k, v in model.model_dump().items() if v not in (None, [], {})]

    idle = entry.record.idle_check
    idle_items = fields(idle)
    return [
        ("Host", fields(env.host)),
        ("Devices", fields(env.devices)),
        ("Driver and toolkit", [
            (k, v) for k, v in (("driver", env.driver_version), ("CUDA", env.cuda_version),
                                ("cuDNN", env.cudnn_version), ("python", env.python)) if v
        ]),
        ("Packages", sorted((env.packages or {}).items())),
        ("Environment flags", sorted((env.env_flags or {}).items())),
        ("JAX config", sorted((env.jax_config or {}).items())),
        ("Container", fields(env.container)),
        ("Code", fields(env.code)),
        ("Idle check", idle_items),
    ]  # fmt: skip
