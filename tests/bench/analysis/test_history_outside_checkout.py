"""A dew installed outside any checkout (a wheel, a TPU host's bundle) run from a checkout's
root reads that checkout's results/: its compare of two committed TPU records is fitted from
their committed A/A history, as the checkout's own dew's is. Before, it read the results/
beside the installed package (none), and the chip's reproduce judged at the weak prior."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

from dew.bench.common.files import REPO_ROOT

RUN = "results/runs/20261207T054932Z-reproduce-tpu-v5e-89b95f9/step.json"
REF = "results/runs/20261206T162051Z-small-tpu-v5e-04f0382/step.json"


def compare_noise(site, cwd) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "dew.commands", "compare", str(REPO_ROOT / RUN),
         str(REPO_ROOT / REF), "--format", "json"],
        cwd=cwd, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site), "HOME": str(site)},
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode in (0, 1, 3), done.stderr
    return json.loads(done.stdout)["noise"]["source"]


def test_an_installed_dew_reads_the_history_of_the_checkout_it_runs_from(tmp_path):
    site = tmp_path / "site"
    shutil.copytree(REPO_ROOT / "src" / "dew", site / "dew",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    from_checkout = compare_noise(site, REPO_ROOT)
    assert from_checkout.startswith("TPU v5 lite: ") and "A/A groups" in from_checkout
    assert "committed records under results/" in from_checkout
    elsewhere = compare_noise(site, tmp_path)  # no checkout around: no history to read
    assert "no A/A history" in elsewhere
