"""What the pods of the Kubernetes manifests run (dew.bench.multihost.kubernetes): the step
tool's flags, where the record goes, and the Job's deadline counted from the cases.
Standard library only."""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence

from dew.bench.common.errors import UsageError

RESULTS_MOUNT = "/results"
# The tool's own deadlines per case (dew.bench.sweep.settings.case_deadlines, one compile
# job: a cluster's cases compile one at a time): 30 min to compile, 10 min per 100 steps
# to time. In a cluster the cases run in the processes that joined, not in a child the
# tool could kill, so the Job's activeDeadlineSeconds is what ends a hung run.
COMPILE_S, TIMED_S, TIMED_STEPS = 1800.0, 600.0, 100
JOIN_S = 300  # DEW_INIT_TIMEOUT_S: pod 0's name resolving, then the first connection
MAX_REPEATS = 15  # --max-repeats' default, the most rounds --repeats auto runs


def record_path(args: argparse.Namespace) -> str:
    return f"{RESULTS_MOUNT}/{args.name}/step.json"


def devices(args: argparse.Namespace) -> int:
    return args.hosts * args.devices_per_host


def tool_args(args: argparse.Namespace) -> list[str]:
    """The step tool's flags: the user's, else the GPU recipe's (simple_dit, 8 samples per
    device, one fsdp axis over every device); a mesh over every device unless given."""
    given = list(args.tool_args)
    if not given:
        case = {"architecture": "simple_dit", "batch": 8 * devices(args)}
        given = ["--preset", "small", "--cases", json.dumps([case])]
    if value(given, "--mesh") is None:
        given += ["--mesh", json.dumps({"fsdp": devices(args)})]
    return [*given, "--json-out", record_path(args)]


def value(args: Sequence[str], name: str) -> str | None:
    """The last value of `--name VALUE` or `--name=VALUE` (the one the tool keeps)."""
    found = None
    for index, arg in enumerate(args):
        if arg == name:
            found = args[index + 1] if index + 1 < len(args) else ""
        elif arg.startswith(name + "="):
            found = arg.split("=", 1)[1]
    return found


def run_deadline(args: argparse.Namespace) -> int:
    """The Job's activeDeadlineSeconds: the time to join, then every case's deadline for
    each of its repeats. Counting the cases needs them named (`--cases`, `--step`): the
    presets are not readable with the standard library alone."""
    flags = tool_args(args)
    cases_json, step = value(flags, "--cases"), value(flags, "--step")
    if cases_json is None and step is None:
        raise UsageError(
            "name the cases with --cases JSON (or --step): the run's deadline is the "
            "per-case deadline times the cases, and a preset's cases are not counted here"
        )
    try:
        cases = json.loads(cases_json) if cases_json is not None else []
    except ValueError as error:
        raise UsageError(f"--cases is not valid JSON: {error}") from None
    if not isinstance(cases, list):
        raise UsageError("--cases is not a JSON list of cases")
    count = len(cases) + (step is not None)
    repeats_text = value(flags, "--repeats") or "1"
    if repeats_text == "auto":
        repeats_text = value(flags, "--max-repeats") or str(MAX_REPEATS)
    if not repeats_text.isdigit() or int(repeats_text) < 1:
        raise UsageError(f"--repeats {repeats_text!r} is not a number of repeats")
    steps_text = value(flags, "--steps") or str(TIMED_STEPS)
    if not steps_text.isdigit():
        raise UsageError(f"--steps {steps_text!r} is not a number of steps")
    per_case = args.case_timeout or COMPILE_S + TIMED_S * max(1.0, int(steps_text) / TIMED_STEPS)
    return JOIN_S + math.ceil(per_case * count * int(repeats_text))
