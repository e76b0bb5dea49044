"""The step benchmark on a chip that one process at a time can hold (a TPU).

Opening a TPU costs about 10 s and only one process may hold it; compiling the small preset
for it is CPU work of 60-170 s a case. So a round runs in two stages, none of them holding
the chip while it compiles:

    compile stage   every case compiled for the chip's topology (the device probe read it:
                    dew.bench.record.devices) in a process of its own, up to --compile-jobs
                    at once, JAX_PLATFORMS=cpu and ALLOW_MULTIPLE_LIBTPU_LOAD=1; each saves
                    its executable, its initial state and its batch (compile_job;
                    dew.train.executables). Once per run: XLA's TPU compile is
                    deterministic, so every repeat loads the same executable
    time stage      one fresh process holds the chip for the round (holder): each case
                    loaded, warmed up and timed in turn, alone on the host

The isolation rule: a repeat is a fresh process, as everywhere (each round's holder is
new); a row's peak HBM is the allocator's peak_bytes_in_use, which only rises within a
process, so the holder takes a row's peak as the row's own only when that row raised it,
and orders its cases by the peaks read so far (the compiler's estimate in the first round)
so that each does. Executor: rounds.HeldChip.
"""
