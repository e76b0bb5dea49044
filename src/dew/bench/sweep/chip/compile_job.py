"""One case compiled for a TPU topology without the chip, in a process of its own.

The run sends the job (messages.CompileJob: case, options, topology, folder); this process
builds the case's Trainer on the topology's devices (dew.train.executables
.topology_devices), lowers and compiles the step (timed, labelled: its FLOPs counted from
the TPU's optimized HLO), then saves the executable, the initial state (computed on this
process's CPU) and the batch into the folder, and answers with the row's figures so far
(messages.Compiled). It runs with JAX_PLATFORMS=cpu and ALLOW_MULTIPLE_LIBTPU_LOAD=1
(ENVIRONMENT): libtpu's lockfile lets it load beside the process that holds the chip, and
it never opens the chip itself.
"""

from __future__ import annotations

import dataclasses
import sys
import time

from dew.bench.runtime import protocol
from dew.bench.runtime.phases import PhaseClock
from dew.bench.sweep.case_run import Figures, failure, prepare
from dew.bench.sweep.chip import kept_programs
from dew.bench.sweep.chip.messages import Compiled, CompileJob
from dew.bench.sweep.presets import Case
from dew.bench.sweep.settings import Options
from dew.flags import CACHE_OFF

ENVIRONMENT = {"JAX_PLATFORMS": "cpu", "ALLOW_MULTIPLE_LIBTPU_LOAD": "1"}
NAME = "the case's compile process"


def argv() -> list[str]:
    return [sys.executable, "-c", "from dew.bench.sweep.chip.compile_job import main; main()"]


def job(case: Case, options: Options, topology: str, folder: str) -> CompileJob:
    return CompileJob(case, options, topology, folder, spawned=time.time())


def main() -> None:
    parent = protocol.ToParent.from_environment()
    work = parent.receive(CompileJob)
    if work is None:  # the run has gone
        return
    clock = PhaseClock()
    clock.add("imports", work.spawned, time.time() - work.spawned, time.process_time())
    case, options = work.case, work.options
    kept = kept_programs.cache_dir(options) if not options.compile_only else None
    digest = kept_programs.key(case, options, work.topology) if kept else None
    entry = kept_programs.find(kept, digest) if kept and digest else None
    if entry is not None:  # compiled by an earlier run: its figures, its folder
        parent.send(loaded(entry, clock))
        return
    answer = compiled(case, options, work.topology, work.folder, clock)
    if kept and digest and answer.error is None:
        kept_programs.keep(kept, digest, work.folder, protocol.as_json(answer))
    parent.send(answer)


def compiled(case: Case, options: Options, topology: str, folder: str, clock) -> Compiled:
    """The case compiled here and its program saved in `folder`: what the run needs (the
    figures, tokens per sample, the error or None, the phases)."""
    figures, tokens, error = Figures(), None, None
    try:
        from dew.train.executables import STEP_FILE, save_program, topology_devices

        devices = topology_devices(topology)
        # JAX writes a persistent-cache entry here but cannot read one back in a process
        # without the chip ("PjRtCompiler must be constructed with a Client to call
        # DeserializeLoadedExecutable"): the programs are kept whole instead (kept_programs).
        compile_only = dataclasses.replace(
            options, compile_only=True, compilation_cache_dir=CACHE_OFF
        )
        prepared = prepare(case, compile_only, figures, clock, devices)
        tokens = prepared.tokens_per_sample
        if not options.compile_only:  # a compile-only run times nothing: nothing to save
            with clock.phase("save"):
                batch = prepared.trainer.example_batch(case.batch)
                saved = save_program(folder, prepared.trainer, batch)
                figures.program_bytes = (saved / STEP_FILE).stat().st_size
    except Exception as failed:
        error = failure(failed)
    return Compiled(figures, tokens, error, clock.phases, folder)


def loaded(entry, clock: PhaseClock) -> Compiled:
    """An earlier run's program of the same key: its compile's figures (compile_s the
    original's, load_s the read), "load" in the phases, the holder pointed at it."""
    began, start, cpu = time.time(), time.perf_counter(), time.process_time()
    kept = Compiled(**kept_programs.read(entry))
    seconds = time.perf_counter() - start
    clock.add("load", began, seconds, time.process_time() - cpu)
    figures = dataclasses.replace(kept.figures, load_s=seconds)
    return dataclasses.replace(kept, figures=figures, phases=clock.phases, folder=str(entry))
