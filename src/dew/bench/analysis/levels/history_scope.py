"""Which records a comparison's noise is fitted from, and what the fit leaves out and why.

The history is the committed records: in a git checkout, the record files under results/
that git tracks (`git ls-files results`), so that a record that merely appears under
results/runs (a user's new run, git-ignored) never moves a verdict unasked. Outside a
checkout (dew from a wheel or a bundle), results/noise.json when it is there, else every
record under results/. `--history DIR` names the history instead: every record under DIR.

Whatever the history, the fit leaves out:
- the records compared, and the records that are copies of them (every figure one of them
  holds: an A/B side's rounds, a byte copy): a measurement is never its own noise;
- the records results/superseded.json lists (each for a cause a commit removed), unless
  the user names them (`compare --with-superseded`: the noise of their time).

`LeftOut.words` says all of it in the comparison's noise line (dew.bench.analysis.levels.noise).
"""

from __future__ import annotations

import dataclasses
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path

from dew.bench.analysis.levels import fit, history_records
from dew.bench.analysis.levels.history_records import resolved
from dew.bench.common import cli
from dew.bench.record.schema.documents import Superseded


def read_superseded(path: Path) -> Superseded:
    """results/superseded.json through its model (the one `dew validate` checks); an empty
    one when there is no file; UsageError (one line) when it is no valid one."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return Superseded(reasons={}, records={})
    except OSError as error:
        raise cli.UsageError(f"{path}: cannot be read ({error.strerror})") from None
    try:
        return Superseded.model_validate_json(text)  # a ValueError when it is not one
    except ValueError:
        raise cli.UsageError(
            f"{path} is not a list of superseded records: check it with `dew validate {path}`"
        ) from None


def committed(results: Path) -> list[Path] | None:
    """The JSON files under `results` that git tracks; None where git cannot say (no git, or
    no checkout around `results`): the caller then has no committed records to tell."""
    if not results.is_dir():
        return []
    try:
        done = subprocess.run(["git", "-C", str(results), "ls-files", "-z", "--", "."],
                              capture_output=True, timeout=60, check=False)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    names = done.stdout.decode("utf-8", "surrogateescape").split("\0")
    return [results / name for name in names if name.endswith(".json")]


def split_committed(results: Path) -> tuple[list[Path] | None, list, list]:
    """The records under `results`, parsed, as (the files git tracks or None where it
    cannot say, the committed records, the others): outside a checkout every record counts
    as committed."""
    tracked = committed(results)
    parsed = history_records.parse(history_records.walk(results))
    if tracked is None:
        return None, parsed, []
    mine = {resolved(p) for p in tracked}
    root = history_records.RESULTS_ROOT
    inside, outside = [], []
    for found in parsed:
        (inside if resolved(root / found[0]) in mine else outside).append(found)
    return tracked, inside, outside


@dataclasses.dataclass(frozen=True)
class LeftOut:
    """What a comparison's history left out of the fit, and what it did not read."""

    history: str  # where the records came from, in words
    compared: tuple[str, ...]  # the records compared, as given
    copies: int  # records of the history whose every figure one compared holds
    superseded: Superseded  # results/superseded.json
    listed: dict[str, dict[str, int]]  # device kind -> reason -> its records in the history
    with_superseded: bool  # the user named them: kept in the fit
    compared_superseded: tuple[tuple[str, str], ...]  # (a compared record, its reason)
    uncommitted: tuple[str, ...]  # records under results/ git does not track, not read

    def words(self, kind: str | None, fitted: bool = True) -> str:
        """The noise line's account: where the fit came from (`fitted`: a fit of the kind's
        history, else its prior), what left it and why."""
        n = len(self.compared)
        left = [f"the {'two' if n == 2 else n} records compared" if n != 1 else
                "the record compared"]  # fmt: skip
        if self.copies:
            left[0] += (f" and {self.copies} cop{'y' if self.copies == 1 else 'ies'} of "
                        f"{'it' if n == 1 else 'them'} (records whose every figure "
                        f"{'it holds' if n == 1 else 'one of them holds'})")  # fmt: skip
        listed = self.listed.get(kind or "", {})
        count = sum(listed.values())
        reasons = ", ".join(f"{name}: its cause removed by "
                            f"{self.superseded.reasons[name].removed_by}"
                            for name in sorted(listed))  # fmt: skip
        records = f"{count} superseded record{'s' * (count != 1)} ({reasons})"
        if count and not self.with_superseded:
            left.append(f"{records}, listed in results/superseded.json")
        out = [f"{'fitted from' if fitted else 'history:'} {self.history}",
               f"left out: {' and '.join(left)}"]  # fmt: skip
        if count and self.with_superseded:
            out.append(f"with {records}, as --with-superseded asks: the noise of their time")
        if not self.with_superseded:
            for path, name in self.compared_superseded:
                out.append(f"{path} is superseded ({name}: its cause removed by "
                           f"{self.superseded.reasons[name].removed_by}) and judged at the "
                           "noise of the records made since; --with-superseded judges it at "
                           "the noise of its time")  # fmt: skip
        return "; ".join([*out, self.unread()] if self.uncommitted else out)

    def unread(self) -> str:
        """What was not read: the uncommitted records under results/, with how to read them."""
        n = len(self.uncommitted)
        if not n:
            return ""
        under = "results/runs" if all(p.startswith("results/runs/")
                                      for p in self.uncommitted) else "results"  # fmt: skip
        return (
            f"not read: {n} uncommitted record{'s' * (n != 1)} under results/ "
            f"(--history {under} reads {'them' if n != 1 else 'it'})"
        )


