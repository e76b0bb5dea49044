"""A stack, and what differs between two: the commit, the device, the driver, the packages,
the container, the environment flags, the JAX config and the settings, read from a record's
JSON (plain dicts).

The one notion of a stack's identity and differences, for every reader:
- `stack_identity(a, b)`: what must be equal for rows to share one record (--resume),
  and `identity_differences(a, b)`: what of it differs, one line each;
- `stack_differences(run, ref)`: compare's first table, and what only one side recorded
  (the outside packages' versions among the packages, their commits on their own lines);
- `rebuild_differences(environment, image, gpu_here)`: what of a record's stack a rebuilt
  image and this host do not match (`nox -s reproduce`);
- `stack_parts(record, commit_here)`: which parts of a record's stack a clone can match;
- `recorded_variant(record)`, `host_stack(record)` (a TPU host's), `package_differences(recorded,
  here)`.

Standard library only (dew.platforms is plain data): the noxfile and docker/ use it before
any environment exists. A
record is its JSON; a pydantic record is dumped to it at the door (`_plain`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

from dew import platforms

NOT_RECORDED = "not recorded"  # a field the older record lacks, as every table shows it
# The container fields compare lists, and those a rebuilt image is held against.
COMPARED_CONTAINER = ("engine", "image_id", "base_image_digest", "lock_sha256")
REBUILT_CONTAINER = ("lock_sha256", "dockerfile_sha256", "variant", "base_image_digest")
# The settings whose difference makes two records' rows measure different things.
COMPARED_SETTINGS = ("preset", "steps", "warmup", "dtype", "mesh", "optimizer")
# The tool's other flags (settings.options) that move no figure: where logs and traces go
# (a trace's steps run after the timed ones) and how long a case may take.
UNTIMED_OPTIONS = ("log_dir", "case_timeout", "profile_dir")


@dataclasses.dataclass
class StackDifference:
    what: str
    run: str
    reference: str


def _show(value) -> str:
    if value is None:
        return NOT_RECORDED
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in sorted(value.items())) or "{}"
    return str(value)


def _at(mapping: Any, *path: str) -> Any:
    """mapping[path[0]][path[1]]...; None where a step is missing or null."""
    for key in path:
        if not isinstance(mapping, dict):
            return None
        mapping = mapping.get(key)
    return mapping


def _plain(part: Any) -> dict:
    """A record's part as its JSON: a dict as it is, a pydantic model dumped."""
    if hasattr(part, "model_dump"):
        return part.model_dump(mode="json")
    return part or {}


def _parts(record: Any) -> tuple[dict, dict]:
    """(environment, settings) of a record: its JSON, or a pydantic record."""
    if isinstance(record, dict):
        return _plain(record.get("environment")), _plain(record.get("settings"))
    return _plain(record.environment), _plain(record.settings)


# The CUDA plugin and its CUDA library wheels (jax-cuda13-plugin, nvidia-cublas, ...): a
# record lists every installed distribution whose normalised name starts so (capture), so a
# library a new lock brings in is named without a change; cuda-smoke checks them.
CUDA_PREFIXES = ("jax-cuda", "nvidia-")


def same_device(a: str, b: str) -> bool:
    """'NVIDIA GeForce RTX 4080' and 'RTX 4080' name the same card."""
    x, y = (re.sub(r"nvidia|geforce|[\s_-]", "", kind.lower()) for kind in (a, b))
    return x in y or y in x


def _same_commit(a: str, b: str) -> bool:
    """A short hash and the full one agree."""
    return a.startswith(b) or b.startswith(a)


# --- one record's stack --------------------------------------------------------------------


def stack_identity(a: dict, b: dict) -> list[tuple[str, Any, Any]]:
    """What must be equal for two sets of rows to share one record's environment: (what,
    a's, b's) for two environments (a record's `environment`)."""

    def identity(env: dict) -> dict[str, Any]:
        devices = env.get("devices")
        return {
            "device": None if devices is None else
            (devices.get("platform"), devices.get("kind"), devices.get("count")),
            "driver": env.get("driver_version"),
            "commit": _at(env, "code", "commit"),
            "package set": env.get("packages"),
            "python": env.get("python"),
            "libtpu": _at(env, "backend", "libtpu"),
            "set of environment flags": env.get("env_flags"),
            "outside code": outside_commits(env) or None,
        }  # fmt: skip

    ia, ib = identity(a), identity(b)
    return [(what, ia[what], ib[what]) for what in ia]


