"""The first run of dew on an NVIDIA GPU host that has jax+CUDA but no container engine
and no package index (docs/gpu-first-run.md says how to carry the wheels and why these).

    python scripts/first_gpu_run.py [--out DIR] [--wheels DIR] [--budget-s 600]
        [--platform cuda|cpu] [--preset small|cpu-smoke] [--architectures A B ...]
        [--steps N] [--no-install]

In order, everything under one output directory (new; default results/runs/<stamp>-first-
gpu-run-<host>):
  1. install dew's dependencies the host lacks, at the pins of locks/cuda13.txt, from the
     carried wheels (`pip install --no-index --no-deps --target OUT/site`): nothing of the
     host's Python is changed, and jax, jaxlib, flax, optax, numpy, scipy stay the host's;
  2. the step benchmark over the preset, one process per case, compilation cache in OUT,
     idle and GPU checks in warn mode (step.json, step.md, step.log); cut at the time
     budget, keeping every row written so far (the record is rewritten after each row);
  3. the loader on a synthetic ArrayRecord set at the models' image size, workers 0 and 8,
     against the step record (data-workers-*.json/md);
  4. compare against the published record sharing the most rows (compare.md: the stack
     differences, e.g. jax 0.11.2 against 0.11.1, then per row the ratios);
  5. validate every record; 6. gpu.md: per row the GPU readings and the synced step time
     without the sampler (p50) and with it (the GPU window's p50).

--platform cpu (with --preset cpu-smoke) runs the same stages on CPU: the check a machine
without a GPU can make. Exit 0: every stage ran and every row is ok (a compare that finds a
difference is a finding, not a failure); 1: a stage or a row failed, or the budget cut the
run; 2: bad input (a flag, an existing --out, missing wheels), one line. Imports nothing
but the standard library: it runs before dew's dependencies are there.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

PROG = "first_gpu_run"
REPO = Path(__file__).resolve().parents[1]
LOCK = REPO / "locks" / "cuda13.txt"
# What dew needs beyond what a jax+CUDA host has (jax, jaxlib, flax, optax, numpy, scipy
# and their own dependencies: absl-py, etils, protobuf, rich, msgpack, pyyaml, ...).
CARRIED = (
    "pydantic", "pydantic-core", "annotated-types", "typing-inspection", "typing-extensions",
    "tyro", "docstring-parser", "typeguard",
    "grain", "array-record", "cloudpickle", "portpicker",
    "nvidia-ml-py", "psutil", "pillow", "tokenizers", "ftfy", "wcwidth",
)  # fmt: skip
PRESET_IMAGE_SIZE = {"small": 64, "cpu-smoke": 16}
RESERVED_S = 120  # the loader, compare, validate and the summary after the step run
FLAGS = ("--out", "--wheels", "--budget-s", "--platform", "--preset", "--architectures")
FLAGS += ("--steps", "--no-install", "--help")


class UsageError(Exception):
    """Bad input: one line, exit 2."""


def parse(argv: list[str]) -> dict:
    args = {"out": None, "wheels": str(REPO / "wheels"), "budget_s": 600.0, "platform": "cuda"}
    args |= {"preset": "small", "architectures": [], "steps": None, "install": True}
    index = 0
    while index < len(argv):
        token = argv[index]
        name, eq, value = token.partition("=")
        if name not in FLAGS:
            raise UsageError(f"unrecognized argument {token}; valid: {', '.join(FLAGS)}")
        if name == "--help":
            print(__doc__)
            raise SystemExit(0)
        if name == "--no-install":
            args["install"] = False
            index += 1
            continue
        if name == "--architectures":
            names = [value] if eq else []
            index += 1
            while index < len(argv) and not argv[index].startswith("--"):
                names.append(argv[index])
                index += 1
            if not names:
                raise UsageError("--architectures needs at least one name")
            args["architectures"] = names
            continue
        if not eq:
            if index + 1 >= len(argv):
                raise UsageError(f"{name} needs a value")
            value = argv[index + 1]
            index += 1
        index += 1
        args[name[2:].replace("-", "_")] = value
    return check(args)


def check(args: dict) -> dict:
    for name, choices in (("platform", ("cuda", "cpu")), ("preset", tuple(PRESET_IMAGE_SIZE))):
        if args[name] not in choices:
            raise UsageError(f"--{name} {args[name]!r} is not valid; valid: {', '.join(choices)}")
    try:
        args["budget_s"] = float(args["budget_s"])
    except ValueError:
        raise UsageError(f"--budget-s {args['budget_s']!r} is not a number of seconds") from None
    if not 60 <= args["budget_s"] <= 86400:  # a NaN fails this too
        raise UsageError(f"--budget-s must be 60..86400 seconds (got {args['budget_s']:g})")
    if args["steps"] is not None:
        if not str(args["steps"]).isdigit() or int(args["steps"]) < 1:
            raise UsageError(f"--steps must be a whole number >= 1 (got {args['steps']!r})")
        args["steps"] = int(args["steps"])
    if args["platform"] == "cuda" and args["preset"] == "cpu-smoke":
        raise UsageError("--preset cpu-smoke runs on CPU: pass --platform cpu with it")
    if sys.version_info < (3, 12):  # noqa: UP036  # the host's python, not ours: say so
        raise UsageError(f"dew needs Python 3.12 or newer; this is {sys.version.split()[0]}")
    if importlib.util.find_spec("jax") is None:
        raise UsageError("jax is not installed: this script is for a host with jax (and, for "
                         "--platform cuda, its CUDA plugin) already installed")  # fmt: skip
    if args["out"] is None:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        host = re.sub(r"[^a-z0-9]+", "-", socket.gethostname().lower()).strip("-")
        args["out"] = str(REPO / "results" / "runs" / f"{stamp}-first-gpu-run-{host}")
    out = Path(args["out"])
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"--out {out} exists and is not an empty directory; give a new one")
    args["wanted"] = plan_install(args) if args["install"] else []
    try:  # an empty directory: a rerun with the same --out is still accepted
        out.mkdir(parents=True, exist_ok=True)
        (out / ".probe").write_text("")
        (out / ".probe").unlink()
    except OSError as error:
        raise UsageError(f"--out {out}: cannot write there ({error.strerror or error})") from None
    args["out"] = out
    return args


# --- 1. the dependencies -------------------------------------------------------------------


def pins() -> dict[str, str]:
    """distribution -> version, from the CUDA 13 lock (the stack the published runs use)."""
    found = {}
    for line in LOCK.read_text().splitlines():
        match = re.match(r"([A-Za-z0-9_.\-]+)==([^\s;\\]+)", line)
        if match:
            found[match.group(1).lower()] = match.group(2)
    return found


def missing_distributions() -> list[str]:
    """`name==pin` of each carried distribution the host does not have at its pin."""
    locked = pins()
    wanted = []
    for name in CARRIED:
        try:
            have = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            have = None
        if have != locked[name]:
            wanted.append(f"{name}=={locked[name]}")
    return wanted


def plan_install(args: dict) -> list[str]:
    """`name==pin` of what to install; refuses (one line) when --wheels cannot supply it."""
    wanted = missing_distributions()
    wheels = Path(args["wheels"])
    if wanted and not wheels.is_dir():
        raise UsageError(
            f"--wheels {wheels} is not a directory; the host lacks {', '.join(wanted)}: "
            "fetch them as docs/gpu-first-run.md says (pip download --no-deps -d wheels/ ...)"
        )
    have = {_wheel_key(p.name) for p in wheels.glob("*.whl")} if wanted else set()
    absent = [w for w in wanted if tuple(w.lower().split("==")) not in have]
    if absent:
        raise UsageError(f"--wheels {wheels} lacks {', '.join(absent)} (docs/gpu-first-run.md)")
    return wanted


def install(args: dict, log) -> list[str]:
    """pip-install the planned wheels into OUT/site; returns what was installed."""
    wanted = args["wanted"]
    if not wanted:
        log("every carried dependency is already installed at its pin: nothing to install")
        return []
    command = [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps"]
    command += ["--find-links", str(args["wheels"]), "--target", str(args["out"] / "site")]
    log("installing " + " ".join(wanted))
    done = subprocess.run([*command, *wanted], capture_output=True, text=True)
    (args["out"] / "install.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        raise UsageError(f"pip could not install the wheels: {lines[-1] if lines else '?'}")
    return wanted


def _wheel_key(filename: str) -> tuple[str, str]:
    name, version = filename.split("-")[:2]
    return name.lower().replace("_", "-"), version


# --- 2-5. the tools ------------------------------------------------------------------------


def environment(args: dict) -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(REPO / "src"), str(args["out"] / "site"), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    env["JAX_PLATFORMS"] = args["platform"]
    if args["preset"] == "cpu-smoke" and "device_count" not in env.get("XLA_FLAGS", ""):
        env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} "
        env["XLA_FLAGS"] += "--xla_force_host_platform_device_count=8"
    return env


def tool(args, name: str, argv: list[str], *, timeout=None, env=None, table=None) -> int:
    """Run a tool from the checkout: its stdout into OUT/`table` (then shown), its stderr
    shown as it comes and kept in OUT/<name>.log. Past `timeout` the tool and its children
    are killed (returns 124)."""
    out: Path = args["out"]
    command = [sys.executable, *argv]
    print(f"$ {' '.join(command)}", file=sys.stderr, flush=True)
    stdout_path = out / (table or f"{name}.out")
    with open(stdout_path, "w") as stdout, open(out / f"{name}.log", "w") as log:
        process = subprocess.Popen(
            command, cwd=REPO, env=env or environment(args), stdout=stdout,
            stderr=subprocess.PIPE, text=True, start_new_session=True,
        )  # fmt: skip

        def tee() -> None:
            for line in process.stderr:
                log.write(line)
                print(line, end="", file=sys.stderr, flush=True)

        reader = threading.Thread(target=tee, daemon=True)
        reader.start()
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # the case's child with it
            process.wait()
            code = 124
        reader.join()
    print(stdout_path.read_text(), end="", flush=True)
    return code


def run(args: dict) -> int:
    started = time.monotonic()
    out: Path = args["out"]
    stages: list[tuple[str, str]] = []

    def log(line: str) -> None:
        print(f"{PROG}: {line}", file=sys.stderr, flush=True)

    installed = install(args, log)
    probe = "import dew.bench.sweep.benchmark_step, dew.bench.loader.benchmark_data"
    probe += ", dew.bench.analysis.compare, dew.bench.record.validate"
    probe += ", dew.data.pipeline, dew.telemetry.nvml"
    done = subprocess.run([sys.executable, "-c", probe], env=environment(args), cwd=REPO,
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        last = [line for line in done.stderr.splitlines() if line.strip()][-1:] or ["?"]
        raise UsageError(f"dew does not import with these packages: {last[0]}")
    stages.append(("install", f"ok ({len(installed)} installed into {out / 'site'})"))

    step = ["tools/benchmark_step.py", "--preset", args["preset"], "--format", "md"]
    step += ["--json-out", str(out / "step.json"), "--compilation-cache-dir", str(out / "xla")]
    step += ["--idle-check", "warn", "--gpu-check", "warn"]
    if args["steps"]:
        step += ["--steps", str(args["steps"])]
    if args["architectures"]:
        step += ["--architectures", *args["architectures"]]
    left = args["budget_s"] - RESERVED_S - (time.monotonic() - started)
    code = tool(args, "step", step, timeout=max(left, 30), table="step.md")
    verdicts = {0: "ok", 1: "a case failed", 124: f"cut at the budget ({args['budget_s']:g} s)"}
    stages.append(("step benchmark", verdicts.get(code, f"exit {code}")))
    if not (out / "step.json").exists():
        return summary(args, stages, started, failed=True)

    data_dir = out / "synthetic-data"
    cpu = {**environment(args), "JAX_PLATFORMS": "cpu"}
    code = tool(args, "prepare", ["tools/prepare_dataset.py", "--synthetic", "256", "--out",
                                  str(data_dir)], env=cpu)  # fmt: skip
    for workers in (0, 8):
        if code != 0:
            break
        name = f"data-workers-{workers}"
        loader = ["tools/benchmark_data.py", "data:synthetic-images", "--data.path", str(data_dir)]
        loader += ["--batch", "8", "--data.image-size", str(PRESET_IMAGE_SIZE[args["preset"]])]
        loader += ["--steps", "100", "--warmup", "5", "--data.loading.workers", str(workers)]
        loader += ["--json-out", str(out / f"{name}.json"), "--against", str(out / "step.json")]
        code = tool(args, name, loader, env=cpu, table=f"{name}.md")
    stages.append(("loader", "ok" if code == 0 else f"exit {code}"))
    shutil.rmtree(data_dir, ignore_errors=True)  # made again in seconds: not worth keeping

    compare = ["-m", "dew.bench.analysis.compare", str(out / "step.json"), "--format", "md"]
    if importlib.util.find_spec("matplotlib") is not None:
        compare += ["--plot", str(out / "compare.png")]
    code = tool(args, "compare", compare, table="compare.md")
    stages.append(("compare", {0: "ok: reproduced", 1: "ok: differences found"}.get(code,
                                                                   f"exit {code}")))  # fmt: skip
    records = sorted(str(p) for p in out.glob("*.json"))
    code = tool(args, "validate", ["-m", "dew.bench.record.validate", *records])
    stages.append(("validate", "ok" if code == 0 else f"exit {code}"))
    (out / "gpu.md").write_text(gpu_table(json.loads((out / "step.json").read_text())))
    print((out / "gpu.md").read_text())
    failed = any(not verdict.startswith("ok") for _, verdict in stages)
    return summary(args, stages, started, failed=failed)


def _fmt(value, digits: int = 1) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


GPU_HEADERS = (
    "row", "p50 ms", "p50 ms sampled", "change", "SM MHz min/median", "mem MHz", "max °C",
    "W (mean)", "J/step", "samples/kJ", "reasons (GPU 0)", "uncounted custom calls",
)  # fmt: skip


def gpu_table(record: dict) -> str:
    """Per row: the synced p50 without and with the sampler, and the first card's readings
    (every card is in step.json)."""
    lines = ["| " + " | ".join(GPU_HEADERS) + " |", "|" + "---|" * len(GPU_HEADERS)]
    for row in record["rows"]:
        gpu = row.get("gpu") or {}
        card = (gpu.get("gpus") or [{}])[0]
        plain, sampled = row.get("p50_ms"), gpu.get("p50_ms")
        calls = row.get("uncounted_custom_calls")
        cells = [
            row["architecture"] + (" (moe)" if (row.get("case") or {}).get("moe") else ""),
            _fmt(plain, 2),
            _fmt(sampled, 2),
            f"{(sampled / plain - 1) * 100:+.1f}%" if plain and sampled else "—",
            f"{_fmt(card.get('sm_clock_mhz_min'), 0)}/{_fmt(card.get('sm_clock_mhz_median'), 0)}",
            _fmt(card.get("memory_clock_mhz_median"), 0),
            _fmt(card.get("temperature_c_max"), 0),
            _fmt(card.get("power_w_mean")),
            _fmt(gpu.get("joules_per_step"), 3),
            _fmt(gpu.get("samples_per_kj")),
            ", ".join(card.get("clocks_event_reasons") or []) or gpu.get("note") or "—",
            ", ".join(f"{k} x{v}" for k, v in calls.items()) if calls else "—",
        ]
        if row.get("status") != "ok":
            cells[1] = f"failed: {row.get('error')}"
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def summary(args: dict, stages, started: float, *, failed: bool) -> int:
    text = [f"# first GPU run: {args['out']}", ""]
    text += [f"- {stage}: {verdict}" for stage, verdict in stages]
    text += ["", f"{time.monotonic() - started:.0f} s in all (budget {args['budget_s']:g} s)"]
    (args["out"] / "summary.md").write_text("\n".join(text) + "\n")
    print("\n".join(text))
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    try:
        return run(parse(sys.argv[1:] if argv is None else list(argv)))
    except UsageError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
