"""`python -m dew.bench.site [DIRS...] [--out results/site]` (`nox -s report`): every valid
record under DIRS (default: results/) rendered into a static site that opens from disk.

Pages: index.html (every architecture's latest ms/step per device and stack, the published
row beside it, the loader's keep-up verdict; the loader's latest rows; every record),
arch/<architecture>.html (ms/step over the runs with intervals, published reference
marks, the stack differences between consecutive runs, change points) and
runs/<record>.html (its table, environment and warnings). Scripts and styles are the
package's own files, copied to static/: nothing is fetched from a network.

A file under DIRS that claims to be a record and is not a valid one is skipped with one
line naming it; the other JSON dew writes (noise.json, ab-plan.json, compare.json, ...) is
listed by kind on the front page, any other JSON ignored (dew.bench.site.records); the
site is still written. The site is built beside --out and moved into place whole, so a reader
never sees half a site; an existing --out is replaced only when it is a site this command
wrote (it holds the marker file), never another directory. One build at a time writes an
--out: a second is refused while the first holds it (common.files.one_writer). A write
that fails (a full disk) leaves the old site in place, in one line.

Exit 0: written; 1: a write failed; 2: bad input (a DIR that is missing or not a
directory, no valid record at all, an --out that cannot be written or is another
directory, or one another build is writing).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import tyro

from dew.bench.analysis.kinds import KINDS
from dew.bench.common import cli
from dew.bench.common.cli import UsageError
from dew.bench.common.errors import Interrupted, WriteFailed, faults
from dew.bench.common.files import atomic_write, check_output_dir, one_writer
from dew.bench.site import pages
from dew.bench.site.records import Loaded, load_all
from dew.bench.site.row_history import build_series

PROG = "python -m dew.bench.site"
MARKER = ".dew-site"  # in every site this command writes: only such a directory is replaced
PACKAGE = Path(__file__).parent


@dataclasses.dataclass
class Args:
    """Render every results record under DIRS into a static site (index, one page per
    architecture, one per record) that opens from disk. Exit 0: written; 2: bad input."""

    dirs: Annotated[tuple[str, ...], tyro.conf.Positional, tyro.conf.arg(metavar="DIR")] = (
        "results",
    )
    """directories searched for records (*.json, recursively; what each is, from its content)"""
    out: str = "results/site"
    """the site's directory: new, empty, or a site this command wrote before"""


@dataclasses.dataclass
class Summary:
    out: Path
    pages: list[Path]  # relative to out
    records: int
    published: int
    runs: int
    architectures: int
    changes: int
    skipped: list[str]
    empty: list[Path]
    others: dict[str, list[str]] = dataclasses.field(default_factory=dict)  # not records
    seconds: float = 0.0
    dirs: list[str] = dataclasses.field(default_factory=list)


def environment():
    import jinja2

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(PACKAGE / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )


def check_out(out: Path, inputs: Sequence[Path]) -> Path:
    """--out, before any work: writable, and either new, empty or a site of ours; never a
    directory that holds the records read."""
    check_output_dir(out, flag="--out")
    resolved = out.resolve()
    for directory in inputs:
        if directory.resolve().is_relative_to(resolved):
            raise UsageError(f"--out {out} holds the records read ({directory}); write elsewhere")
    if out.is_dir() and any(out.iterdir()) and not (out / MARKER).is_file():
        raise UsageError(
            f"--out {out} is a directory this command did not write (no {MARKER} in it); "
            "give a new or empty directory"
        )
    return out


def render(loaded: Loaded, target: Path, dirs: Sequence[Path]) -> Summary:
    """Write every page of the site into `target` (a new directory)."""
    env = environment()
    entries = loaded.entries
    series = build_series(entries)
    by_label: dict[str, list] = {}
    for s in series:
        by_label.setdefault(s.label, []).append(s)
    charted = [e for e in entries if KINDS[e.record.kind].charted]  # the step's records
    labels = sorted({row.label() for e in charted for row in e.record.rows})
    published = sum(e.published for e in entries)
    summary = Summary(
        target, [], len(entries), published, len(entries) - published, len(labels),
        sum(len(s.changes) for s in series), loaded.skipped, loaded.empty, loaded.others,
    )  # fmt: skip
    base = {"summary": summary}

    def write(relative: str, template: str, **context) -> None:
        html = env.get_template(template).render(**base, **context)
        atomic_write(target / relative, html)
        summary.pages.append(Path(relative))

    for label in labels:
        context = pages.architecture_page(label, by_label.get(label, []), entries)
        write(pages.arch_href(label), "architecture.html.j2", title=label, root="../",
              page="architecture", **context)  # fmt: skip
    for entry in entries:
        context = pages.run_page(entry, entries)
        write(pages.run_href(entry), "run.html.j2", title=str(entry.path), root="../",
              page="run", **context)  # fmt: skip
    architectures = [
        {"label": label, "href": pages.arch_href(label),
         "runs": sum(len(s.points) for s in by_label.get(label, []))}
        for label in labels
    ]  # fmt: skip
    summary.dirs = [str(d) for d in dirs]
    write(
        "index.html", "index.html.j2", title="Benchmark results", root="", page="index",
        latest=pages.latest_rows(series, entries), loader=pages.loader_rows(entries),
        untimed=pages.untimed_rows(entries, set(by_label)), architectures=architectures,
        records=pages.record_rows(entries),
    )  # fmt: skip
    shutil.copytree(PACKAGE / "static", target / "static")
    atomic_write(target / MARKER, "written by python -m dew.bench.site; replaced whole\n")
    return summary


