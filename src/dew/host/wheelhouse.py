"""The wheelhouse: every wheel of a lock for the image's Python, downloaded by the host's pip
(the build needs no network or TLS) and cached per lock hash.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from dew.host.engine import CACHE, ROOT, EngineError, sha256_file


def wheelhouse(variant: str, python: str, log=print, tree: Path = ROOT) -> Path:
    """Every wheel of `locks/<variant>.txt` (of `tree`) for CPython `python` on manylinux
    x86_64, hash checked, downloaded by the host's pip (the container needs no network or
    TLS) and cached under ~/.cache/dew keyed by the lock's hash."""
    lock = tree / "locks" / f"{variant}.txt"
    target = CACHE / "wheelhouse" / f"{variant}-py{python}-{sha256_file(lock)[:16]}"
    if (target / ".complete").exists():
        return target
    target.mkdir(parents=True, exist_ok=True)
    tag = python.replace(".", "")
    # pip takes one --platform per manylinux level; wheels tagged for an older glibc are fine.
    platforms = [f"manylinux_2_{minor}_x86_64" for minor in range(39, 4, -1)]
    platforms += ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
    log(f"downloading the {variant} wheelhouse for Python {python} into {target}")
    started = time.monotonic()
    argv = [
        sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--require-hashes",
        "--only-binary=:all:", "--implementation", "cp", "--python-version", python,
        "--abi", f"cp{tag}", *(arg for p in platforms for arg in ("--platform", p)),
        "--dest", str(target), "-r", str(lock),
    ]  # fmt: skip
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        errors = [line for line in result.stderr.splitlines() if line.startswith("ERROR")]
        raise EngineError(
            f"pip download of locks/{variant}.txt for Python {python} failed: "
            + (errors[-1] if errors else result.stderr.strip()[-300:])
        )
    (target / ".complete").write_text(f"{time.monotonic() - started:.1f} s\n")
    size = sum(p.stat().st_size for p in target.glob("*.whl"))
    log(f"wheelhouse: {len(list(target.glob('*.whl')))} wheels, {size / 2**20:.0f} MiB")
    return target