def identity_differences(a: dict, b: dict) -> list[str]:
    """What differs between two environments' identities (stack_identity), one short line
    each, the thing that differs named first: a package set, the environment flags and
    the outside code by the package, flag or commit that differs, never their whole
    lists (a refusal that printed both lists was cut before the package that differed)."""
    lines = []
    for what, then, here in stack_identity(a, b):
        if then == here:
            continue
        if what == "outside code":
            then, here = then or {}, here or {}
            for name in sorted(set(then) | set(here)):
                (ca, da), (cb, db) = then.get(name, (None, None)), here.get(name, (None, None))
                if not (ca and cb and _same_commit(ca, cb)) and ca != cb:
                    lines.append(
                        f"outside {name} commit: {_short(ca) or 'none'} -> {_short(cb) or 'none'}"
                    )
                if da != db:
                    lines.append(f"outside {name} dirty tree: {da} -> {db}")
        elif isinstance(then, dict) or isinstance(here, dict):
            label = {"package set": "package", "set of environment flags": "env"}.get(what, what)
            then, here = then or {}, here or {}
            for name in sorted(set(then) | set(here)):
                if then.get(name) != here.get(name):
                    absent = "unset" if label == "env" else "absent"
                    lines.append(
                        f"{label} {name}: {then.get(name, absent)} -> {here.get(name, absent)}"
                    )
        else:
            lines.append(f"{what}: {_show(then)} -> {_show(here)}")
    return lines


def outside_commits(environment: dict) -> dict[str, tuple[Any, Any]]:
    """The code from outside dew a run used (environment.outside_code): its distribution
    (or module) -> (commit, dirty). Versions are in `packages`, compared with them."""
    return {
        item.get("distribution") or item.get("module"): (item.get("commit"), item.get("dirty"))
        for item in environment.get("outside_code") or []
        if isinstance(item, dict)
    }


def distribution_name(name: str) -> str:
    """A distribution's name as the record's `packages` writes it (PEP 503:
    `Dew_Example` -> `dew-example`)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def outside_packages(environment: dict) -> dict[str, dict]:
    """The packages from outside dew a run used, by distribution: {version, commit, dirty}
    (a module no distribution holds is left out: nothing could install it again)."""
    found: dict[str, dict] = {}
    for item in environment.get("outside_code") or []:
        if isinstance(item, dict) and item.get("distribution"):
            found.setdefault(item["distribution"], {
                "version": item.get("version"), "commit": item.get("commit"),
                "dirty": item.get("dirty"),
            })  # fmt: skip
    return found


def outside_differences(environment: dict, given: list[dict]) -> tuple[list[str], list[str]]:
    """(missing, lines): the record's outside packages that `given` (each a distribution,
    version and commit, as installed for a rerun) lacks, and what of the rest differs,
    one line each."""
    recorded = outside_packages(environment)
    by_name = {item["distribution"]: item for item in given}
    missing = [
        name + "".join(f" {value}" for value in (want["version"], _short(want["commit"])) if value)
        for name, want in recorded.items()
        if name not in by_name
    ]
    lines = []
    for name, want in recorded.items():
        have = by_name.get(name)
        if have is None:
            continue
        if want["version"] and have.get("version") != want["version"]:
            given_version = have.get("version")
            lines.append(f"package {name}: the record's {want['version']}, given {given_version}")
        commit = have.get("commit")
        if want["commit"] and not (commit and _same_commit(want["commit"], commit)):
            lines.append(
                f"package {name} commit: the record's {_short(want['commit'])}, "
                f"given {_short(commit) or 'none (not built from a commit)'}"
            )
        if want["dirty"]:
            lines.append(f"package {name}: the record ran it from a dirty tree, not in the record")
    for name in sorted(by_name.keys() - recorded.keys()):
        lines.append(f"package {name}: given, but the record used no such package")
    for item in environment.get("outside_code") or []:
        if isinstance(item, dict) and not item.get("distribution"):
            lines.append(
                f"module {item.get('module')}: from no installed package, so no --outside gives "
                "it; the rerun finds it only if the commit's own tree holds it"
            )
    return missing, lines


def _short(commit: str | None) -> str:
    return commit[:7] if commit else ""


TPU_HOST = "tpu-host"  # a TPU host's own Python, jax, jaxlib and libtpu, and dew's bundle


def recorded_variant(record: dict) -> str | None:
    """The stack a record ran on: its container's lock (locks/<variant>.txt); outside one,
    its platform's (dew.platforms: `stack_variant`; a TPU host's own is TPU_HOST, the
    host's jax beside the bundle of locks/tpu-host.txt, host_stack; cuda13 for a GPU run,
    cpu for a CPU's); None for a platform dew has no stack of."""
    environment = record.get("environment") or {}
    container = environment.get("container") or {}
    platform = (environment.get("devices") or {}).get("platform") or ""
    if container.get("variant"):
        return container["variant"]
    return platforms.get(platform or None).stack_variant


