"""The house's rules, checked on the tree itself: the import contract of pyproject.toml
(layers, no circles, a schema that validates anywhere, benchmark kinds free of frameworks,
a host side of the standard library alone, also imported in a bare Python), modules of at
most 450 lines and folders of at most 16 modules; and scripts/: each named by a test of
tests/scripts/, and taking no private name from dew."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

REPO = Path(__file__).resolve().parents[1]
MAX_LINES = 450
MAX_MODULES = 16
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(root: Path, src: Path) -> subprocess.CompletedProcess:
    """`lint-imports` with root's pyproject.toml over the package under src."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=root, env=env, capture_output=True, text=True
    )


def test_the_import_contract_holds():
    done = lint_imports(REPO, REPO / "src")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "BROKEN" not in done.stdout


@pytest.mark.parametrize(
    "module, line",
    [
        # a lower layer of dew.bench importing a higher one
        ("bench/common/files.py", "from dew.bench.sweep import run"),
        # the schema pulling in jax through the record's capture
        ("bench/record/schema/base.py", "import dew.bench.record.capture"),
        # models knowing of training
        ("models/registry.py", "import dew.train.trainer"),
        # a benchmark kind pulling in a framework (the kinds are plain data and statistics)
        ("bench/analysis/kinds/step_kind.py", "import jax"),
        # the host side (the noxfile's, before any environment) needing a third-party package
        ("host/engine.py", "import numpy"),
        # ... or a part of dew that needs one
        ("host/sessions/smoke.py", "import dew.bench.sweep.settings"),
    ],
)
def test_the_contract_catches_a_wrong_import(tmp_path, module, line):
    shutil.copytree(REPO / "src" / "dew", tmp_path / "src" / "dew", ignore=_no_caches)
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / "src" / "dew" / module
    target.write_text(target.read_text() + f"\n{line}  # noqa\n")
    done = lint_imports(tmp_path, tmp_path / "src")
    assert done.returncode != 0 and "BROKEN" in done.stdout, done.stdout[-2000:]


def _no_caches(directory, names):
    return [name for name in names if name == "__pycache__"]


# Imports every module of dew.host and the `dew` command's dispatch, then names any module
# loaded that is neither the standard library's nor dew's.
BARE_IMPORT = """
import importlib, pkgutil, sys
import dew.host
for module in pkgutil.walk_packages(dew.host.__path__, "dew.host."):
    importlib.import_module(module.name)
import dew.commands.main
dew.commands.main.help_text()
roots = {name.split(".")[0] for name in sys.modules}
print(sorted(roots - set(sys.stdlib_module_names) - {"dew", "__main__"}))
"""


def test_the_host_side_imports_in_a_bare_python():
    """As the noxfile imports it before any environment exists: no site-packages (-I -S),
    only src/ on the path; `dew --help` too (its commands import their entry points only
    when they run)."""
    code = f"import sys; sys.path.insert(0, {str(REPO / 'src')!r})\n" + BARE_IMPORT
    done = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[]"


def import_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Every set of modules that import each other round a circle (Tarjan's strongly
    connected components), TYPE_CHECKING imports aside."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in graph.find_modules_directly_imported_by(module):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return cycles


def test_no_module_imports_itself_round_a_circle():
    graph = grimp.build_graph("dew", exclude_type_checking_imports=True, cache_dir=None)
    assert import_cycles(graph) == []


def test_a_circle_is_found():
    graph = grimp.ImportGraph()
    for importer, imported in [("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d")]:
        graph.add_import(importer=importer, imported=imported)
    assert import_cycles(graph) == [["p.a", "p.b", "p.c"]]


def python_files() -> list[Path]:
    roots = [REPO / "src", REPO / "scripts", REPO / "tools"]
    return [REPO / "noxfile.py"] + [p for root in roots for p in sorted(root.rglob("*.py"))]


def test_no_module_is_over_450_lines():
    long = {
        str(path.relative_to(REPO)): n
        for path in python_files()
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}, f"split by job: over {MAX_LINES} lines: {long}"


def test_no_folder_holds_over_16_modules():
    crowded = {}
    for folder in [REPO / "src", *(REPO / "src").rglob("*")]:
        if folder.is_dir() and folder.name != "__pycache__":
            modules = [
                p for p in folder.glob("*.py") if p.name not in ("__init__.py", "__main__.py")
            ]
            if len(modules) > MAX_MODULES:
                crowded[str(folder.relative_to(REPO))] = len(modules)
    assert crowded == {}, f"a folder per role, at most {MAX_MODULES} modules: {crowded}"


