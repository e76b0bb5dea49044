"""The example package, examples/dew-example, the way a user meets it: built and installed
for real (a wheel, its dist-info and entry_points.txt) into a temporary folder, then its
architecture (tiny_mixer, found through the `dew.architectures` entry point) and its own
training step (`--step dew_example.steps:make_step`) benchmarked in cpu-smoke, two runs
compared, and the site built over both records. Nothing of dew is edited or mocked."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dew.bench.record.schema import read_run

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "dew-example"
ARCHITECTURE = "tiny_mixer"
STEP = "dew_example.steps:make_step"
DISTRIBUTION, VERSION = "dew-example", "0.2.0"

pytestmark = pytest.mark.slow  # two benchmark runs of 2 cases, 2 and 1 fresh processes each


def run(command: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(part) for part in command], cwd=REPO, env=env, capture_output=True, text=True
    )


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """The package installed into TMP/site, and the environment that sees it and dew."""
    tmp = tmp_path_factory.mktemp("example")
    # Built from a copy: setuptools writes build/ and *.egg-info beside the sources.
    ignore = shutil.ignore_patterns("build", "*.egg-info", "__pycache__")
    source = shutil.copytree(EXAMPLE, tmp / "source", ignore=ignore)
    site = tmp / "site"
    pip = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation"]
    done = run([*pip, "--no-index", "--disable-pip-version-check", "--target", site, source])
    assert done.returncode == 0, done.stderr[-2000:]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), str(REPO / "src")]),
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=8",
    }
    return site, env


def benchmark(out: Path, env: dict[str, str], repeats: int) -> subprocess.CompletedProcess:
    return run([
        sys.executable, "tools/benchmark_step.py", "--preset", "cpu-smoke",
        "--architectures", ARCHITECTURE, "--step", STEP,
        "--steps", "2", "--repeats", str(repeats), "--json-out", out,
        "--compilation-cache-dir", "off", "--idle-check", "off",
    ], env)  # fmt: skip


def test_the_package_installs_as_a_wheel_with_its_entry_point(installed):
    site, _ = installed
    (dist_info,) = site.glob("dew_example-*.dist-info")
    assert dist_info.name == f"dew_example-{VERSION}.dist-info"
    assert (dist_info / "WHEEL").is_file()  # built as a wheel, not copied
    entry_points = (dist_info / "entry_points.txt").read_text()
    assert "[dew.architectures]" in entry_points
    assert f"{ARCHITECTURE} = dew_example.models:TinyMixer" in entry_points
    assert (site / "dew_example" / "models.py").is_file()
    assert (site / "dew_example" / "steps.py").is_file()


def test_its_architecture_and_step_are_benchmarked_compared_and_on_the_site(installed, tmp_path):
    _, env = installed
    records = tmp_path / "records"
    records.mkdir()
    a, b = records / "A.json", records / "B.json"

    done = benchmark(a, env, repeats=2)
    assert done.returncode == 0, done.stderr[-3000:]
    done = run([sys.executable, "-m", "dew.bench.record.validate", a], env)
    assert done.returncode == 0, done.stdout + done.stderr

    record = read_run(a)
    rows = {row.architecture: row for row in record.rows}
    assert set(rows) == {ARCHITECTURE, STEP}
    for row in rows.values():
        assert row.status == "ok", (row.architecture, row.error)
        assert row.params > 0 and row.gflop_per_step > 0, row.architecture
        assert row.fingerprint is not None, row.architecture
        assert len(row.repeats) == 2 and row.ms_per_step > 0, row.architecture
        assert row.loss_finite is not False, row.architecture
    assert rows[ARCHITECTURE].sample == "16x16x3" and rows[ARCHITECTURE].batch == 8
    # The record names the package and its version, in `packages` too: compare's stack
    # differences name a new version.
    assert record.environment.packages[DISTRIBUTION] == VERSION
    outside = record.environment.outside_code
    assert {name for package in outside for name in package.used_by} == {ARCHITECTURE, STEP}
    assert {(p.distribution, p.version) for p in outside} == {(DISTRIBUTION, VERSION)}

    # B is only the other side of the comparison (its figures are not asserted): one
    # repeat a case, a fresh process each, as compare reads any number.
    done = benchmark(b, env, repeats=1)
    assert done.returncode == 0, done.stderr[-3000:]
    compare = [sys.executable, "-m", "dew.bench.analysis.compare_command", b, a]
    done = run([*compare, "--format", "json"], env)
    # 0, 1 or 3: REPRODUCED, NOT REPRODUCED or INCONCLUSIVE (two runs on a shared host)
    assert done.returncode in (0, 1, 3), done.stderr[-2000:]
    compared = {row["label"]: row for row in json.loads(done.stdout)["rows"]}
    assert set(compared) == {ARCHITECTURE, STEP}
    for label, row in compared.items():
        assert row["verdict"] in ("same", "faster", "slower", "undecided"), (label, row)
        assert row["compiled"] == "same program", (label, row)

    site = tmp_path / "site"
    done = run([sys.executable, "-m", "dew.bench.site", records, "--out", site], env)
    assert done.returncode == 0, done.stdout + done.stderr
    index = (site / "index.html").read_text()
    assert ARCHITECTURE in index and STEP in index
    assert ARCHITECTURE in (site / "arch" / "tiny-mixer.html").read_text()
    assert any(STEP in page.read_text() for page in (site / "arch").glob("*.html"))