def host_stack(record: dict) -> dict[str, str | None]:
    """A TPU host's stack as its record names it: the platform and device kind, the host's
    Python, jax, jaxlib and libtpu, the bundle's lock and hash (package_sources), dew's
    commit; what it did not record is None."""
    environment = record.get("environment") or {}
    packages = environment.get("packages") or {}
    locks = {(source or {}).get("lock") for source in
             (environment.get("package_sources") or {}).values()} - {None}  # fmt: skip
    devices = environment.get("devices") or {}
    return {
        "platform": devices.get("platform"), "device": devices.get("kind"),
        "python": environment.get("python"), "jax": packages.get("jax"),
        "jaxlib": packages.get("jaxlib"),
        "libtpu": (environment.get("backend") or {}).get("libtpu"),
        "bundle lock": ", ".join(sorted(locks)) or None,
        "commit": (environment.get("code") or {}).get("commit"),
    }  # fmt: skip


def host_stack_line(record: dict) -> str:
    """`a TPU host's own stack: Python 3.11.7, jax 0.10.2, ...`, what host_stack names."""
    stack = host_stack(record)
    parts = [f"{name} {value}" for name, value in stack.items()
             if value and name not in ("platform", "commit")]  # fmt: skip
    return "a TPU host's own stack: " + ", ".join(parts)


def stack_parts(record: dict, commit_here: Callable[[str], bool]) -> tuple[list[str], list[str]]:
    """Which parts of the record's stack a clone can match, and which not (one line each):
    what `nox -s reproduce` says before it runs or refuses. `commit_here(commit)` says
    whether the clone has the commit."""
    environment = record.get("environment") or {}
    code = environment.get("code") or {}
    container = environment.get("container") or {}
    settings = record.get("settings") or {}
    matched, unmatched = [], []
    commit = code.get("commit")
    if not commit:
        unmatched.append("commit: not recorded")
    elif not commit_here(commit):
        unmatched.append(f"commit {commit}: not in this clone")
    else:
        matched.append(f"commit {commit}: in this clone")
    if code.get("dirty"):
        unmatched.append("code: the tree was dirty; the change is not in the record")
    elif code.get("dirty") is None:
        unmatched.append("code: whether the tree was dirty is not recorded")
    if not container and recorded_variant(record) == TPU_HOST:
        matched.append(f"stack: {host_stack_line(record)}")
    elif not container:
        unmatched.append("container: none recorded (no image, lock hash, Dockerfile or base)")
    for name in ("lock_sha256", "dockerfile_sha256", "base_image_digest"):
        if container and not container.get(name):
            unmatched.append(f"container {name}: not recorded")
    if container.get("base_rebuild"):
        matched.append(f"base: {container['base_rebuild']}")
    packages = environment.get("packages") or {}
    if packages:
        pins = ", ".join(f"{k} {v}" for k, v in sorted(packages.items()) if v)
        matched.append(f"packages (as recorded, checkable against a lock): {pins}")
    steps = [
        f"{k}={settings[k]}" for k in ("preset", "steps", "warmup", "dtype") if settings.get(k)
    ]
    rows = len(record.get("rows") or [])
    if steps:
        matched.append(f"settings: {', '.join(steps)}, {rows} rows")
    devices = environment.get("devices") or {}
    if devices.get("kind"):
        matched.append(f"device: {devices['kind']} x{devices.get('count') or '?'} (your host's)")
    return matched, unmatched


# --- two stacks ------------------------------------------------------------------------------


