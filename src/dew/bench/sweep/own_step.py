"""A step that is not a model: `--step MODULE:FACTORY`, timed like dew's own cases.

The user's factory, called as `FACTORY(batch=B)`, returns `(step, state, batch)` or
`(step, state, batch, state_sharding)`: `step` a `jax.jit`-wrapped `step(state, batch) ->
(state, metrics)`, `state` and `batch` pytrees of jax or numpy arrays, `state_sharding` a
pytree of `jax.sharding.Sharding` matching `state` (or one Sharding for all of it). In the
case's process (dew.bench.sweep.case_run.prepare):

    import MODULE, call FACTORY (phase "init") -> check what it returned -> the state on
    its sharding, numpy leaves on the default device -> step.lower(state, batch) (phase
    "trace_lower") -> compile (timed, dew's persistent-cache rule) -> FLOPs, fingerprint
    and memory estimate of that executable (dew.bench.sweep.program_labels) -> state and
    batch placed as the executable takes them -> `OwnStep`, whose `step` is the compiled
    executable: the one timed is the one counted.

`params` of its row: the elements of the state's `params` (a key or an attribute) when it
has one, else of every floating-point leaf of the state (optimizer state included; the
row's note says so). `sample` and `tokens_per_s` stay null (dew cannot tell what a sample
is); `loss` is the metrics' "loss" when it is one number.

Bad input (`StepFactoryError`, one line naming the factory) is refused before any case:
`check` runs the same loading, checking and lowering in one fresh process with the cases'
environment (the run's parent never starts a JAX backend), so a module that fails to
import, a missing factory, one that raises or returns the wrong things ends the run with
exit 2 and no case of dew's own runs either.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dew.bench.common.cli import UsageError, one_line
from dew.bench.runtime import protocol
from dew.bench.runtime.phases import PhaseClock
from dew.bench.sweep.presets import Case
from dew.bench.sweep.program_labels import compile_and_label
from dew.bench.sweep.settings import (
    Options,
    append_xla_flags,
    case_deadlines,
    compilation_cache,
)

CHECK = "from dew.bench.sweep.own_step import check_main; check_main()"  # the check's code
RETURNS = "(step, state, batch) or (step, state, batch, state_sharding)"
ALL_FLOATS = (
    "params counts every floating-point leaf of the state (it has no `params`), "
    "optimizer state included"
)


class StepFactoryError(ValueError):
    """What is wrong with a step factory, in one line naming it."""

    def __init__(self, spec: str, what: str):
        super().__init__(f"--step {spec}: {what}")


@dataclasses.dataclass
class Built:
    """What a factory returned, checked."""

    step: Any
    state: Any
    batch: Any
    sharding: Any = None


@dataclasses.dataclass(frozen=True)
class OwnStep:
    """What case_run.measure times a step of the user's with: `step(state, batch)`, the
    compiled executable."""

    step: Callable[[Any, Any], tuple[Any, Any]]


@dataclasses.dataclass(frozen=True)
class Checked(protocol.Message):
    """The check's answer (dew.bench.runtime.protocol): None, or what is wrong."""

    error: str | None


# --- the factory: imported, called, what it returned checked --------------------------------


def load(spec: str, batch: int) -> Built:
    """Import MODULE (the working directory on the path, as `python -m` has it) and call
    FACTORY(batch=batch); StepFactoryError for anything wrong up to what it returned."""
    module_name, _, name = spec.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except (Exception, SystemExit) as error:
        raise StepFactoryError(
            spec,
            f"cannot import {module_name}: {one_line(error, typed=True)} (is it installed, or "
            "its folder on PYTHONPATH?)",
        ) from None
    factory = getattr(module, name, None)
    if factory is None:
        raise StepFactoryError(spec, f"module {module_name} has no {name}")
    if not callable(factory):
        raise StepFactoryError(
            spec, f"{name} is {a(type(factory).__name__)}, not a factory returning {RETURNS}"
        )
    call = f"{name}(batch={batch})"
    try:
        returned = factory(batch=batch)
    except Exception as error:
        raise StepFactoryError(spec, f"{call} raised {one_line(error, typed=True)}") from None
    return checked(spec, call, returned)


def a(noun: str) -> str:
    """`noun` with its article: "an int", "a str"."""
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


