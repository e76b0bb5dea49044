"""A model package written by the test in a temporary folder (never the repo), built and
installed by pip as a user installs theirs (a wheel: its dist-info, entry_points.txt), then
benchmarked through tools/benchmark_step.py like dew's own architectures: its row has every
field, the record names the package, its version and (run from a git checkout) its commit,
and compare names a changed version among the stack differences. Beside it, packages that
are bad input in each way docs/own-models.md lists: one line naming the package, exit 2,
dew's own cases unaffected. The in-process registry: tests/models/test_registry_entry_points.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dew.bench.record import outside
from dew.bench.record.schema import read_run
from dew.bench.record.stack import stack_differences, stack_identity

REPO = Path(__file__).resolve().parents[3]
NAME, DIST = "tmp_mixer", "tmp-mixer"

CONFIG = """
from typing import ClassVar

import jax
import jax.numpy as jnp
from flax import nnx
from pydantic import PositiveInt

from dew.config import ModelConfig
from dew.models.registry import register


class TmpMixerConfig(ModelConfig):
    objective: ClassVar[str] = "flow"  # dew's rectified flow: images in, velocity out
    image_size: PositiveInt = 32
    channels: PositiveInt = 3
    width: PositiveInt = 64
    presets: ClassVar = {"cpu-smoke": {"image_size": 8, "width": 16}}
"""
MODEL = """
@register("tmp_mixer", TmpMixerConfig)
class TmpMixer(nnx.Module):
    def __init__(self, config, *, rngs):
        d, dtype = config.width, config.dtype
        self.embed = nnx.Linear(config.channels, d, dtype=dtype, rngs=rngs)
        self.time = nnx.Linear(1, d, dtype=dtype, rngs=rngs)
        self.out = nnx.Linear(d, config.channels, dtype=dtype, rngs=rngs)

    def __call__(self, x, t, text, text_mask):
        h = self.embed(x) + self.time(t[:, None].astype(x.dtype))[:, None, None, :]
        return self.out(jax.nn.gelu(h)).astype(jnp.float32)
"""
# Bad input, one package each (distribution, module source, entry points): a module that
# fails to import, a name two packages declare, dew's own name declared, dew's own name
# registered, an entry point at the config instead of the module, a config that is no
# ModelConfig. Their names are asked for one per run; the good package's run has them all
# installed beside it.
BAD = {
    "bad-import": ("raise ImportError('needs libfoo.so')", {"bad_import": "bad_import:Net"}),
    "twin-a": (CONFIG + MODEL.replace("tmp_mixer", "twin"), {"twin": "twin_a:TmpMixer"}),
    "twin-b": (CONFIG + MODEL.replace("tmp_mixer", "twin"), {"twin": "twin_b:TmpMixer"}),
    "claims-unet": (CONFIG + MODEL.replace("tmp_mixer", "my_unet"), {"unet": "claims_unet:X"}),
    "registers-dit": (
        CONFIG + MODEL.replace("tmp_mixer", "simple_dit"),
        {"my_dit": "registers_dit:TmpMixer"},
    ),
    "points-at-config": (
        CONFIG + MODEL.replace("tmp_mixer", "cfg_net"),
        {"cfg_net": "points_at_config:TmpMixerConfig"},
    ),
    "plain-config": (
        CONFIG.replace("(ModelConfig)", "") + MODEL.replace("tmp_mixer", "plain_net"),
        {"plain_net": "plain_config:TmpMixer"},
    ),
}
BAD_LINES = {
    # --architectures NAME (--preset): the one line, after "tools/benchmark_step.py: error: "
    ("bad_import", "cpu-smoke"): "package bad-import 0.1.0 (entry point bad_import = "
    "bad_import:Net) fails to import: ImportError: needs libfoo.so; fix the package or "
    "uninstall it",
    ("twin", "cpu-smoke"): "architecture 'twin' is declared by two packages, twin-a 0.1.0 "
    "and twin-b 0.1.0; uninstall one, or rename one's dew.architectures entry point",
    ("unet", "cpu-smoke"): "package claims-unet 0.1.0 (entry point "
    "unet = claims_unet:X) declares architecture 'unet', which is dew's own: dew never "
    "runs another model under its name; rename that entry point",
    ("my_dit", "cpu-smoke"): "package registers-dit 0.1.0 (entry point my_dit = "
    "registers_dit:TmpMixer): architecture 'simple_dit' of registers_dit.TmpMixer shadows "
    "dew's own (dew.models.dit.SimpleDiT); register it under another name",
    ("cfg_net", "cpu-smoke"): "package points-at-config 0.1.0 (entry point cfg_net = "
    "points_at_config:TmpMixerConfig): architecture 'cfg_net': "
    "points_at_config.TmpMixerConfig is not an nnx.Module class; register the model class",
    ("plain_net", "cpu-smoke"): "package plain-config 0.1.0 (entry point plain_net = "
    "plain_config:TmpMixer): architecture 'plain_net' of plain_config.TmpMixer: its config "
    "<class 'plain_config.TmpMixerConfig'> is not a subclass of dew.config.ModelConfig; "
    "subclass it",
    (NAME, "small"): "architecture 'tmp_mixer' (package tmp-mixer 0.1.0): its config "
    "TmpMixerConfig has no preset 'small' (it has: cpu-smoke); run --preset cpu-smoke, or "
    "add 'small' to TmpMixerConfig.presets",
}


def write_package(root: Path, dist: str, source: str, entry_points: dict, version="0.1.0"):
    """A package as its author keeps it: pyproject.toml (setuptools, the entry points) and
    one module named after the distribution."""
    module = dist.replace("-", "_")
    root.mkdir(parents=True)
    (root / f"{module}.py").write_text(textwrap.dedent(source))
    points = "\n".join(f'{name} = "{value}"' for name, value in entry_points.items())
    (root / "pyproject.toml").write_text(
        textwrap.dedent(f"""\
        [build-system]
        requires = ["setuptools"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "{dist}"
        version = "{version}"

        [tool.setuptools]
        py-modules = ["{module}"]

        [project.entry-points."dew.architectures"]
        """)
        + points
        + "\n"
    )
    return root


def pip_install(site: Path, *packages: Path) -> None:
    """Built (a wheel each) and installed into `site`, as pip installs any package."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
         "--no-index", "--disable-pip-version-check", "--target", site, *packages],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]