def build_site(dirs: Sequence[Path], out: Path) -> Summary:
    """Read, render beside `out`, then swap the new site into place."""
    started = time.perf_counter()
    check_out(out, dirs)
    with one_writer(out, flag="--out"):
        return _build(dirs, out, started)


def _build(dirs: Sequence[Path], out: Path, started: float) -> Summary:
    loaded = load_all(list(dirs), exclude=out)
    if not loaded.entries:
        where = ", ".join(str(d) for d in dirs)
        found = f" ({len(loaded.skipped)} invalid files skipped)" if loaded.skipped else ""
        raise NoRecords(f"no valid record under {where}{found}; nothing to show", loaded)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.new-", dir=out.parent))
    try:
        summary = render(loaded, staging, dirs)
        os.chmod(staging, 0o755)
        _swap(staging, out)
    except OSError as error:  # a full disk: the new site goes, the old one stays
        shutil.rmtree(staging, ignore_errors=True)
        raise WriteFailed(out, _first_error(error), f"{out} is as it was") from None
    except BaseException as stop:  # an error, or a stop signal: the old site stays too
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(stop, Interrupted):
            stop.message = f"interrupted; {out} is as it was"
        raise
    summary.out, summary.seconds = out, time.perf_counter() - started
    return summary


def _first_error(error: OSError) -> OSError:
    """copytree gathers its files' errors in one shutil.Error, as text: the first one's,
    its errno read back from `[Errno 28] No space left on device: '<file>'`."""
    if isinstance(error, shutil.Error) and error.args and isinstance(error.args[0], list):
        for _source, _target, why in error.args[0]:
            found = re.match(r"\[Errno (\d+)\] ([^:]+)", str(why))
            return OSError(int(found[1]), found[2]) if found else OSError(str(why))
    return error


class NoRecords(UsageError):
    def __init__(self, message: str, loaded: Loaded):
        super().__init__(message)
        self.loaded = loaded


def _swap(staging: Path, out: Path) -> None:
    """The new site in place of the old one (ours, checked) in two renames."""
    old = None
    if out.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
        os.rmdir(old)
        os.rename(out, old)
    os.rename(staging, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    """`prog` is the command as typed, in its usage and error lines (`dew report`)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    return faults(
        prog, lambda: cli.run(prog, lambda: _main(cli.parse(Args, argv, prog=prog), prog))
    )


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def _skipped(lines: Sequence[str], prog: str) -> None:
    for line in lines:
        print(f"{prog}: skipped: {line}", file=sys.stderr)


def _main(args: Args, prog: str = PROG) -> int:
    if "" in args.dirs:  # Path("") is the current folder: never what an empty word meant
        raise cli.UsageError("DIRS holds an empty path; give folders of records")
    dirs = [Path(d) for d in args.dirs]
    try:
        summary = build_site(dirs, Path(args.out))
    except NoRecords as error:
        _skipped(error.loaded.skipped, prog)
        raise
    _skipped(summary.skipped, prog)
    for directory in summary.empty:
        print(f"{prog}: note: {directory} holds no record", file=sys.stderr)
    kinds = {
        "index": 1,
        "architecture": sum(p.parts[0] == "arch" for p in summary.pages),
        "record": sum(p.parts[0] == "runs" for p in summary.pages),
    }
    shown = ", ".join(f"{n} {k} page{'s' if n != 1 else ''}" for k, n in kinds.items())
    print(
        f"site: {summary.out / 'index.html'} ({len(summary.pages)} pages: {shown}) from "
        f"{_count(summary.records, 'record')} ({summary.published} published), "
        f"{_count(summary.changes, 'change point')} flagged, "
        f"{_count(len(summary.skipped), 'file')} skipped, "
        f"{_count(sum(map(len, summary.others.values())), 'other JSON file')} listed, "
        f"{summary.seconds:.1f} s"
    )
    return cli.EXIT_OK
