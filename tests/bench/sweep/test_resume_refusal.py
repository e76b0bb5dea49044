"""--resume refuses a record made on another stack in one line that names what differs first
(dew.bench.record.stack.identity_differences): the package, version or commit, never the
whole package lists (which were cut with "..." before the package that differed). Through
the real tool: a package of the test's (a source folder with its dist-info, as an editable
install leaves it) at 0.1.0, then at 0.2.0."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from dew.bench.record.stack import identity_differences

REPO = Path(__file__).resolve().parents[3]
DIST, MODULE, NAME = "resume-mixer", "resume_mixer", "resume_mixer"

SOURCE = """
from typing import ClassVar

import jax
import jax.numpy as jnp
from flax import nnx
from pydantic import PositiveInt

from dew.config import ModelConfig
from dew.models.registry import register


class ResumeMixerConfig(ModelConfig):
    objective: ClassVar[str] = "flow"
    image_size: PositiveInt = 8
    channels: PositiveInt = 3
    width: PositiveInt = 16
    presets: ClassVar = {"cpu-smoke": {}}


@register("resume_mixer", ResumeMixerConfig)
class ResumeMixer(nnx.Module):
    def __init__(self, config, *, rngs):
        d, dtype = config.width, config.dtype
        self.embed = nnx.Linear(config.channels, d, dtype=dtype, rngs=rngs)
        self.out = nnx.Linear(d, config.channels, dtype=dtype, rngs=rngs)

    def __call__(self, x, t, text, text_mask):
        return self.out(jax.nn.gelu(self.embed(x))).astype(jnp.float32)
"""


def install(site: Path, version: str) -> None:
    """The package at `version` in `site`: its module and a dist-info naming the version
    and the entry point (what pip leaves; the old version's dist-info removed)."""
    site.mkdir(exist_ok=True)
    (site / f"{MODULE}.py").write_text(textwrap.dedent(SOURCE))
    for old in site.glob("*.dist-info"):
        for file in old.iterdir():
            file.unlink()
        old.rmdir()
    info = site / f"{MODULE}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {DIST}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[dew.architectures]\n{NAME} = {MODULE}:ResumeMixer\n")
    (info / "RECORD").write_text(f"{MODULE}.py,,\n")


def benchmark(site: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    command = [sys.executable, "tools/benchmark_step.py", "--idle-check", "off",
               "--compilation-cache-dir", "off", "--preset", "cpu-smoke", *args]  # fmt: skip
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def test_the_differences_are_named_one_by_one_not_as_whole_lists():
    packages = {f"pkg{i:02}": "1.0" for i in range(40)}  # a real record lists ~100
    code = [{"distribution": DIST, "version": "0.1.0", "module": MODULE, "commit": "a" * 40,
             "dirty": False, "source": "git"}]  # fmt: skip
    then = {"packages": {**packages, DIST: "0.1.0"}, "outside_code": code}
    here = {"packages": {**packages, DIST: "0.2.0"},
            "outside_code": [{**code[0], "version": "0.2.0", "commit": "b" * 40}]}  # fmt: skip
    assert identity_differences(then, here) == [
        f"package {DIST}: 0.1.0 -> 0.2.0",
        f"outside {DIST} commit: aaaaaaa -> bbbbbbb",
    ]
    flags = identity_differences({"env_flags": {"XLA_FLAGS": "x"}}, {"env_flags": {}})
    assert flags == ["env XLA_FLAGS: x -> unset"]
    assert identity_differences(then, then) == []


def test_resume_after_a_new_version_of_the_package_names_it_first(tmp_path):
    site, out = tmp_path / "site", tmp_path / ("r" * 60) / "run.json"  # a long path, too
    out.parent.mkdir()
    install(site, "0.1.0")
    first = benchmark(site, "--architectures", NAME, "--compile-only", "--json-out", str(out))
    assert first.returncode == 0, first.stderr[-3000:]
    install(site, "0.2.0")
    before = out.read_bytes()
    again = benchmark(
        site, "--architectures", NAME, "--compile-only", "--json-out", str(out), "--resume"
    )
    print(again.stderr)
    assert again.returncode == 2
    (line,) = again.stderr.strip().splitlines()
    assert line.startswith(
        "tools/benchmark_step.py: error: --resume: the stack differs (the record's -> this run's): "
        f"package {DIST}: 0.1.0 -> 0.2.0; write a new --json-out (the record: "
    )
    assert not line.endswith("...") and str(out) in line
    assert out.read_bytes() == before
