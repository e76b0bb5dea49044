"""`nox -s bench-data`: the loader benchmark on a prepared oxford_flowers102 directory, in
the cpu image (the directory mounted read-only as /data) when an engine and a base answer,
else in the session's venv from locks/dev.txt."""

from __future__ import annotations

import os
import pathlib

from dew.host.benchmarks import (
    build_image,
    choose_engine,
    data_path_flag,
    loader_benchmark,
    resolve_base,
    session_flags,
)
from dew.host.runner import Runner, new_run_dir
from dew.host.venvs import install_locked


def bench_data(session) -> None:
    """The session: `-- --data.path DIR [benchmark_data.py flags]`."""
    own, args = session_flags(
        "bench-data", session.posargs, data_path_flag, tool="tools/benchmark_data.py"
    )
    data_path = own.data_path
    if not data_path or not pathlib.Path(data_path).is_dir():
        session.error(
            f"--data.path {data_path or '(missing)'} is not a directory: give a prepared "
            "oxford_flowers102 version directory (tools/prepare_dataset.py --source DIR "
            "--out DIR; a --synthetic set runs as data:synthetic-images)"
        )
    engine = choose_engine(session)
    base = resolve_base(session, engine, os.environ.get("DEW_BASE_IMAGE")) if engine else None
    if engine is None or base is None:
        session.log("no container engine or base: running in a nox venv from locks/dev.txt")
        install_locked(session)
        runner, inside = Runner(session), str(pathlib.Path(data_path).resolve())
    else:
        mounts = [(pathlib.Path(data_path), "/data", "ro")]
        image = build_image(session, engine, "cpu", base)
        runner, inside = Runner(session, engine, image, mounts=mounts), "/data"
    flowers = ["data:oxford-flowers", "--data.path", inside]
    loader_benchmark(runner, new_run_dir("data", "cpu"), flowers, args=args)
