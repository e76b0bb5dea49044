"""`nox -s slurm-smoke`: cpu-smoke submitted to SLURM as 2 tasks x 4 simulated CPU devices,
the job waited for and its record checked. The scheduler is tests/infra/slurm_cluster.py
(the host's SLURM, or a throwaway one-node cluster), test infrastructure that no installed
dew carries: imported as `infra.slurm_cluster` with tests/ on sys.path, as
tests/conftest.py makes it importable."""

from __future__ import annotations

import datetime
import importlib
import pathlib
import sys

from dew.host.engine import ROOT
from dew.host.runner import new_run_dir
from dew.host.venvs import install_locked


def slurm_cluster():
    """tests/infra/slurm_cluster.py (standard library only), imported once."""
    tests = str(ROOT / "tests")
    if tests not in sys.path:
        sys.path.append(tests)
    return importlib.import_module("infra.slurm_cluster")


def slurm_smoke(session) -> None:
    """The session: `-- [benchmark_step.py flags]` (default `--architectures simple_dit`)."""
    slurm = slurm_cluster()
    install_locked(session)
    args = ["--steps", "2", "--idle-check", "off"]
    args += session.posargs or ["--architectures", "simple_dit"]
    run_dir = new_run_dir("slurm-smoke", "cpu")
    started = datetime.datetime.now(datetime.UTC)
    try:
        with slurm.scheduler(log=session.log) as scheduler:
            job = scheduler.submit(
                slurm.CPU_RECIPE, args, output=run_dir / "slurm-job-%j.out",
                env={"DEW_PYTHON": str(pathlib.Path(session.bin) / "python"),
                     "DEW_RESULTS": str(run_dir)},
            )  # fmt: skip
            recipe = slurm.CPU_RECIPE.relative_to(ROOT)
            session.log(f"SLURM job {job.id}: {recipe} {' '.join(args)}")
            code = job.wait()
    except slurm.SlurmError as error:
        session.error(str(error))
    output = run_dir / f"slurm-job-{job.id}.out"
    print(slurm.output_tail(output))
    if code != 0:
        session.error(f"SLURM job {job.id} exited {code}; its output: {output.relative_to(ROOT)}")
    record = slurm.record_path(run_dir, job.id)
    session.run("python", "-m", "dew.bench.record.validate", str(record))
    problem = slurm.check_record(record, processes=2, job_id=job.id)
    if problem:
        session.error(problem)
    wall = (datetime.datetime.now(datetime.UTC) - started).total_seconds()
    session.log(f"record: {record.relative_to(ROOT)} (2 processes, job {job.id}), {wall:.0f} s")
