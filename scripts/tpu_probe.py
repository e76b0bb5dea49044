"""A first look at a TPU host: its facts, compiling without the chip, and running the saved
executables in one process that holds it.

    python scripts/tpu_probe.py OUT_DIR ARCH [ARCH ...]

Prints JSON lines; each compile runs in a process of its own (JAX_PLATFORMS=cpu,
ALLOW_MULTIPLE_LIBTPU_LOAD=1), all at once, then one process opens the chip and times
every saved program."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

TOPOLOGY = os.environ.get("DEW_TPU_TOPOLOGY", "v5e:1x1")


def facts() -> dict:
    import importlib.metadata as md
    import platform

    versions = {}
    for name in ("jax", "jaxlib", "libtpu", "libtpu-nightly", "numpy", "scipy", "flax"):
        try:
            versions[name] = md.version(name)
        except md.PackageNotFoundError:
            versions[name] = None
    thp = {}
    for name in ("enabled", "defrag"):
        try:
            thp[name] = Path(f"/sys/kernel/mm/transparent_hugepage/{name}").read_text().strip()
        except OSError as error:
            thp[name] = str(error)
    env = {k: v for k, v in os.environ.items() if k.startswith(("TPU", "LIBTPU", "XLA", "JAX", "PYENV", "PYTHONPATH"))}
    return {"python": sys.executable, "version": platform.python_version(), "versions": versions,
            "thp": thp, "env": env, "cpus": os.cpu_count()}


def compile_one(arch: str, folder: str) -> dict:
    start = time.perf_counter()
    from dew.bench.sweep.case_run import model_config
    from dew.bench.sweep.presets import get
    from dew.telemetry.instrumentation import compiled_flops, cost_analysis_flops
    from dew.telemetry.memory import compiler_memory
    from dew.train.executables import compile_init, save_program, topology_devices
    from dew.train.mesh import MeshSpec
    from dew.train.trainer import Trainer

    imported = time.perf_counter()
    case = next(c for c in get("small").cases if c.architecture == arch and not c.moe)
    devices = topology_devices(TOPOLOGY)
    topo = time.perf_counter()
    trainer = Trainer(arch, model_config(case, "small"), preset="small", mesh=MeshSpec(),
                      compilation_cache_dir=None, devices=devices)
    batch = trainer.example_batch(case.batch)
    lowered = trainer.lower(batch)
    traced = time.perf_counter()
    trainer.compile_lowered(lowered)
    compiled = time.perf_counter()
    init = compile_init(trainer)
    init_done = time.perf_counter()
    save_program(folder, trainer, batch, init)
    saved = time.perf_counter()
    return {"arch": arch, "imports": imported - start, "topology": topo - imported,
            "trace_lower": traced - topo, "compile": compiled - traced, "init_compile": init_done - compiled,
            "save": saved - init_done, "gflop": compiled_flops(trainer.compiled) / 1e9,
            "cost_gflop": (cost_analysis_flops(trainer.compiled) or 0) / 1e9,
            "memory": compiler_memory(trainer.compiled), "kind": str(devices[0].device_kind)}


def hold(folders: list[str]) -> None:
    start = time.perf_counter()
    import jax

    devices = jax.devices()
    opened = time.perf_counter()
    d = devices[0]
    ident = {"open_s": opened - start, "platform": d.platform, "kind": d.device_kind, "count": len(devices),
             "coords": getattr(d, "coords", None), "core_on_chip": getattr(d, "core_on_chip", None),
             "platform_version": d.client.platform_version, "memory_stats": d.memory_stats(),
             "env_after": {k: v for k, v in os.environ.items() if k.startswith(("TPU", "LIBTPU", "XLA"))}}
    print(json.dumps({"identity": ident}, default=str), flush=True)
    from dew.train.executables import load_program

    for folder in folders:
        t0 = time.perf_counter()
        program = load_program(folder)
        state, batch = program.init(), program.batch()
        jax.block_until_ready((state, batch))
        t1 = time.perf_counter()
        for _ in range(2):
            state, metrics = program.step(state, batch)
        jax.block_until_ready((state, metrics))
        t2 = time.perf_counter()
        for _ in range(100):
            state, metrics = program.step(state, batch)
        jax.block_until_ready((state, metrics))
        ms = (time.perf_counter() - t2) * 10
        synced = []
        for _ in range(100):
            s = time.perf_counter()
            state, metrics = program.step(state, batch)
            jax.block_until_ready((state, metrics))
            synced.append((time.perf_counter() - s) * 1e3)
        synced.sort()
        stats = d.memory_stats() or {}
        print(json.dumps({"case": folder, "load_init_s": t1 - t0, "warmup_s": t2 - t1, "ms_per_step": ms,
                          "p50": synced[50], "p10": synced[10], "p90": synced[90],
                          "loss": float(metrics["train/loss"]),
                          "peak": stats.get("peak_bytes_in_use"), "in_use": stats.get("bytes_in_use")}), flush=True)
        del state, batch, metrics, program
        print(json.dumps({"after_del_in_use": (d.memory_stats() or {}).get("bytes_in_use")}), flush=True)


def main() -> None:
    if sys.argv[1] == "--compile":
        print(json.dumps(compile_one(sys.argv[2], sys.argv[3]), default=str), flush=True)
        return
    if sys.argv[1] == "--hold":
        hold(sys.argv[2:])
        return
    out, archs = Path(sys.argv[1]), sys.argv[2:]
    print(json.dumps({"facts": facts()}), flush=True)
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "ALLOW_MULTIPLE_LIBTPU_LOAD": "1"}
    start = time.perf_counter()
    children = [
        subprocess.Popen([sys.executable, __file__, "--compile", arch, str(out / arch)], env=env,
                         stdout=subprocess.PIPE, stderr=open(out / f"{arch}.log", "w"), text=True)
        for arch in archs
    ]
    done = []
    for arch, child in zip(archs, children):
        text, _ = child.communicate()
        print(text.strip() or json.dumps({"arch": arch, "failed": child.returncode}), flush=True)
        if child.returncode == 0:
            done.append(str(out / arch))
    print(json.dumps({"compile_wall_s": time.perf_counter() - start}), flush=True)
    start = time.perf_counter()
    subprocess.run([sys.executable, __file__, "--hold", *done], check=False)
    print(json.dumps({"hold_wall_s": time.perf_counter() - start}), flush=True)


if __name__ == "__main__":
    main()
