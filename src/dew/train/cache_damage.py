"""A damaged entry of JAX's persistent compilation cache: recompiled, said, and replaced.

JAX (0.11) reads an entry it cannot decompress or deserialize (a truncated file, garbage,
an empty one) as a miss: it warns on stderr ("Error reading persistent compilation cache
entry for '<module>': <error>"), compiles afresh, and never replaces the damaged file (its
cache skips a key that exists), so every later run would recompile it too. While `watch`
is open:

    the warning     becomes a line for the row instead ("compilation cache entry <key>
                    unreadable (<error>): recompiled, written anew");
    the entry       is removed as soon as JAX names its key (its "PERSISTENT COMPILATION
                    CACHE MISS" log record, which follows the warning and comes before the
                    compile), so that JAX writes the fresh executable there as usual.

The key is read from that DEBUG record by a filter on JAX's compiler logger, which lets
through exactly what the logger's level let through before. Should a later JAX word either
message otherwise, the warning stays JAX's own and the entry stays damaged: never a crash.
"""

from __future__ import annotations

import contextlib
import logging
import re
import warnings
from collections.abc import Iterator
from pathlib import Path

READ_ERROR = re.compile(
    r"Error reading persistent compilation cache entry for '(?P<module>[^']*)': (?P<error>.*)",
    re.DOTALL,
)
MISS = "PERSISTENT COMPILATION CACHE MISS for '%s' with key %r"  # jax._src.compiler's format
COMPILER_LOGGER = "jax._src.compiler"
SUFFIXES = ("-cache", "-atime")  # an entry's files (jax._src.lru_cache)
ERROR_CHARS = 200
KEY_CHARS = 12  # of an entry's hash, in its line


class _Watch:
    """What one `watch` saw: the unreadable entries by module, then their keys."""

    def __init__(self, shown_level: int):
        self.shown_level = shown_level
        self.unreadable: dict[str, str] = {}  # module -> JAX's error
        self.keys: dict[str, str] = {}  # module -> cache key, its damaged entry removed

    def keep(self, message: Warning | str) -> bool:
        """Keep a damaged-entry warning (True), else let it be shown as usual (False)."""
        read = READ_ERROR.match(str(message))
        if read is None:
            return False
        self.unreadable[read["module"]] = " ".join(read["error"].split())[:ERROR_CHARS]
        return True

    @property
    def directory(self) -> Path:
        """The cache's folder now (a Trainer configures it within the watch)."""
        import jax

        return Path(jax.config.jax_compilation_cache_dir or ".").expanduser()

    def filter(self, record: logging.LogRecord) -> bool:
        """JAX's miss record of an unreadable entry: remove that entry before JAX compiles,
        so that its write is not skipped. Lets through what the logger's level did."""
        if record.msg == MISS and len(record.args or ()) == 2:
            module, key = record.args
            if module in self.unreadable and module not in self.keys:
                self.keys[module] = key
                for suffix in SUFFIXES:
                    (self.directory / f"{key}{suffix}").unlink(missing_ok=True)
        return record.levelno >= self.shown_level

    def lines(self) -> list[str]:
        """One line per error and outcome, naming its entries (module and a hash's head)."""
        grouped: dict[tuple[str, str], list[str]] = {}
        for module, error in self.unreadable.items():
            key = self.keys.get(module)
            if key is None:  # JAX did not name it: the damaged file stays
                outcome = f"recompiled; the entry stays damaged (clear {self.directory})"
            elif (self.directory / f"{key}-cache").exists():
                outcome = "recompiled, written anew"
            else:
                outcome = "recompiled, the damaged entry removed"
            name = key[: len(module) + 1 + KEY_CHARS] if key else module
            grouped.setdefault((error, outcome), []).append(name)
        return [
            f"compilation cache {'entry' if len(names) == 1 else 'entries'} "
            f"{', '.join(names)} unreadable ({error}): {outcome}"
            for (error, outcome), names in grouped.items()
        ]


@contextlib.contextmanager
def watch() -> Iterator[list[str]]:
    """Within it, a damaged entry of JAX's persistent cache (wherever it is configured,
    also within) is recompiled and replaced; the list yielded gets, on exit, a line per
    error naming its entries (none when the cache is off or nothing was damaged)."""
    said: list[str] = []
    logger = logging.getLogger(COMPILER_LOGGER)
    seen = _Watch(logger.getEffectiveLevel())
    level = logger.level
    with warnings.catch_warnings():
        warnings.filterwarnings("always", message="Error reading persistent compilation cache")
        shown = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None) -> None:
            if not seen.keep(message):
                shown(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        logger.addFilter(seen.filter)
        logger.setLevel(logging.DEBUG)  # the miss record is DEBUG: made, read, dropped
        try:
            yield said
        finally:
            logger.setLevel(level)
            logger.removeFilter(seen.filter)
            said.extend(seen.lines())