def checked(spec: str, call: str, returned: Any) -> Built:
    """What `call` returned, as a Built; StepFactoryError saying what is wrong with it."""
    import jax

    if not isinstance(returned, tuple) or len(returned) not in (3, 4):
        what = a(type(returned).__name__)
        what += f" of {len(returned)}" if isinstance(returned, tuple | list) else ""
        raise StepFactoryError(spec, f"{call} returned {what}; it must return {RETURNS}")
    built = Built(*returned)
    if not callable(built.step):
        raise StepFactoryError(
            spec, f"its step is {a(type(built.step).__name__)}, not a jax.jit-wrapped function"
        )
    if not callable(getattr(built.step, "lower", None)):
        raise StepFactoryError(
            spec,
            "its step is not jax.jit-wrapped (dew compiles it ahead of time, "
            "step.lower(state, batch).compile()): return jax.jit(step)",
        )
    for what in ("state", "batch"):
        _arrays_only(spec, what, getattr(built, what))
    if built.sharding is not None and not isinstance(built.sharding, jax.sharding.Sharding):
        _matching_sharding(spec, built.state, built.sharding)
    return built


def _arrays_only(spec: str, what: str, tree: Any) -> None:
    import jax
    import numpy as np

    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        if not isinstance(leaf, jax.Array | np.ndarray | np.generic):
            where = jax.tree_util.keystr(path) or "its root"
            raise StepFactoryError(
                spec,
                f"its {what} holds {a(type(leaf).__name__)} at {where}; state and batch must "
                "be pytrees of jax or numpy arrays",
            )


def _matching_sharding(spec: str, state: Any, sharding: Any) -> None:
    import jax

    def is_sharding(node: Any) -> bool:
        return isinstance(node, jax.sharding.Sharding)

    tree = jax.tree_util.tree_flatten_with_path(sharding, is_leaf=is_sharding)[0]
    for path, leaf in tree:
        if not is_sharding(leaf):
            raise StepFactoryError(
                spec,
                f"its state_sharding holds {a(type(leaf).__name__)} at "
                f"{jax.tree_util.keystr(path) or 'its root'}, not a jax.sharding.Sharding",
            )
    if jax.tree.structure(sharding, is_leaf=is_sharding) != jax.tree.structure(state):
        paths = [jax.tree_util.keystr(path) for path, _ in tree]
        leaves = [
            jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(state)[0]
        ]
        missing = [path for path in leaves if path not in paths]
        extra = [path for path in paths if path not in leaves]
        where = (
            f"the state has {missing[0]}, the sharding has not"
            if missing
            else f"the sharding has {extra[0]}, the state has not"
            if extra
            else "their containers differ"
        )
        raise StepFactoryError(
            spec,
            f"its state_sharding does not match its state ({where}): give one "
            "jax.sharding.Sharding per state leaf, in the state's structure",
        )


# --- placed, lowered, compiled ---------------------------------------------------------------


