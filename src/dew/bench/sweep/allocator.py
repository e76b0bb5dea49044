"""Which malloc the cases' processes use: tcmalloc where installed, on CPU, by default.

XLA's CPU compiler allocates and frees small objects by the million (HLO graphs, MLIR
contexts, LLVM modules), and glibc's malloc is slow at it (a native profile of one
compile: much of its time in free()). Alternating sweeps of cpu-smoke on 2 cores, 4 with
tcmalloc, 3 without: cold median 9% shorter, the ratio's interval [0.83, 1.02] not yet
clear of the host's noise (docs/performance.md, "The allocator"). A case's
process gets it through LD_PRELOAD, set in this process before the children start, so the
record's environment flags name it and compare lists a differing allocator as a stack
difference. GPU runs keep the system's by default: the published tables were measured so.

    --allocator auto      tcmalloc on CPU where installed, the system's malloc otherwise
    --allocator tcmalloc  tcmalloc, or one line and exit 2 where it is not installed
    --allocator system    no preload
"""

from __future__ import annotations

import sysconfig
from collections.abc import MutableMapping
from pathlib import Path

from dew import platforms

# The Debian/Ubuntu packages' sonames: libtcmalloc-minimal4, then libgoogle-perftools4.
TCMALLOC_NAMES = ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4")
PACKAGES = "libtcmalloc-minimal4, or libtcmalloc-minimal4t64 on newer releases"


def library_dirs() -> list[Path]:
    multiarch = sysconfig.get_config_var("MULTIARCH") or ""
    dirs = [f"/usr/lib/{multiarch}", f"/lib/{multiarch}"] if multiarch else []
    return [Path(d) for d in (*dirs, "/usr/lib64", "/usr/lib", "/usr/local/lib")]


def find_tcmalloc() -> Path | None:
    """The first tcmalloc shared library in the system's library directories."""
    for directory in library_dirs():
        for name in TCMALLOC_NAMES:
            if (directory / name).is_file():
                return directory / name
    return None


def resolve(choice: str, platform: str) -> Path | None:
    """The library the cases' processes preload, or None for the system's malloc
    (ValueError, one line, for --allocator tcmalloc where none is installed)."""
    if choice == "system" or (choice == "auto" and not platforms.get(platform).tcmalloc):
        return None
    library = find_tcmalloc()
    if library is None and choice == "tcmalloc":
        dirs = ", ".join(str(d) for d in library_dirs())
        raise ValueError(
            f"--allocator tcmalloc: no {' or '.join(TCMALLOC_NAMES)} in {dirs}; "
            f"install it (Debian and Ubuntu: {PACKAGES}) or use --allocator system"
        )
    return library


def preload(environ: MutableMapping[str, str], library: Path) -> None:
    """Put `library` first in environ["LD_PRELOAD"] (once)."""
    present = environ.get("LD_PRELOAD", "").split()
    if str(library) not in present:
        environ["LD_PRELOAD"] = " ".join([str(library), *present])
