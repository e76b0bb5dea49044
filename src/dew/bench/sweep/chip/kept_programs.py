"""A TPU case's saved program kept for later runs: the chip's own compilation cache.

JAX's persistent cache cannot be read back in a process without the chip, so a TPU run
keeps what its compile processes saved (the executable, the initial state, the batch, and
the figures the compile measured) in the run's compilation cache directory
(--compilation-cache-dir; none by default with --repeats, each run a fresh compile, as
everywhere), under a key of everything that decides the program: the case, the run's
preset, dtype, mesh, attention and XLA flags, the topology, jax's, jaxlib's and libtpu's
versions, LIBTPU_INIT_ARGS, and dew's own source as imported. A later run (or a --resume,
after a device's time ran out) loads it instead of compiling again: "load" in its phases,
compile_s the original compile's, load_s the read.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import dew
from dew.bench.record.devices import package_version
from dew.bench.sweep.presets import Case
from dew.bench.sweep.settings import Options, compilation_cache

FOLDER = "dew-tpu-programs"
FIGURES = "figures.json"
VERSIONS = ("jax", "jaxlib", "libtpu", "libtpu-nightly")


def cache_dir(options: Options) -> Path | None:
    """Where the run keeps its programs: its compilation cache's folder, or None (off)."""
    cache = compilation_cache(options)
    if cache is None:
        return None
    from dew.train.trainer import DEFAULT_CACHE, default_compilation_cache_dir

    root = default_compilation_cache_dir() if cache == DEFAULT_CACHE else Path(cache)
    return root.expanduser() / FOLDER


def key(case: Case, options: Options, topology: str) -> str:
    """What decides a case's program, as one digest."""
    decided = {
        "case": case.model_dump(mode="json"),
        "options": {name: getattr(options, name)
                    for name in ("preset", "dtype", "mesh", "attention_impl", "xla_flags")},
        "topology": topology,
        "versions": {name: package_version(name) for name in VERSIONS},
        "environment": {name: os.environ.get(name) for name in ("XLA_FLAGS", "LIBTPU_INIT_ARGS")},
        "dew": _source_digest(),
    }  # fmt: skip
    return hashlib.sha256(json.dumps(decided, sort_keys=True).encode()).hexdigest()[:32]


def find(folder: Path, digest: str) -> Path | None:
    """The kept program of `digest`, or None."""
    entry = folder / digest
    return entry if (entry / FIGURES).is_file() else None


def read(entry: Path) -> dict[str, Any]:
    return json.loads((entry / FIGURES).read_text())


def keep(folder: Path, digest: str, program: str, fields: dict[str, Any]) -> bool:
    """Copy the saved `program` folder and its compile's `fields` into the cache, whole or
    not at all (a copy renamed into place); False where it could not (a full disk)."""
    temporary = None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        temporary = Path(tempfile.mkdtemp(prefix=".keeping-", dir=folder))
        for item in Path(program).iterdir():
            shutil.copy2(item, temporary / item.name)
        (temporary / FIGURES).write_text(json.dumps(fields))
        os.rename(temporary, folder / digest)
        return True
    except OSError:  # a full disk, or another run kept the same program first
        if temporary is not None:
            shutil.rmtree(temporary, ignore_errors=True)
        return False


def _source_digest() -> str:
    """dew's Python source as this process imports it (a checkout, dirty or not, or a
    wheel): any change to it is another program's key."""
    root = Path(dew.__file__).parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()