def placed(spec: str, built: Built) -> tuple[Any, Any]:
    """The state on its sharding (if given) and numpy leaves on the default device, so that
    no step pays a transfer from the host."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    def on_device(tree: Any) -> Any:
        return jax.tree.map(
            lambda x: jnp.asarray(x) if isinstance(x, np.ndarray | np.generic) else x, tree
        )

    state = on_device(built.state)
    if built.sharding is not None:
        try:
            state = jax.device_put(state, built.sharding)
        except Exception as error:
            raise StepFactoryError(
                spec, f"its state does not fit its state_sharding: {one_line(error, typed=True)}"
            ) from None
    return state, on_device(built.batch)


def lowered(spec: str, step: Any, state: Any, batch: Any):
    """`step.lower(state, batch)`, checked: it returns (state, metrics), its new state the
    shapes and dtypes of the one it took (every step takes the one before's)."""
    import jax

    try:
        lowered = step.lower(state, batch)
    except Exception as error:
        raise StepFactoryError(
            spec, f"step(state, batch) fails to trace: {one_line(error, typed=True)}"
        ) from None
    out = lowered.out_info
    if not isinstance(out, tuple) or len(out) != 2:
        what = a(type(out).__name__) + (f" of {len(out)}" if isinstance(out, tuple | list) else "")
        raise StepFactoryError(spec, f"its step returns {what}; it must return (state, metrics)")

    def layout(tree: Any) -> list[tuple[str, tuple, str]]:
        flat = jax.tree_util.tree_flatten_with_path(tree)[0]
        return [(jax.tree_util.keystr(p), tuple(x.shape), str(x.dtype)) for p, x in flat]

    took, gave = layout(state), layout(out[0])
    if jax.tree.structure(state) != jax.tree.structure(out[0]) or took != gave:
        first = next(
            (
                f"{a[0]} {a[2]}{list(a[1])} -> {b[0]} {b[2]}{list(b[1])}"
                for a, b in zip(took, gave, strict=False)
                if a != b
            ),
            f"{len(took)} leaves -> {len(gave)}",
        )
        raise StepFactoryError(
            spec,
            f"the state its step returns is not the state it takes ({first}); each step "
            "takes the state the one before returned",
        )
    return lowered


def prepare(
    case: Case, options: Options, figures: Any, clock: PhaseClock
) -> tuple[OwnStep, Any, Any, list[Any]]:
    """The case's step built and compiled: (OwnStep, state, batch, devices); the state and
    batch None with --compile-only. Writes the row's fields on `figures` (a case_run
    Figures) as it learns them."""
    import jax

    from dew.train.trainer import compile_timed, configure_compilation_cache

    spec = case.step
    assert spec is not None
    figures.batch = case.batch
    with clock.phase("init"):  # the module's imports and the factory: the state's making
        built = load(spec, case.batch)
        figures.params, note = param_count(built.state)
        figures.note = note
        state, batch = jax.block_until_ready(placed(spec, built))
    configure_compilation_cache(compilation_cache(options))
    with clock.phase("trace_lower"):
        lowering = lowered(spec, built.step, state, batch)
    compiled = compile_and_label(lambda: compile_timed(lowering), figures, clock)
    takes, gives = compiled.input_shardings[0], compiled.output_shardings
    devices = (
        sorted(
            {d for s in jax.tree.leaves((takes, gives)) for d in s.device_set}, key=lambda d: d.id
        )
        or jax.local_devices()[:1]
    )  # a step of no arrays runs on the default device
    _same_layout(spec, state, takes[0], gives[0])
    if options.compile_only:
        return OwnStep(compiled), None, None, devices
    state, batch = jax.block_until_ready((_on(state, takes[0]), _on(batch, takes[1])))
    return OwnStep(compiled), state, batch, devices


def _on(tree: Any, shardings: Any) -> Any:
    """`tree` placed as the executable takes it (a None sharding: an argument it does not
    read, left where it is): no call then moves an array."""
    import jax

    leaves, structure = jax.tree.flatten(tree)
    wanted = jax.tree.leaves(shardings, is_leaf=lambda node: node is None)
    if len(wanted) != len(leaves):
        return tree
    return structure.unflatten(
        [x if s is None else jax.device_put(x, s) for x, s in zip(leaves, wanted, strict=True)]
    )


def _same_layout(spec: str, state: Any, takes: Any, gives: Any) -> None:
    """The executable returns the state laid out as it takes it: else the second step could
    not take the first one's state."""
    import jax

    took = jax.tree.leaves(takes, is_leaf=lambda node: node is None)
    gave = jax.tree.leaves(gives, is_leaf=lambda node: node is None)
    for leaf, take, give in zip(jax.tree.leaves(state), took, gave, strict=False):
        if take is None or give is None or take == give:
            continue
        if not take.is_equivalent_to(give, leaf.ndim):
            raise StepFactoryError(
                spec,
                f"its compiled step returns the state laid out as {give}, not as it takes "
                f"it ({take}): jit the step with out_shardings=(state_sharding, ...)",
            )


def param_count(state: Any) -> tuple[int, str | None]:
    """The row's `params` (module docstring) and the note when it counts the whole state."""
    import jax
    import jax.numpy as jnp

    params = state.get("params") if isinstance(state, Mapping) else getattr(state, "params", None)
    tree = state if params is None else params
    count = sum(
        int(leaf.size) for leaf in jax.tree.leaves(tree) if jnp.issubdtype(leaf.dtype, jnp.floating)
    )
    return count, ALL_FLOATS if params is None else None


# --- the whole run's check, before any case ---------------------------------------------------


def check(cases: Sequence[Case], options: Options) -> None:
    """Refuse the run (UsageError, one line) when a step case's factory is wrong: loaded,
    checked and lowered in one fresh process with the cases' environment."""
    steps = sorted({(case.step, case.batch) for case in cases if case.step is not None})
    if not steps:
        return
    environment = dict(os.environ)
    append_xla_flags(environment, options.xla_flags)
    argv = [sys.executable, "-c", CHECK, json.dumps(steps)]
    with protocol.spawn("the --step check", argv, env=environment) as child:
        try:
            answer = child.receive(
                Checked,
                phase="checking --step",
                deadline=case_deadlines(options)[0],
                waiting_for="its factory's step, state and batch",
            )
        except protocol.ChildFailed as failed:
            names = " ".join(spec for spec, _ in steps)
            raise UsageError(f"--step {names}: {failed}") from None
    if answer.error is not None:
        raise UsageError(answer.error)


def check_main() -> None:
    """The check's process: every (spec, batch) of argv[1] loaded and lowered; the first
    error, or None, to its parent."""
    parent = protocol.ToParent.from_environment()
    error = None
    try:
        for spec, batch in json.loads(sys.argv[1]):
            built = load(spec, batch)
            lowered(spec, built.step, *placed(spec, built))
    except StepFactoryError as wrong:
        error = str(wrong)
    parent.send(Checked(error))
