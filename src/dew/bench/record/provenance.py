"""Where each recorded package came from: the venv the run's Python is (built from a lock),
a dew bundle installed beside a host's own packages (its install script leaves a manifest,
BUNDLE_MANIFEST, in the folder it installed into), or the host itself.

Standard library only (the record's side of dew.host.bundle_install, which writes the
manifest and imports nothing of dew).
"""

from __future__ import annotations

import importlib.metadata
import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from dew.bench.record.stack import distribution_name

BUNDLE_MANIFEST = "dew-bundle.json"


def _bundle(folder: Path, manifests: dict[Path, dict]) -> dict:
    """The bundle manifest in `folder` ({} when none or unreadable), read once."""
    if folder not in manifests:
        try:
            manifests[folder] = json.loads((folder / BUNDLE_MANIFEST).read_text())
        except (OSError, ValueError):
            manifests[folder] = {}
    return manifests[folder]


def package_sources(
    names: Iterable[str], path: Sequence[str] | None = None, prefix: str | None = None
) -> dict[str, dict]:
    """name -> {source, location, lock} for each of `names` installed on `path` (default
    sys.path; the first of a name wins, as imports do). `prefix` is the venv the Python
    runs in (default sys.prefix when that is a venv, else none)."""
    if prefix is None and sys.prefix != sys.base_prefix:
        prefix = sys.prefix
    names = list(names)
    wanted, sources, manifests = set(names), {}, {}
    for entry in filter(None, path if path is not None else sys.path):
        folder = Path(entry).resolve()
        for dist in importlib.metadata.distributions(path=[entry]):
            name = distribution_name(dist.metadata["Name"] or "")
            if name not in wanted or name in sources:
                continue
            bundle = _bundle(folder, manifests)
            if name in (bundle.get("installed") or {}):
                lock = f"{bundle.get('lock')} sha256:{str(bundle.get('lock_sha256'))[:16]}"
                sources[name] = {"source": "bundle", "location": str(folder), "lock": lock}
            elif prefix and folder.is_relative_to(Path(prefix).resolve()):
                sources[name] = {"source": "environment", "location": str(folder)}
            else:
                sources[name] = {"source": "host", "location": str(folder)}
    return {name: sources[name] for name in names if name in sources}