def stack_differences(run: Any, ref: Any) -> tuple[list[StackDifference], list[str]]:
    """What differs between the two records' stacks, and what only one side recorded.
    Records as their JSON (dicts); a pydantic record is dumped first."""
    diffs: list[StackDifference] = []
    unknown: list[str] = []

    def known(what: str, a, b, same=lambda x, y: x == y) -> None:
        if a is None and b is None:
            return
        if a is None or b is None:
            unknown.append(what)
        elif not same(a, b):
            diffs.append(StackDifference(what, _show(a), _show(b)))

    (ea, sa), (eb, sb) = _parts(run), _parts(ref)
    known("commit", _at(ea, "code", "commit"), _at(eb, "code", "commit"), _same_commit)
    known("dirty tree", _at(ea, "code", "dirty"), _at(eb, "code", "dirty"))
    known("device", _at(ea, "devices", "kind"), _at(eb, "devices", "kind"), same_device)
    known("device count", _at(ea, "devices", "count"), _at(eb, "devices", "count"))
    close = lambda x, y: abs(x - y) < 0.5  # GiB as a tool or a spec sheet rounds them
    memory = [_at(env, "devices", "memory_gib") for env in (ea, eb)]
    known("device memory GiB", *memory, close)
    known("driver", ea.get("driver_version"), eb.get("driver_version"))
    known("CUDA", ea.get("cuda_version"), eb.get("cuda_version"))
    known("cuDNN", ea.get("cudnn_version"), eb.get("cudnn_version"))
    known("python", ea.get("python"), eb.get("python"))
    known("libtpu", _at(ea, "backend", "libtpu"), _at(eb, "backend", "libtpu"))
    bundles = [host_stack({"environment": env})["bundle lock"] for env in (ea, eb)]
    known("bundle lock", *bundles)
    # A record without the lock ran with the card's own clocks (--lock-clocks off).
    clocks = [(_at(env, "locked_clocks", "mode") or "off") for env in (ea, eb)]
    known("GPU clocks locked", *clocks)
    pa, pb = ea.get("packages") or {}, eb.get("packages") or {}
    for name in sorted(set(pa) | set(pb)):
        known(f"package {name}", pa.get(name), pb.get(name))
    oa, ob = outside_commits(ea), outside_commits(eb)
    for name in sorted(set(oa) | set(ob)):  # the user's code, where a git tree names it
        (ca, da), (cb, db) = oa.get(name, (None, None)), ob.get(name, (None, None))
        known(f"outside {name} commit", ca, cb, _same_commit)
        known(f"outside {name} dirty tree", da, db)
    for field in COMPARED_CONTAINER:
        known(f"container {field}", _at(ea, "container", field), _at(eb, "container", field))
    # Env flags: a flag set on one side and unset (or unrecorded) on the other is a
    # difference in how the run ran, so every one is listed.
    fa, fb = ea.get("env_flags"), eb.get("env_flags")
    if fa is not None or fb is not None:
        for name in sorted(set(fa or {}) | set(fb or {})):
            a = (fa or {}).get(name, "unset" if fa is not None else NOT_RECORDED)
            b = (fb or {}).get(name, "unset" if fb is not None else NOT_RECORDED)
            if a != b:
                diffs.append(StackDifference(f"env {name}", a, b))
    ja, jb = ea.get("jax_config") or {}, eb.get("jax_config") or {}
    for name in sorted(set(ja) & set(jb)):
        known(f"jax config {name}", ja[name], jb[name])
    for field in COMPARED_SETTINGS:
        a, b = sa.get(field), sb.get(field)
        if a is not None and b is not None and a != b:
            diffs.append(StackDifference(f"setting {field}", _show(a), _show(b)))
    diffs += options_differences(sa.get("options") or {}, sb.get("options") or {})
    return diffs, unknown


def options_differences(a: dict, b: dict) -> list[StackDifference]:
    """The tool's other flags (settings.options: --xla-flags, --allocator, the compilation
    cache, ...) that differ, as `option NAME`; a cache is named by whether one was used,
    not by its folder (each run has its own)."""

    def shown(options: dict, name: str) -> str:
        value = options.get(name)
        if name == "compilation_cache_dir" and value not in (None, "off"):
            return "a folder"
        return "unset" if value is None else str(value)

    names = sorted((set(a) | set(b)) - set(UNTIMED_OPTIONS))
    return [
        StackDifference(f"option {name}", shown(a, name), shown(b, name))
        for name in names
        if shown(a, name) != shown(b, name)
    ]


def rebuild_differences(
    environment: dict, image: dict, gpu_here: Callable[[], tuple[str, str]]
) -> list[str]:
    """What of a record's stack (its `environment`) a rebuilt image and this host do not
    match, one line each. `image` is the image's part of environment.container
    (REBUILT_CONTAINER); `gpu_here()` the (name, driver) of this host's GPU, "" for none,
    asked only when the record ran on a GPU."""
    lines = []
    container = environment.get("container") or {}
    if not container:
        lines.append("the record ran outside any image: the lock and Dockerfile are its commit's")
    for name in REBUILT_CONTAINER:
        recorded, value = container.get(name), image.get(name)
        if recorded and value and recorded != value:
            lines.append(f"{name}: the record's {recorded[:24]}, the image's {value[:24]}")
    devices = environment.get("devices") or {}
    if platforms.get(devices.get("platform")).nvml:
        name, driver = gpu_here()
        if devices.get("kind") and devices["kind"].lower() not in name.lower():
            lines.append(f"GPU: the record ran on {devices['kind']}, here {name or 'none'}")
        if environment.get("driver_version") and environment["driver_version"] != driver:
            lines.append(
                f"driver: the record's {environment['driver_version']}, here {driver or 'none'}"
            )
    return lines


def package_differences(recorded: list[str] | None, here: list[str] | None) -> list[str]:
    """`name: recorded -> here` for every package that differs between two name=version
    lists (a base's packages)."""

    def versions(items):
        return dict(item.partition("=")[::2] for item in items or [])

    a, b = versions(recorded), versions(here)
    return [
        f"{name}: {a.get(name, 'absent')} -> {b.get(name, 'absent')}"
        for name in sorted(set(a) | set(b))
        if a.get(name) != b.get(name)
    ]