class Kinds(dict):
    """The fitted kinds (history.fit's table), with what their history left out."""

    left_out: LeftOut | None = None


def kinds_table(history_dir: Path | None = None, exclude: Iterable[Path] = (), *,
                with_superseded: bool = False, cache: bool = True) -> Kinds:  # fmt: skip
    """The fitted kinds a comparison of `exclude` assumes (see the module docstring): of
    `history_dir` when given, else of the committed records (outside a checkout the
    `cache`, results/noise.json, where it holds none of them), less the records compared
    and their copies and, unless `with_superseded`, the superseded ones."""
    exclude = [Path(p) for p in exclude]
    root = history_records.RESULTS_ROOT  # the records' paths are named from it
    listed = read_superseded(fit.SUPERSEDED)
    gone = {} if with_superseded else listed.records
    if history_dir is None:
        tracked, parsed, others = split_committed(fit.HISTORY)
    else:
        tracked, others = None, []
        parsed = history_records.parse(history_records.walk(Path(history_dir)))
    uncommitted = [p for p, _ in history_records.leave_out(others, exclude)[0]]
    records, copies = history_records.leave_out(parsed, exclude)
    compared = {resolved(p) for p in exclude}
    left = LeftOut(
        history=(f"the records under {history_dir}" if history_dir is not None
                 else "the committed records under results/" if tracked is not None
                 else "the records under results/"),
        compared=tuple(str(p) for p in exclude), copies=len(copies), superseded=listed,
        listed=_listed(records, listed), with_superseded=with_superseded,
        compared_superseded=tuple((str(p), name) for p in exclude
                                  for path, name in listed.records.items()
                                  if resolved(root / path) == resolved(p)),
        uncommitted=tuple(uncommitted),
    )  # fmt: skip
    if cache and history_dir is None and tracked is None and not with_superseded:
        cached = fit.read_table()
        held = [*compared, *(resolved(root / p) for p in copies)]
        if cached is not None and "kinds" in cached and not _holds(cached["kinds"], held, root):
            table = Kinds(cached["kinds"])
            table.left_out = dataclasses.replace(left, history="results/noise.json")
            return table
    table = Kinds(fit.fit(records, gone))
    table.left_out = left
    return table


def _listed(records: Sequence[tuple[str, dict]], listed: Superseded) -> dict:
    """Device kind -> reason -> how many of `records` results/superseded.json lists."""
    out: dict[str, dict[str, int]] = {}
    for path, record in records:
        name = listed.records.get(path)
        if name is not None:
            reasons = out.setdefault(fit.device_kind(record) or "unknown", {})
            reasons[name] = reasons.get(name, 0) + 1
    return out


def _holds(kinds: dict, paths: Sequence[Path], root: Path) -> bool:
    """Whether a fitted table's groups hold any of `paths` (by the file, however named)."""
    mine = {resolved(p) for p in paths}
    return any(resolved(root / member) in mine for entry in kinds.values()
               for group in entry.get("groups", ()) for member in group)  # fmt: skip
