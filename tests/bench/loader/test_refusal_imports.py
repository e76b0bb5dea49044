"""The loader's command and the site's builder refuse bad input and read records without
grain or JAX: those are imported by the process that reads batches (measure_loader), so a
mistyped flag is answered in a fraction of a second, not after seconds of imports."""

import subprocess
import sys

HEAVY = ("jax", "grain", "flax", "optax", "orbax")


def test_the_loader_command_and_the_site_import_no_grain_or_jax():
    probe = (
        "import sys, dew.bench.loader.data_command, dew.bench.site.build\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_bad_flag_of_dew_data_is_refused_before_grain_is_imported():
    probe = (
        "import sys\n"
        "from dew.bench.loader import data_command\n"
        "code = data_command.main(['--frob'])\n"
        f"print(code, sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert "unrecognized argument --frob" in done.stderr
    assert done.stdout.strip() == "2 []", (done.stdout, done.stderr[-500:])
