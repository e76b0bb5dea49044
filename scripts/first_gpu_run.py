"""The first run of dew on an NVIDIA GPU host that has jax+CUDA but no container engine
and no package index (docs/gpu-first-run.md says how to carry the wheels and why these).

    python scripts/first_gpu_run.py [--out DIR] [--wheels DIR] [--budget-s 480]
        [--platform cuda|cpu] [--preset small|cpu-smoke] [--architectures A B ...]
        [--steps N] [--repeats 3] [--aa-records 6] [--commit SHA] [--no-install]

In order, everything under one output directory (new; default results/runs/<stamp>-first-
gpu-run-<host>), every stage with a timeout from what is left of the budget (an overrun
still leaves the tables written so far, and time for a rerun inside the command's limit):
  1. install dew's dependencies the host lacks, at the pins of locks/cuda13.txt, from the
     carried wheels (`pip install --no-index --no-deps --target OUT/site`): nothing of the
     host's Python is changed, and jax, jaxlib, flax, optax, numpy, scipy stay the host's;
  2. the step benchmark over the cases that fit the step stage's share of the budget
     (scripts/first_gpu_cases.py: the published rows, cheapest first, and on CUDA one with
     attention_impl cudnn; cases.md says which were chosen and which left out, and why),
     each --repeats times in a fresh process (a fresh compile each: no compilation cache),
     --lock-clocks max where permitted (root, CUDA), idle and GPU checks in warn mode
     (step.json, step.md, step.log, each case's log in step.logs/); cut at its timeout,
     keeping every row written so far (the record is rewritten after each row);
  3. the loader on a synthetic ArrayRecord set at the models' image size, workers 0 and 8,
     against the step record (data-workers-*.json/md);
  4. compare against the published record sharing the most rows (compare.md: the stack
     differences, e.g. jax 0.11.2 against 0.11.1, then per row the ratios and verdicts);
  4a. A/A records (scripts/first_gpu_noise.py): the same three fast rows, 2 repeats, in
     several records while the stage's share lasts (at most --aa-records, 1 to 6), so the
     history fit learns this device kind's run and process levels (aa-N.json/md);
  5. validate every record; 6. gpu.md (per row the GPU window's readings and the synced
     step time without and with the sampler, the allocator setting), fingerprints.md (per
     repeat what the compiler chose), summary.md, and report.md: all of them in one file.

--platform cpu (with --preset cpu-smoke) runs the same stages on CPU: the check a machine
without a GPU can make. A checkout without .git (a copied working tree) needs --commit:
the records name it (DEW_COMMIT, passed to every stage). Exit 0: every stage ran and every
row is ok (a compare that finds a difference is a finding, not a failure); 1: a stage or a
row failed, or the budget cut a stage; 2: bad input (a flag, an existing --out, missing
wheels, no .git and no --commit), one line. Imports nothing but the standard library: it
runs before dew's dependencies are there.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its modules, standard library only
import first_gpu_cases as plan  # noqa: E402
from first_gpu_install import UsageError, install, plan_install  # noqa: E402
from first_gpu_noise import NOISE_MAX_RECORDS, NOISE_SHARE_S, run_noise  # noqa: E402

PROG = "first_gpu_run"
REPO = Path(__file__).resolve().parents[1]
PUBLISHED = REPO / "results" / "published"
PRESET_IMAGE_SIZE = {"small": 64, "cpu-smoke": 16}
# Each stage after the step benchmark: its timeout at most (seconds). Their sum is kept
# back from the step stage, so that an overrun there still leaves them their time.
AFTER_STEP_S = {"noise": NOISE_SHARE_S, "prepare": 30, "loader 0": 40, "loader 8": 40}
AFTER_STEP_S |= {"compare": 30, "validate": 20}
PROBE_S = 60
TERM_GRACE_S = 10  # a tool past its timeout gets SIGTERM (it ends its children), then KILL
FLAGS = ("--out", "--wheels", "--budget-s", "--platform", "--preset", "--architectures")
FLAGS += ("--steps", "--repeats", "--aa-records", "--commit", "--no-install", "--help")
TABLES = ("summary.md", "cases.md", "step.md", "fingerprints.md", "gpu.md", "compare.md")
TABLES += ("data-workers-0.md", "data-workers-8.md", "aa-1.md", "aa-2.md", "aa-3.md")


def parse(argv: list[str]) -> dict:
    args = {"out": None, "wheels": str(REPO / "wheels"), "budget_s": 560.0, "platform": "cuda"}
    args |= {"preset": "small", "architectures": [], "steps": None, "install": True}
    args |= {"repeats": "3", "aa_records": str(NOISE_MAX_RECORDS), "commit": None}
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
    for name, most in (("steps", None), ("repeats", None), ("aa_records", NOISE_MAX_RECORDS)):
        value = args[name]
        if value is not None:
            whole = str(value).isdigit()
            if not whole or int(value) < 1 or (most is not None and int(value) > most):
                within = ">= 1" if most is None else f"1..{most}"
                flag = name.replace("_", "-")
                raise UsageError(f"--{flag} must be a whole number {within} (got {value!r})")
            args[name] = int(value)
    if args["platform"] == "cuda" and args["preset"] == "cpu-smoke":
        raise UsageError("--preset cpu-smoke runs on CPU: pass --platform cpu with it")
    args["commit"] = check_commit(REPO, args["commit"])
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


def check_commit(repo: Path, commit: str | None) -> str | None:
    """The commit the records name where the checkout cannot (no .git: a copied tree)."""
    if commit is not None and not re.fullmatch(r"[0-9a-fA-F]{7,40}", commit):
        raise UsageError(f"--commit {commit!r} is not a commit SHA (7 to 40 hex digits)")
    if commit is None and not (repo / ".git").exists():
        raise UsageError(
            f"{repo} has no .git and no --commit was given: pass --commit SHA, the commit "
            "this tree was copied from (git rev-parse HEAD where it has .git), so the "
            "records name it"
        )
    return commit


# --- 2-5. the tools ------------------------------------------------------------------------


def environment(args: dict) -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(REPO / "src"), str(args["out"] / "site"), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    env["JAX_PLATFORMS"] = args["platform"]
    env["PYTHONUNBUFFERED"] = "1"
    if args["commit"]:  # dew.bench.record.capture reads it where there is no .git
        env["DEW_COMMIT"] = args["commit"]
    if args["platform"] == "cuda":  # the seed's rerun and bench-gpu: each row says which ran
        env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        env.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.8")
    if args["preset"] == "cpu-smoke" and "device_count" not in env.get("XLA_FLAGS", ""):
        env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} "
        env["XLA_FLAGS"] += "--xla_force_host_platform_device_count=8"
    return env


def tool(args, name: str, argv: list[str], *, timeout: float, env=None, table=None) -> int:
    """Run a tool from the checkout: its stdout into OUT/`table` (then shown), its stderr
    shown as it comes and kept in OUT/<name>.log. Past `timeout` the tool gets SIGTERM (it
    ends its children and keeps its record), its process group SIGKILL TERM_GRACE_S later;
    returns 124 then."""
    out: Path = args["out"]
    command = [sys.executable, *argv]
    print(f"$ {' '.join(command)}  (timeout {timeout:.0f} s)", file=sys.stderr, flush=True)
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
            _signal(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=TERM_GRACE_S)
            except subprocess.TimeoutExpired:
                pass
            _signal(process.pid, signal.SIGKILL)  # whatever of its group is left
            process.wait()
            code = 124
        reader.join(timeout=5)
    print(stdout_path.read_text(), end="", flush=True)
    return code


def _signal(group: int, sig: int) -> None:
    try:
        os.killpg(group, sig)
    except ProcessLookupError:
        pass


class Budget:
    """The run's seconds: what is left, and each stage's timeout from it."""

    def __init__(self, seconds: float):
        self.seconds, self.started = seconds, time.monotonic()

    def left(self, keep: float = 0.0) -> float:
        """Seconds left once `keep` is held back for the stages after this one."""
        return self.seconds - (time.monotonic() - self.started) - keep

    def spent(self) -> float:
        return time.monotonic() - self.started


def verdict(code: int, ok: str = "ok") -> str:
    return {0: ok, 124: "cut at its timeout"}.get(code, f"exit {code}")


def lock_clocks(args: dict) -> tuple[list[str], str]:
    """--lock-clocks max where this host permits it (root, CUDA, a tool that has the flag),
    else no flag and why."""
    if args["platform"] != "cuda":
        return [], "skipped: no GPU clocks to lock on CPU"
    if os.geteuid() != 0:
        return [], "skipped: locking the clocks needs root"
    tool_text = (REPO / "src/dew/bench/sweep/settings.py").read_text()
    tool_text += (REPO / "src/dew/bench/sweep/step_command.py").read_text()
    if "lock_clocks" not in tool_text:
        return [], "skipped: this checkout's benchmark_step has no --lock-clocks"
    return ["--lock-clocks", "max"], "--lock-clocks max (the step stage; restored after it)"


def step_cases(args: dict, seconds: float) -> tuple[list[str], str]:
    """The step benchmark's case flags and the stage's line on them; writes cases.md."""
    out: Path = args["out"]
    if args["preset"] != "small":
        named = " ".join(args["architectures"]) or "every case"
        (out / "cases.md").write_text(f"{args['preset']}: {named}, as asked (no published "
                                      "figures to choose by)\n")  # fmt: skip
        flags = ["--architectures", *args["architectures"]] if args["architectures"] else []
        return flags, f"{named} as asked"
    figures = plan.published_figures(PUBLISHED)
    chosen, left_out = plan.choose(
        figures, seconds, repeats=args["repeats"], steps=args["steps"] or 100,
        cudnn=args["platform"] == "cuda", architectures=args["architectures"] or None,
    )  # fmt: skip
    (out / "cases.md").write_text(plan.cases_table(chosen, left_out, figures, seconds))
    line = f"{len(chosen)} chosen ({', '.join(e['label'] for e in chosen) or 'none'}); "
    line += f"{len(left_out)} left out (cases.md says why)"
    if not chosen:
        return [], line
    return ["--cases", json.dumps([entry["case"] for entry in chosen])], line


def run(args: dict) -> int:
    budget = Budget(args["budget_s"])
    out: Path = args["out"]
    stages: list[tuple[str, str, bool]] = []  # (stage, result, whether it is a failure)

    def log(line: str) -> None:
        print(f"{PROG}: {line}", file=sys.stderr, flush=True)

    installed = install(args, log)
    probe = "import dew.bench.sweep.step_command, dew.bench.loader.data_command"
    probe += ", dew.bench.analysis.compare_command, dew.bench.record.validate"
    probe += ", dew.data.pipeline, dew.telemetry.nvml"
    try:
        done = subprocess.run([sys.executable, "-c", probe], env=environment(args), cwd=REPO,
                              capture_output=True, text=True, timeout=PROBE_S)  # fmt: skip
    except subprocess.TimeoutExpired:
        raise UsageError(f"dew did not import within {PROBE_S} s") from None
    if done.returncode != 0:
        last = [line for line in done.stderr.splitlines() if line.strip()][-1:] or ["?"]
        raise UsageError(f"dew does not import with these packages: {last[0]}")
    stages.append(("install", f"ok ({len(installed)} installed into {out / 'site'})", False))
    commit = f"{args['commit']} (--commit)" if args["commit"] else "from git"
    stages.append(("commit", commit, False))

    step_s = budget.left(keep=sum(AFTER_STEP_S.values()))
    cases, chosen = step_cases(args, step_s)
    stages.append(("cases", chosen, not cases and args["preset"] == "small"))
    clocks, clocks_line = lock_clocks(args)
    stages.append(("clocks", clocks_line, False))
    step = ["tools/benchmark_step.py", "--preset", args["preset"], "--format", "md"]
    step += ["--json-out", str(out / "step.json"), "--repeats", str(args["repeats"])]
    # Repeats are fresh compiles (XLA's choices sampled); one repeat may use a cache.
    cache = "off" if args["repeats"] > 1 else str(out / "xla")
    step += ["--compilation-cache-dir", cache, "--idle-check", "warn", "--gpu-check", "warn"]
    step += cases
    if args["steps"]:
        step += ["--steps", str(args["steps"])]
    code = tool(args, "step", step + clocks, timeout=max(step_s, 30), table="step.md")
    if code != 0 and clocks and not (out / "step.json").exists():  # the lock failed: go on
        refused = (out / "step.log").read_text().strip().splitlines()[-1:] or ["?"]
        stages[-1] = ("clocks", f"refused, the step stage ran again without: {refused[0]}", True)
        step_s = budget.left(keep=sum(AFTER_STEP_S.values()))
        code = tool(args, "step", step, timeout=max(step_s, 30), table="step.md")
    stages.append(("step benchmark", verdict(code) if code != 1 else "a case failed", code != 0))
    record = None
    if (out / "step.json").exists():
        record = json.loads((out / "step.json").read_text())
        (out / "fingerprints.md").write_text(plan.fingerprint_table(record))
        (out / "gpu.md").write_text(plan.gpu_table(record))
    after = dict(AFTER_STEP_S)

    def timeout(stage: str) -> float | None:
        """The stage's timeout, None (skipped) when the budget has not 5 s left for it."""
        del after[stage]
        seconds = min(AFTER_STEP_S[stage], budget.left(keep=sum(after.values())))
        return seconds if seconds >= 5 else None

    seconds = timeout("noise")  # A/A records: the kind's noise for the history fit
    if seconds is None:
        stages.append(("A/A records", "skipped: no time left", True))
    else:
        deadline = time.monotonic() + seconds
        said, failed = run_noise(
            args["preset"], out, lambda: deadline - time.monotonic(),
            lambda name, argv, *, timeout, table: tool(args, name, argv, timeout=timeout,
                                                       table=table),
            args["steps"], args["aa_records"],
        )  # fmt: skip
        stages.append(("A/A records", said, failed))

    data_dir = out / "synthetic-data"
    cpu = {**environment(args), "JAX_PLATFORMS": "cpu"}
    said = "skipped: no step record" if record is None else None
    for part in ("prepare", "loader 0", "loader 8"):
        seconds = timeout(part)
        if said is not None:
            continue
        if seconds is None:
            said = f"{part}: skipped, no time left"
            continue
        if part == "prepare":
            argv = ["tools/prepare_dataset.py", "--synthetic", "256", "--out", str(data_dir)]
            code = tool(args, "prepare", argv, env=cpu, timeout=seconds)
        else:
            workers = part.split()[1]
            name = f"data-workers-{workers}"
            argv = ["tools/benchmark_data.py", "data:synthetic-images", "--data.path"]
            argv += [str(data_dir), "--batch", "8", "--data.image-size"]
            argv += [str(PRESET_IMAGE_SIZE[args["preset"]]), "--steps", "100", "--warmup", "5"]
            argv += ["--data.loading.workers", workers, "--json-out", str(out / f"{name}.json")]
            argv += ["--against", str(out / "step.json")]
            code = tool(args, name, argv, env=cpu, table=f"{name}.md", timeout=seconds)
        said = None if code == 0 else f"{part}: {verdict(code)}"
    stages.append(("loader", said or "ok", said is not None))
    shutil.rmtree(data_dir, ignore_errors=True)  # made again in seconds: not worth keeping

    seconds = timeout("compare")
    if record is not None and seconds is not None:
        compare = ["-m", "dew.bench.analysis.compare_command", str(out / "step.json"),
                   "--format", "md"]  # fmt: skip
        code = tool(args, "compare", compare, table="compare.md", timeout=seconds)
        said = {0: "ok: reproduced", 1: "ok: differences found", 3: "ok: inconclusive"}
        said = said.get(code, verdict(code))
        stages.append(("compare", f"{said}{plan.compare_verdicts(out / 'compare.md')}",
                       code not in (0, 1, 3)))  # fmt: skip
    else:
        stages.append(("compare", "skipped: no step record or no time left", True))
    records = sorted(str(p) for p in out.glob("*.json"))
    seconds = timeout("validate")
    if records and seconds is not None:
        code = tool(args, "validate", ["-m", "dew.bench.record.validate", *records],
                    timeout=seconds)  # fmt: skip
        stages.append(("validate", verdict(code), code != 0))
    else:
        stages.append(("validate", "skipped: no record or no time left", True))
    for name in ("fingerprints.md", "gpu.md"):
        if (out / name).exists():
            print(f"\n## {name}\n\n{(out / name).read_text()}", end="")
    return summary(args, stages, budget)


def summary(args: dict, stages, budget: Budget) -> int:
    """summary.md (the stage table) and report.md (every table in one file); 1 when a stage
    failed."""
    out: Path = args["out"]
    text = [f"# first GPU run: {out}", "", "| stage | result |", "|---|---|"]
    text += [f"| {stage} | {result} |" for stage, result, _ in stages]
    text += ["", f"{budget.spent():.0f} s in all (budget {args['budget_s']:g} s)"]
    (out / "summary.md").write_text("\n".join(text) + "\n")
    report = [f"## {name}\n\n{(out / name).read_text()}" for name in TABLES
              if (out / name).exists()]  # fmt: skip
    (out / "report.md").write_text("\n".join(report))
    print("\n".join(text))
    return 1 if any(failed for *_, failed in stages) else 0


def main(argv: list[str] | None = None) -> int:
    try:
        return run(parse(sys.argv[1:] if argv is None else list(argv)))
    except UsageError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
