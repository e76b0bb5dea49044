"""The standard-library modules under docker/, loaded by path as the noxfile loads them
(docker/ is not a package): one loader for every container test."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load(name: str, file: str):
    """docker/<file> as module `name` (registered in sys.modules, for dataclasses)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "docker" / file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
