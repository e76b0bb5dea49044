"""The standard-library modules under docker/, imported as the noxfile imports them: from
the package `dew_docker` that the noxfile's `load` makes of docker/ (docker/ is no installed
package and is on no sys.path), so that every test and the sessions share one module of each.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load(module: str):
    """docker/<module>.py as `dew_docker.<module>` (the package made first, once, as the
    noxfile's `load` makes it)."""
    if "dew_docker" not in sys.modules:
        spec = importlib.machinery.ModuleSpec("dew_docker", None, is_package=True)
        spec.submodule_search_locations = [str(ROOT / "docker")]
        sys.modules["dew_docker"] = importlib.util.module_from_spec(spec)
    return importlib.import_module(f"dew_docker.{module}")
