"""A damaged entry of JAX's persistent compilation cache (dew.train.cache_damage), for real:
a cache filled by a first process, its entries truncated, emptied, filled with garbage or
with a well-compressed executable that is not one; the next process recompiles each, says
so in one line instead of JAX's warning, and JAX writes it anew, so that a third process
reads every entry from the cache without a word. Each run is a fresh process: the cache's
folder is JAX's global configuration."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

# A few programs (the jitted function and the small ones its arguments need), compiled with
# the cache at argv[1]; prints the watch's lines and how many entries were read from it.
PROGRAM = """
import json, sys
import jax, jax.numpy as jnp
from dew.train.cache_damage import watch
from dew.train.trainer import configure_compilation_cache

hits = []
jax.monitoring.register_event_listener(
    lambda event, **_: hits.append(event) if event.endswith("cache_hits") else None
)
configure_compilation_cache(sys.argv[1])
with watch() as said:
    x = jnp.arange(256.0).reshape(16, 16)
    y = jax.jit(lambda x: jnp.sin(x) @ x.T)(x).block_until_ready()
    z = jax.jit(jnp.cos)(y).block_until_ready()
print(json.dumps({"said": said, "hits": len(hits)}))
"""


def _run(cache: Path) -> tuple[dict, str]:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(cache)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1]), done.stderr


# Garbage whose first two bytes fail zlib's header check (0x6e6f is not a multiple of 31)
# every time: random bytes pass it one time in 31 and then read "unknown compression method".
GARBAGE = b"not zlib, garbage "


def _damage(entries: list[Path]) -> list[str]:
    """Each entry damaged one of four ways, in turn; returns their keys."""
    for index, entry in enumerate(entries):
        data = entry.read_bytes()
        entry.write_bytes(
            [
                data[: len(data) // 2],  # truncated: a write cut short
                b"",  # emptied
                (GARBAGE * len(data))[: len(data)],  # garbage
                zlib.compress(b"\0" * 8 + b"not an executable"),  # read, then not parsed
            ][index % 4]
        )
    return [entry.name.removesuffix("-cache") for entry in entries]


def test_a_damaged_entry_is_recompiled_said_once_and_written_anew(tmp_path):
    cache = tmp_path / "cache"
    first, _ = _run(cache)
    assert first["said"] == [] and first["hits"] == 0
    entries = sorted(cache.glob("*-cache"))
    assert len(entries) >= 4, entries  # every way of damage is met
    keys = _damage(entries)

    second, stderr = _run(cache)
    assert "Error reading persistent compilation cache" not in stderr  # said by dew, once
    said = " ".join(second["said"])
    assert second["hits"] == 0
    # One line per error: a truncated and an empty entry read alike.
    assert len(second["said"]) == 3
    assert "incomplete or truncated stream" in said and "incorrect header check" in said
    assert "JaxRuntimeError" in said  # an executable JAX could not deserialize
    for line in second["said"]:
        assert line.startswith("compilation cache entr") and "unreadable (" in line
        assert line.endswith("): recompiled, written anew"), line
    for key in keys:  # each named by its module and the head of its hash
        assert key[: key.index("-") + 13] in said
    for entry in entries:  # a valid entry again: zlib-compressed, larger than its header
        assert len(zlib.decompress(entry.read_bytes())) > 64

    third, stderr = _run(cache)
    assert third == {"said": [], "hits": len(entries)} and "Error reading" not in stderr
