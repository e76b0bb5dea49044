"""An architecture's package installed editable (`pip install -e`, PEP 660) from a git
checkout: the record names the checkout's commit, and a dirty tree as dirty; a version
bumped in the checkout and not installed again is refused in one line (a stale install)."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DESCRIBE = (
    "import json; from dew.bench.record.outside import describe; "
    "print(json.dumps([o.model_dump() for o in describe({'edit_pkg.models': ['edit_net']})]))"
)


def _git(tree: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_an_editable_install_names_its_checkouts_commit_and_dirty_tree(tmp_path):
    tree = tmp_path / "edit-pkg"
    (tree / "edit_pkg").mkdir(parents=True)
    (tree / "edit_pkg" / "__init__.py").write_text("")
    (tree / "edit_pkg" / "models.py").write_text("WIDTH = 8\n")
    (tree / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "edit-pkg"\nversion = "0.3.0"\n'
        '[tool.setuptools]\npackages = ["edit_pkg"]\n'
    )
    _git(tree, "init", "-q")
    _git(tree, "add", ".")
    _git(tree, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "first")
    commit = _git(tree, "rev-parse", "HEAD")
    # A venv of its own that sees this test's packages (pip, setuptools, pydantic) and dew's
    # source through a .pth file: the editable install goes into the venv, not the test's.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (site,) = (venv / "lib").glob("python3*/site-packages")
    outer = [p for p in sys.path if p.endswith("site-packages")] + [str(ROOT / "src")]
    (site / "outer.pth").write_text("\n".join(outer) + "\n")
    python = str(venv / "bin" / "python")
    install = [python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
    done = subprocess.run([*install, "--no-index", "-e", str(tree)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert not (site / "edit_pkg").exists()  # editable: the code stays in the checkout

    def described() -> dict:
        out = subprocess.run([python, "-c", DESCRIBE], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr[-2000:]
        (code,) = json.loads(out.stdout)
        return code

    def refused() -> str:
        out = subprocess.run([python, "-c", DESCRIBE], capture_output=True, text=True)
        assert out.returncode != 0
        return out.stderr.strip().splitlines()[-1]

    code = described()
    assert (code["distribution"], code["version"]) == ("edit-pkg", "0.3.0")
    assert (code["commit"], code["dirty"]) == (commit, False)
    (tree / "edit_pkg" / "models.py").write_text("WIDTH = 16\n")  # an edit not committed
    assert (described()["commit"], described()["dirty"]) == (commit, True)
    # The checkout moves on to 0.4.0 and is not installed again: its metadata still says
    # 0.3.0, which a record would name beside the new commit. Refused, naming both.
    pyproject = tree / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('"0.3.0"', '"0.4.0"'))
    line = refused()
    assert line.startswith(
        "dew.bench.record.outside.StaleInstall: package edit-pkg: installed as 0.3.0, but its "
        "checkout declares 0.4.0"
    )
    assert line.endswith(f"install it again: python -m pip install -e {tree}")
    done = subprocess.run([*install, "--no-index", "-e", str(tree)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert described()["version"] == "0.4.0"  # installed again: described, not refused
