"""A SLURM scheduler to submit to: the host's own, or a throwaway one-node cluster.

    with slurm_cluster.scheduler(log=print) as cluster:
        job = cluster.submit(RECIPE, ["--architectures", "simple_dit"], env=..., output=...)
        code = job.wait()

`scheduler()` uses the host's SLURM when `sinfo` answers. Otherwise it installs Debian's
slurm-wlm and munge when they are missing (apt-get, as root) and brings up a cluster of
this host alone, its configuration, keys, state and logs in a temporary directory; the
daemons are stopped and the directory removed whatever happens (an error, Ctrl-C,
SIGTERM). The slurm-smoke nox session and tests/bench/multihost/test_slurm.py use it.

Standard library only, and no import of dew or of the rest of tests/infra: the slurm-smoke
session imports it (as `infra.slurm_cluster`, tests/ on sys.path) before any environment
exists. A loader by path registers the module in sys.modules before running it (its
dataclasses look their module up there):

    spec = importlib.util.spec_from_file_location("dew_slurm_cluster", PATH)
    slurm = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(slurm)
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # tests/infra/ -> the repository
# The cpu-smoke recipe: 2 tasks x 4 simulated CPU devices, JAX's SLURM detection.
CPU_RECIPE = ROOT / "docs" / "multihost" / "slurm-cpu.sbatch"
PACKAGES = ("slurm-wlm", "munge")
SHORT_BASE_BYTES = 60  # + "/dew-slurm-XXXXXXXX/munge/munge.socket" (38) stays under 107
PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "sinfo", "squeue", "scancel")
PROGRAMS += ("scontrol",)
UP_TIMEOUT_S = 60  # from the daemons' start to an idle node; seconds here
KILL_WAIT_S = 5  # SLURM's KillWait: SIGTERM to SIGKILL when a job is cancelled


class SlurmError(RuntimeError):
    """The scheduler cannot be had or did not do what was asked (one line)."""


def missing_programs() -> list[str]:
    return [name for name in PROGRAMS if shutil.which(name) is None]


def install_packages(log: Callable[[str], None] = print) -> None:
    """apt-get install slurm-wlm munge when a program of theirs is missing (root only)."""
    missing = missing_programs()
    if not missing:
        return
    why = f"{', '.join(missing)} missing"
    if os.geteuid() != 0:
        raise SlurmError(f"{why}; installing {' and '.join(PACKAGES)} needs root")
    if shutil.which("apt-get") is None:
        raise SlurmError(f"{why}; install {' and '.join(PACKAGES)} (no apt-get here)")
    log(f"{why}: apt-get install {' '.join(PACKAGES)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *PACKAGES]):
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise SlurmError(f"{' '.join(argv)} exited {done.returncode}: {last}")
    if missing_programs():
        raise SlurmError(f"{', '.join(missing_programs())} still missing after apt-get")


def host_scheduler_answers() -> bool:
    """True when this host's SLURM configuration reaches a controller (`sinfo` answers)."""
    if shutil.which("sinfo") is None:
        return False
    try:
        done = subprocess.run(
            ["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, timeout=20, check=False
        )
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0 and bool(done.stdout.strip())


def short_hostname() -> str:
    return socket.gethostname().split(".")[0]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def slurm_conf(directory: Path, host: str, cpus: int, ports: tuple[int, int], first_job: int):
    """slurm.conf for one node that is also the controller, everything under `directory`.

    Process tracking by parent pid and no task plugin: nothing needs cgroups (22.05 has no
    `CgroupPlugin=disabled`, and a sandbox may offer none). FirstJobId is drawn at random
    because JAX's SLURM detection takes its coordinator port from the job id: two
    throwaway clusters on one host would otherwise both start at job 1, on one port.
    """
    return "\n".join(
        [
            "ClusterName=dew-throwaway",
            f"SlurmctldHost={host}",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"SlurmctldPort={ports[0]}",
            f"SlurmdPort={ports[1]}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={directory / 'munge' / 'munge.socket'}",
            f"StateSaveLocation={directory / 'state'}",
            f"SlurmdSpoolDir={directory / 'spool'}",
            f"SlurmctldPidFile={directory / 'slurmctld.pid'}",
            f"SlurmdPidFile={directory / 'slurmd.pid'}",
            f"SlurmctldLogFile={directory / 'slurmctld.log'}",
            f"SlurmdLogFile={directory / 'slurmd.log'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "SlurmdParameters=config_overrides",
            "MpiDefault=none",
            "ReturnToService=2",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "MailProg=/bin/true",
            f"KillWait={KILL_WAIT_S}",
            "InactiveLimit=0",
            "MinJobAge=300",
            f"FirstJobId={first_job}",
            f"NodeName={host} CPUs={cpus} State=UNKNOWN",
            f"PartitionName=local Nodes={host} Default=YES MaxTime=INFINITE State=UP",
            "",
        ]
    )


@dataclasses.dataclass
class Job:
    """A submitted batch job; `wait()` returns the job's exit status (sbatch --wait's)."""

    id: str
    sbatch: subprocess.Popen
    scheduler: Scheduler

    def wait(self, timeout_s: float | None = None) -> int:
        try:
            code = self.sbatch.wait(timeout_s)
        except BaseException:  # timeout, Ctrl-C: the job must not outlive the caller
            self.scheduler.cancel(self.id)
            raise
        self.scheduler.finished.add(self.id)
        return code

    def task_pids(self, step: str = "0") -> dict[int, list[int]]:
        """Global task id -> its process ids in a step of the job, from `scontrol
        listpids` (which sees this node's only)."""
        done = self.scheduler.run(["scontrol", "listpids", f"{self.id}.{step}"], check=False)
        pids: dict[int, list[int]] = {}
        for line in done.stdout.splitlines()[1:]:
            fields = line.split()  # PID JOBID STEPID LOCALID GLOBALID
            if len(fields) == 5 and fields[0].isdigit() and fields[4].isdigit():
                pids.setdefault(int(fields[4]), []).append(int(fields[0]))
        return pids


@dataclasses.dataclass
class Scheduler:
    """Runs SLURM's client commands with `env` (the throwaway cluster's SLURM_CONF)."""

    env: dict[str, str]
    submitted: list[str] = dataclasses.field(default_factory=list)
    finished: set[str] = dataclasses.field(default_factory=set)

    def run(self, argv: Sequence[str], check: bool = True, timeout_s: float = 60):
        done = subprocess.run(
            list(argv), env=self.env, capture_output=True, text=True, timeout=timeout_s
        )
        if check and done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise SlurmError(f"{' '.join(argv[:2])} exited {done.returncode}: {last}")
        return done

    def submit(
        self,
        script: Path,
        args: Sequence[str] = (),
        *,
        output: Path,
        env: dict[str, str] | None = None,
        chdir: Path = ROOT,
        options: Sequence[str] = (),
    ) -> Job:
        """`sbatch --wait` of `script args...`; returns once SLURM has named the job."""
        argv = ["sbatch", "--wait", "--parsable", f"--chdir={chdir}", f"--output={output}"]
        sbatch = subprocess.Popen(
            [*argv, *options, str(script), *args],
            env={**self.env, **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        first = _first_line_within(sbatch, timeout_s=60)
        job_id = first.split(";")[0].strip()
        if not job_id.isdigit():
            sbatch.kill()
            error = sbatch.stderr.read().strip().splitlines() if sbatch.stderr else []
            raise SlurmError(f"sbatch named no job: {(error or [first or 'no output'])[-1]}")
        self.submitted.append(job_id)
        return Job(job_id, sbatch, self)

    def cancel(self, job_id: str) -> None:
        with contextlib.suppress(Exception):
            self.run(["scancel", job_id], check=False)

    def cancel_unfinished(self) -> None:
        for job_id in self.submitted:
            if job_id not in self.finished:
                self.cancel(job_id)


def _first_line_within(process: subprocess.Popen, timeout_s: float) -> str:
    """sbatch --parsable prints the job id at once, then waits for the job."""
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.append(process.stdout.readline()))
    reader.daemon = True
    reader.start()
    reader.join(timeout_s)
    return lines[0].strip() if lines else ""


def short_directory(prefix: str) -> Path:
    """A new private directory (0700) whose AF_UNIX paths fit whatever TMPDIR is: munged's
    socket lies in it, `munge/munge.socket`, and a socket path holds 107 bytes at most.
    Under TMPDIR while it is short, else under /tmp (dew.bench.runtime.sockets does the
    same for a run's sockets; this module imports no dew: the module docstring says why)."""
    base = tempfile.gettempdir()
    if len(os.fsencode(base)) > SHORT_BASE_BYTES:
        base = "/tmp"
    return Path(tempfile.mkdtemp(prefix=prefix, dir=base))


class LocalCluster:
    """munged, slurmctld and slurmd for this host alone, under a temporary directory."""

    def __init__(self, log: Callable[[str], None] = print):
        self.log = log
        self.directory = short_directory("dew-slurm-")
        self.conf = self.directory / "slurm.conf"
        self.daemons: dict[str, subprocess.Popen] = {}
        self.scheduler = Scheduler({**os.environ, "SLURM_CONF": str(self.conf)})

    def start(self) -> Scheduler:
        for sub in ("munge", "state", "spool"):
            (self.directory / sub).mkdir(mode=0o700)
        key = self.directory / "munge" / "munge.key"
        key.write_bytes(os.urandom(128))
        key.chmod(0o400)
        host, cpus = short_hostname(), max(2, os.cpu_count() or 1)
        first_job = random.randint(1_000, 999_000)
        self.conf.write_text(
            slurm_conf(self.directory, host, cpus, (free_port(), free_port()), first_job)
        )
        munge = self.directory / "munge"
        self._daemon(
            "munged",
            ["munged", "--foreground", "--force", f"--key-file={key}",
             f"--socket={munge / 'munge.socket'}", f"--pid-file={munge / 'munged.pid'}",
             f"--log-file={munge / 'munged.log'}", f"--seed-file={munge / 'munged.seed'}"],
        )  # fmt: skip
        self._wait_for(lambda: (munge / "munge.socket").exists(), "munged's socket", 15)
        self._daemon("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.conf)])
        self._daemon("slurmd", ["slurmd", "-D", "-f", str(self.conf)])
        self._wait_for(self._node_idle, f"node {host} idle", UP_TIMEOUT_S)
        self.log(f"SLURM: throwaway cluster of {host} ({cpus} CPUs) up, in {self.directory}")
        return self.scheduler

    def _daemon(self, name: str, argv: list[str]) -> None:
        log = open(self.directory / f"{name}.out", "w")  # noqa: SIM115 (the daemon's lifetime)
        self.daemons[name] = subprocess.Popen(
            argv,
            env=self.scheduler.env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C at the terminal reaches us, and we stop them
        )
        log.close()

    def _node_idle(self) -> bool:
        done = self.scheduler.run(["sinfo", "-h", "-N", "-o", "%T"], check=False, timeout_s=10)
        return done.returncode == 0 and done.stdout.strip().rstrip("*") == "idle"

    def _wait_for(self, ready: Callable[[], bool], what: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not ready():
            for name, process in self.daemons.items():
                if process.poll() is not None:
                    raise SlurmError(f"{name} exited {process.returncode}: {self._tail(name)}")
            if time.monotonic() > deadline:
                raise SlurmError(f"no {what} after {timeout_s:.0f} s; logs in {self.directory}")
            time.sleep(0.5)

    def _tail(self, name: str) -> str:
        for path in (self.directory / f"{name}.log", self.directory / f"{name}.out"):
            lines = path.read_text(errors="replace").strip().splitlines() if path.exists() else []
            if lines:
                return lines[-1][:300]
        return "no log"

    def stop(self) -> None:
        """Cancel every job, stop the daemons by their pid, kill whatever the cluster
        started that is left (by pid: processes carrying this cluster's SLURM_CONF), and
        remove the directory."""
        if self.daemons.get("slurmctld") and self.daemons["slurmctld"].poll() is None:
            with contextlib.suppress(Exception):
                self.scheduler.run(["scancel", "--full", "--user=root"], check=False)
                self._wait_for(self._no_jobs, "empty queue", KILL_WAIT_S + 15)
        for name in ("slurmd", "slurmctld", "munged"):
            process = self.daemons.get(name)
            if process is None or process.poll() is not None:
                continue
            process.terminate()
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for pid in started_by(self.conf):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.directory, ignore_errors=True)

    def _no_jobs(self) -> bool:
        done = self.scheduler.run(["squeue", "-h", "-o", "%i"], check=False, timeout_s=10)
        return done.returncode == 0 and not done.stdout.strip()


def started_by(conf: Path) -> list[int]:
    """Processes whose environment names `conf` as SLURM_CONF (the cluster's jobs, steps
    and daemons), other than this process."""
    marker = f"SLURM_CONF={conf}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if marker in (entry / "environ").read_bytes().split(b"\0"):
                pids.append(int(entry.name))
    return pids


@contextlib.contextmanager
def _signals_turned(handler, numbers: Sequence[int]) -> Iterator[None]:
    """The signals `numbers` go to `handler` inside the block (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {number: signal.signal(number, handler) for number in numbers}
    try:
        yield
    finally:
        for number, old in previous.items():
            signal.signal(number, old)


def _terminated(signum, frame):
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def scheduler(log: Callable[[str], None] = print, throwaway: bool = False) -> Iterator[Scheduler]:
    """The host's SLURM when it answers (unless `throwaway`), else a throwaway cluster.

    On the way out, whatever happened, jobs submitted here that have not finished are
    cancelled and a throwaway cluster is stopped. SIGTERM raises SystemExit meanwhile so
    that this cleanup runs; a second Ctrl-C or SIGTERM does not interrupt it.
    """
    cluster, up = None, None
    if not throwaway and host_scheduler_answers():
        log("SLURM: submitting to this host's scheduler (sinfo answers)")
        up = Scheduler(dict(os.environ))
    else:
        install_packages(log)
        cluster = LocalCluster(log)
    with _signals_turned(_terminated, [signal.SIGTERM]):
        try:
            if cluster is not None:
                up = cluster.start()
            yield up
        finally:
            with _signals_turned(signal.SIG_IGN, [signal.SIGINT, signal.SIGTERM]):
                if up is not None:
                    up.cancel_unfinished()
                if cluster is not None:
                    cluster.stop()
                    log("SLURM: throwaway cluster stopped")


def output_tail(path: Path, lines: int = 40) -> str:
    """The last lines srun wrote to a job's output, less gloo's connection chatter ("" when
    the job wrote none)."""
    if not path.exists():
        return ""
    tail = path.read_text(errors="replace").splitlines(True)[-lines:]
    return "".join(line for line in tail if "[Gloo]" not in line)


def record_path(results: Path, job_id: str) -> Path:
    """Where the cpu recipe writes its record (the name carries the scheduler's job id)."""
    return results / f"step-slurm-job-{job_id}.json"


def check_record(path: Path, processes: int, job_id: str) -> str | None:
    """What is wrong with the cpu recipe's record (None: nothing): every process listed,
    every row ok, the scheduler's job id in its environment."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        return f"{path}: {error}"
    listed = (record.get("environment") or {}).get("processes") or []
    if len(listed) != processes:
        return f"{path}: environment lists {len(listed)} processes, expected {processes}"
    scheduler = (record.get("environment") or {}).get("scheduler") or {}
    if scheduler.get("job_id") != job_id:
        return f"{path}: environment.scheduler names job {scheduler.get('job_id')}, not {job_id}"
    rows = record.get("rows") or []
    if not rows:
        return f"{path}: no rows"
    for row in rows:
        if row.get("status") != "ok":
            return f"{path}: {row.get('architecture')} failed: {row.get('error')}"
    if (record.get("note") or "").startswith("partial"):
        return f"{path}: the record is marked {record['note']!r}"
    return None