def environment(*path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([*map(str, path), str(REPO / "src")]),
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=8",
    }


def benchmark(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "tools/benchmark_step.py", "--idle-check", "off",
               "--compilation-cache-dir", "off", *args]  # fmt: skip
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)


def git(tree: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", tree, "-c", "user.name=t", "-c", "user.email=t@t", *args],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip


@pytest.fixture(scope="module")
def packages(tmp_path_factory) -> Path:
    """TMP/site: the good package at 0.1.0 and every bad one; TMP/site2: it at 0.2.0;
    TMP/tree: its source at 0.2.0 as a git checkout, dirty."""
    tmp = tmp_path_factory.mktemp("own")
    good = write_package(tmp / "good", DIST, CONFIG + MODEL, {NAME: "tmp_mixer:TmpMixer"})
    bad = [write_package(tmp / dist, dist, *BAD[dist]) for dist in BAD]
    pip_install(tmp / "site", good, *bad)
    tree = write_package(tmp / "tree", DIST, CONFIG + MODEL, {NAME: "tmp_mixer:TmpMixer"}, "0.2.0")
    pip_install(tmp / "site2", tree)
    (tree / ".gitignore").write_text("build/\n*.egg-info/\n")  # what the wheel's build left
    git(tree, "init", "-q")
    git(tree, "add", ".")
    git(tree, "commit", "-q", "-m", "the model")
    with (tree / "tmp_mixer.py").open("a") as module:
        module.write("# an edit not committed yet\n")
    return tmp


# --- fast: what the record says of a module, and what compare makes of it -------------------


def test_the_record_names_a_modules_distribution_version_and_git_commit(tmp_path, monkeypatch):
    tree = write_package(tmp_path / "tree", "rec-pkg", "X = 1\n", {"x": "rec_pkg:X"}, "1.2")
    info = tree / "rec_pkg-1.2.dist-info"  # as an editable install leaves beside the code
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rec-pkg\nVersion: 1.2\n")
    (info / "RECORD").write_text("rec_pkg.py,,\n")
    git(tree, "init", "-q")
    git(tree, "add", "rec_pkg.py", "pyproject.toml")
    git(tree, "commit", "-q", "-m", "first")
    monkeypatch.syspath_prepend(str(tree))
    (code,) = outside.describe({"rec_pkg": ["x"]})
    assert code.model_dump() == {
        "distribution": "rec-pkg", "version": "1.2", "module": "rec_pkg", "used_by": ["x"],
        "commit": git(tree, "rev-parse", "HEAD"), "dirty": False, "source": "git",
    }  # fmt: skip
    (tree / "rec_pkg.py").write_text("X = 2\n")
    assert outside.describe({"rec_pkg": ["x"]})[0].dirty is True
    assert outside.versions([code]) == {"rec-pkg": "1.2"}


def test_compare_and_resume_see_the_outside_code_change():
    def env(version, commit):
        code = [{"distribution": DIST, "version": version, "module": "tmp_mixer",
                 "commit": commit, "dirty": False, "source": "git"}]  # fmt: skip
        return {"packages": {"jax": "0.11.1", DIST: version}, "outside_code": code}

    a, b = env("0.2.0", "a" * 40), env("0.1.0", "b" * 40)
    diffs, _ = stack_differences({"environment": a}, {"environment": b})
    shown = {(d.what, d.run, d.reference) for d in diffs}
    assert (f"package {DIST}", "0.2.0", "0.1.0") in shown
    assert (f"outside {DIST} commit", "a" * 40, "b" * 40) in shown
    changed = {what for what, x, y in stack_identity(a, b) if x != y}
    assert changed == {"package set", "outside code"}


# --- slow: through tools/benchmark_step.py ---------------------------------------------------


@pytest.mark.slow  # a pip build of 8 packages and 9 runs of the tool (3 of them timed)
def test_a_package_from_a_temporary_folder_runs_and_is_named_in_the_record(packages, tmp_path):
    site, site2, tree = packages / "site", packages / "site2", packages / "tree"
    # Every bad package installed beside it: they affect no run that does not name them.
    first = tmp_path / "first.json"
    done = benchmark(environment(site), "--preset", "cpu-smoke", "--architectures", NAME,
                     "simple_dit", "--steps", "2", "--repeats", "2",
                     "--json-out", str(first))  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    record = read_run(first)
    rows = {row.architecture: row for row in record.rows}
    assert set(rows) == {NAME, "simple_dit"}
    row = rows[NAME]
    assert row.status == "ok" and row.batch == 8 and row.sample == "8x8x3"
    assert row.params > 0 and row.gflop_per_step > 0 and row.compiler_peak_gib is not None
    assert len(row.repeats) == 2 and all(repeat.phases for repeat in row.repeats)
    assert row.ms_per_step_ci95 is not None and row.fingerprint is not None
    # Every field dew's own row has, it has (on CPU util and the allocator's peak are null
    # for both: no peak FLOP/s, no allocator statistics).
    filled = [{k for k, v in r.model_dump().items() if v is not None} for r in rows.values()]
    assert filled[0] == filled[1]
    (code,) = record.environment.outside_code
    assert (code.distribution, code.version, code.module, code.used_by) == (
        DIST,
        "0.1.0",
        "tmp_mixer",
        [NAME],
    )
    assert code.commit is None and code.source is None  # an installed copy names no commit
    assert record.environment.packages[DIST] == "0.1.0"

    # The next version, run from its git checkout on PYTHONPATH (dist-info from site2).
    second = tmp_path / "second.json"
    done = benchmark(environment(tree, site2), "--preset", "cpu-smoke", "--cases",
                     json.dumps([{"architecture": NAME, "batch": 8}]), "--steps", "2",
                     "--repeats", "2", "--json-out", str(second))  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    record = read_run(second)
    (row,) = record.rows
    assert (row.architecture, row.batch, row.status) == (NAME, 8, "ok")
    (code,) = record.environment.outside_code
    assert (code.version, code.commit, code.dirty, code.source) == (
        "0.2.0",
        git(tree, "rev-parse", "HEAD"),
        True,
        "git",
    )
    done = subprocess.run(
        [sys.executable, "-m", "dew.bench.analysis.compare_command", second, first,
         "--format", "text"],
        cwd=REPO, env=environment(), capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode in (0, 1, 3), done.stderr[-2000:]  # 3: INCONCLUSIVE
    stack = next(line for line in done.stdout.splitlines() if f"package {DIST}" in line)
    assert "0.2.0" in stack and "0.1.0" in stack, done.stdout
    assert f"outside {DIST} commit" in done.stdout  # recorded on one side only


@pytest.mark.slow  # one tool start per bad input (each refused before any device starts)
@pytest.mark.parametrize(("name", "preset"), list(BAD_LINES))
def test_each_bad_package_is_one_line_naming_it_and_exit_2(packages, name, preset):
    done = benchmark(environment(packages / "site"), "--preset", preset, "--architectures", name)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip() == f"tools/benchmark_step.py: error: {BAD_LINES[name, preset]}"