def test_no_two_modules_share_a_name_outside_the_commands():
    """A name says where a thing lives: no two modules or packages of src/dew share one,
    except dew.commands', each named after the `dew` subcommand it is (`dew ab`: commands/ab.py)."""
    by_name: dict[str, list[str]] = {}
    src = REPO / "src" / "dew"
    for path in src.rglob("*"):
        module = path.stem if path.suffix == ".py" else path.name
        is_package = path.is_dir() and (path / "__init__.py").exists()
        if (path.suffix == ".py" or is_package) and module not in ("__init__", "__main__"):
            if path.parent != src / "commands":
                by_name.setdefault(module, []).append(str(path.relative_to(src)))
    shared = {name: paths for name, paths in by_name.items() if len(paths) > 1}
    assert shared == {}, f"one name, two places: {shared}"


SCRIPTS = REPO / "scripts"


def private_dew_names(source: str) -> list[str]:
    """Each private name a file takes from dew: `from dew.a import _b`, a private module on
    the way (`import dew.a._b`, `from dew.a._b import c`), or `m._b` of a dew module `m` it
    imported."""
    tree = ast.parse(source)
    found, dew_names = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "dew":
            private_module = any(part.startswith("_") for part in node.module.split("."))
            for alias in node.names:
                dew_names.add(alias.asname or alias.name)
                if private_module or alias.name.startswith("_"):
                    found.append(f"{node.module}.{alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "dew":
                    dew_names.add((alias.asname or alias.name).split(".")[0])
                    if any(part.startswith("_") for part in alias.name.split(".")):
                        found.append(alias.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            if node.attr.startswith("__"):
                continue
            base = node.value
            while isinstance(base, ast.Attribute):
                base = base.value
            if isinstance(base, ast.Name) and base.id in dew_names:
                found.append(ast.unparse(node))
    return found


def test_the_scripts_use_dews_public_names_only():
    """A script reaches dew through what a module offers, not its insides (issue 62)."""
    files = [*sorted(SCRIPTS.glob("*.py")), *sorted((REPO / "tests" / "scripts").glob("*.py"))]
    private = {
        str(path.relative_to(REPO)): names
        for path in files
        if (names := private_dew_names(path.read_text()))
    }
    assert private == {}, f"make the name public in its module, or use one that is: {private}"


def test_a_private_name_is_found_however_it_is_reached():
    source = (
        "import dew.bench.record.capture as capture\n"
        "from dew.bench.record.capture import _code, code_identity\n"
        "from dew.bench._private import thing\n"
        "import dew.bench.sweep\n"
        "capture._packages()\n"
        "dew.bench.sweep._hidden\n"
        "capture.code_identity; capture.__name__\n"
    )
    assert sorted(private_dew_names(source)) == [
        "capture._packages",
        "dew.bench._private.thing",
        "dew.bench.record.capture._code",
        "dew.bench.sweep._hidden",
    ]


def test_every_script_is_named_by_a_test_of_its_own():
    """A script that makes a committed figure is run by a test under tests/scripts/; one
    that has served is deleted (git keeps it)."""
    tests = " ".join(path.read_text() for path in (REPO / "tests" / "scripts").glob("*.py"))
    untested = [path.name for path in sorted(SCRIPTS.glob("*.py")) if path.stem not in tests]
    assert untested == [], f"test these under tests/scripts/, or delete them: {untested}"


PLATFORM_NAMES = frozenset({"cpu", "gpu", "tpu", "cuda", "rocm", "nvidia", "metal"})


def _branches_on_a_platform_name(source: str) -> list[int]:
    """The lines of `source` that compare a value with a platform's name: `x == "tpu"`,
    `x != "cpu"`, `x in ("cpu", "tpu")` (dew.platforms' fields say what differs)."""

    def named(node: ast.AST) -> bool:
        if isinstance(node, ast.Constant):
            return isinstance(node.value, str) and node.value.lower() in PLATFORM_NAMES
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(named(item) for item in node.elts)
        return False

    lines = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        for op, left, right in zip(node.ops, sides[:-1], sides[1:], strict=True):
            if isinstance(op, (ast.Eq, ast.NotEq)) and (named(left) or named(right)):
                lines.append(node.lineno)
            elif (
                isinstance(op, (ast.In, ast.NotIn))
                and isinstance(right, ast.Tuple | ast.List | ast.Set)
                and named(right)
            ):
                lines.append(node.lineno)
    return lines


def test_nothing_outside_the_platforms_branches_on_a_platform_name():
    found = [f"{path.relative_to(REPO)}:{line}"
             for path in sorted((REPO / "src/dew").rglob("*.py"))
             if "platforms" not in path.relative_to(REPO / "src/dew").parts[:1]
             for line in _branches_on_a_platform_name(path.read_text())]  # fmt: skip
    assert not found, f"compared with a platform's name outside dew.platforms: {found}"


@pytest.mark.parametrize("line", ['if name == "cpu": pass', 'ok = kind != "TPU"',
                                  'gpu = platform in ("gpu", "cuda")'])  # fmt: skip
def test_a_branch_on_a_platform_name_is_found(line):
    assert _branches_on_a_platform_name(line) == [1]
    assert _branches_on_a_platform_name('on = "cpu" in reason_text') == []
