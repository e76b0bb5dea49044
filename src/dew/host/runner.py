"""How a command runs: `engine run` in the image (the checkout's results and the XLA cache
mounted, as the image's own user), or, engine none, in the session's venv (Runner); and
the new results/runs/ directory each run writes into.
"""

from __future__ import annotations

import datetime
import os
import re
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from dew.bench.common import files  # standard library only
from dew.host.engine import (
    CACHE,
    IMAGE_ROOT,
    IMAGE_XLA_CACHE,
    ROOT,
    Engine,
    EngineError,
    git_commit,
    git_diff_sha256,
    host_run_flags,
)
from dew.host.image import Image

HAND_OVER = Path(__file__).resolve().with_name("handover.py")
# After a Ctrl-C, how long nox waits for the command to finish its own way out (the tool
# writes the rows it has, the container ends) before it terminates and then kills it; nox's
# own 0.3 s would cut that short.
STOP_GRACE_S = 60.0

_IMAGE_USERS: dict[str, tuple[int, int]] = {}


def image_user(engine: Engine, ref: str) -> tuple[int, int]:
    """The uid and gid of the image's USER (dew's image: dew, 10001)."""
    if ref not in _IMAGE_USERS:
        probe = engine("run", "--rm", *host_run_flags(engine, ref), "--network", "none", ref,
                       "sh", "-c", "id -u; id -g")  # fmt: skip
        ids = probe.stdout.split()
        if probe.returncode != 0 or len(ids) != 2 or not all(i.isdigit() for i in ids):
            raise EngineError(
                f"cannot read the user of {ref} (`id -u` in it: {probe.stderr.strip()})"
            )
        _IMAGE_USERS[ref] = (int(ids[0]), int(ids[1]))
    return _IMAGE_USERS[ref]


def user_flags(engine: Engine, image: Image) -> tuple[list[str], tuple[int, int] | None]:
    """How the container runs as the image's own non-root user, and whom the results
    written through the mounts must be handed back to (None: they already are the caller's).

    A root caller (rootful podman, docker): the image's user, with the directories the
    command writes into handed to it for the run and back to the caller afterwards.
    Rootless podman: the caller's id is mapped onto the image's user (keep-id). Docker
    without root maps nothing per container: there the caller's own (non-root) uid runs."""
    uid, gid = image_user(engine, image.ref)
    if os.geteuid() == 0:
        return ["--user", f"{uid}:{gid}"], (uid, gid)
    if engine.name == "podman":
        return ["--userns", f"keep-id:uid={uid},gid={gid}", "--user", f"{uid}:{gid}"], None
    return ["--user", f"{os.getuid()}:{os.getgid()}"], None


def run_argv(
    engine: Engine,
    image: Image,
    command: Sequence[str],
    *,
    env: Mapping[str, str] = (),
    mounts: Sequence[tuple[Path, str, str]] = (),
    gpu: bool = False,
    tpu: bool = False,
) -> list[str]:
    """`engine run` for one command in the image, with the checkout's results and the
    persistent XLA compilation cache at IMAGE_XLA_CACHE (the caller passes it to the tool,
    so the record's command shows it).

    The checkout's image holds the stack; the checkout's src/ and tools/ are mounted over
    the copies inside, so a reused image runs the code being benchmarked, and the run
    records the checkout's commit (and, when dirty, the hash of its diff). An image with a
    commit of its own (a materialised stack) runs its own code and records that commit.
    The container runs as the image's user; what it writes belongs to the caller (see
    user_flags)."""
    if image.commit is None:
        commit, dirty = git_commit()
        diff = git_diff_sha256() if dirty else None
    else:
        commit, dirty, diff = image.commit, False, None
    xla_cache = CACHE / "xla"
    xla_cache.mkdir(parents=True, exist_ok=True)
    results = ROOT / "results"
    results.mkdir(exist_ok=True)
    user, hand_back = user_flags(engine, image)
    argv = [engine.name, "run", "--rm", *host_run_flags(engine, image.ref), *user]
    # A TPU as Cloud TPU's documentation runs a container: privileged (the chips' device
    # nodes), on the host's network (libtpu asks the VM's metadata server for the topology).
    argv += ["--privileged", "--network", "host"] if tpu else ["--network", "none"]
    # The idle check must see the host's other processes; grain's workers share memory.
    argv += ["--pid=host", "--shm-size=8g"]
    if gpu:
        argv += engine.gpu_flags()
    volumes = []
    if image.commit is None:
        volumes += [(ROOT / "src", f"{IMAGE_ROOT}/src", "ro")]
        volumes += [(ROOT / "tools", f"{IMAGE_ROOT}/tools", "ro")]
    volumes += [
        (results, f"{IMAGE_ROOT}/results", "rw"),
        (xla_cache, IMAGE_XLA_CACHE, "rw"),
        *mounts,
    ]
    volumes = [(Path(host), inside, mode) for host, inside, mode in volumes if Path(host).exists()]
    for host, inside, mode in volumes:
        argv += ["-v", f"{host.resolve()}:{inside}:{mode}"]
    variables = {
        **image.labels_env(),
        "DEW_COMMIT": commit or "unknown",
        "DEW_DIRTY": "1" if dirty else "0",
        **({"DEW_DIFF_SHA256": diff} if diff else {}),
        "HOME": "/tmp",
        **dict(env),
    }
    for key, value in variables.items():
        argv += ["-e", f"{key}={value}"]
    argv += ["-w", IMAGE_ROOT, image.ref, *command]
    if hand_back:
        writable = [(host, inside) for host, inside, mode in volumes if mode == "rw"]
        written = written_dirs(command, writable)
        if written:
            owner = f"{hand_back[0]}:{hand_back[1]}"
            wrapper = [sys.executable, str(HAND_OVER), "hand-over", owner]
            argv = [*wrapper, *map(str, written), "--", *argv]
    return argv


