"""scripts/faults.py: every fault, caused for real in a cpu-smoke run, ends as it should
(one clear line, the exit code, the rows kept, no process left). The faults' own tests are
beside the code they exercise (tests/bench/*/test_*faults*.py); this keeps the script's
table true."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "faults.py"
spec = importlib.util.spec_from_file_location("faults", SCRIPT)
faults = importlib.util.module_from_spec(spec)
sys.modules["faults"] = faults  # its dataclasses look their module up while it loads
spec.loader.exec_module(faults)


@pytest.mark.slow  # each fault is a real sweep: 5 to 45 s
@pytest.mark.parametrize("name", sorted(faults.FAULTS))
def test_each_fault_meets_its_expectation(tmp_path, name):
    outcome = faults.run_fault(name, tmp_path)
    if outcome.why == "not caused":
        pytest.skip(outcome.line)
    assert outcome.met, faults.table([outcome])
    assert outcome.left == 0


def test_an_unknown_fault_is_one_line_and_exit_2(capsys):
    assert faults.main(["--only", "nope"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("faults: error: --only 'nope' is not valid; valid: ")