def written_dirs(command: Sequence[str], volumes: Sequence[tuple[Path, str]]) -> list[Path]:
    """The host directories the command may write into: for every argument (or `--x=` value)
    inside a writable mount, that directory, or the nearest existing one above the file."""
    found: list[Path] = []
    for arg in command:
        for value in {arg, arg.partition("=")[2]} - {""}:
            for host, inside in volumes:
                if value != inside and not value.startswith(inside.rstrip("/") + "/"):
                    continue
                path = host.resolve() / value[len(inside) :].lstrip("/")
                while path != host.resolve() and not path.is_dir():
                    path = path.parent
                found.append(path)
    chosen = sorted(set(found), key=lambda p: len(p.parts))
    return [p for i, p in enumerate(chosen) if not any(p.is_relative_to(q) for q in chosen[:i])]


def to_image_path(host_path: Path) -> str:
    """Where a path under the checkout's results/ appears inside the container."""
    relative = Path(host_path).resolve().relative_to((ROOT / "results").resolve())
    return f"{IMAGE_ROOT}/results/{relative.as_posix()}"


def new_run_dir(preset: str, device: str) -> Path:
    """results/runs/<date>-<preset>-<device>-<commit>/, new for every run."""
    commit, dirty = git_commit()
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    short = (commit or "nocommit")[:7] + ("-dirty" if dirty else "")
    device = re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-")
    run_dir = ROOT / "results" / "runs" / f"{stamp}-{preset}-{device}-{short}"
    run_dir.mkdir(parents=True)
    return run_dir


class Runner:
    """Runs `python ...` from the checkout root: in the image, or (engine none) in the
    session's venv, or with `interpreter` (the command that stands for `python`: another
    Python on the host). Paths under results/ are given as host paths and mapped."""

    def __init__(
        self, session, engine=None, image=None, gpu=False, mounts=(), interpreter=None, tpu=False
    ):
        self.session, self.engine, self.image = session, engine, image
        self.gpu, self.tpu, self.mounts = gpu, tpu, list(mounts)
        self.interpreter = list(interpreter or ["python"])

    def path(self, host_path: Path) -> str:
        if self.engine is None:
            return str(host_path)
        return to_image_path(host_path)

    def python(
        self, *args: str, env=None, stdout_to: Path | None = None, success_codes=(0,)
    ) -> None:
        env = dict(env or {})
        if self.engine is None:
            argv, run_env = [*self.interpreter, *args], env
        else:
            argv = run_argv(
                self.engine, self.image, ["python", *args], env=env, gpu=self.gpu,
                tpu=self.tpu, mounts=self.mounts,
            )  # fmt: skip
            run_env = None
        kwargs = dict(env=run_env, external=True, success_codes=list(success_codes),
                      interrupt_timeout=STOP_GRACE_S)  # fmt: skip
        if stdout_to is None:
            self.session.run(*argv, **kwargs)
            return
        # The tool's table goes to stdout, progress to stderr: keep the table, show both.
        with tempfile.TemporaryFile("w+") as captured:
            self.session.run(*argv, stdout=captured, stderr=sys.stderr, **kwargs)
            captured.seek(0)
            table = captured.read()
        files.atomic_write(stdout_to, table)
        print(table)
