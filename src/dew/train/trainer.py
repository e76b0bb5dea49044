"""The Trainer: where model, objective, optimizer, mesh and batch meet.

    trainer = Trainer("simple_dit", preset="small", mesh=MeshSpec(fsdp=8))
    state = trainer.init()                         # params, adam state, EMA, step; sharded
    batch = trainer.example_batch(16)              # one host batch (numpy default_rng(0))
    trainer.compile(batch)                         # ahead of time; .compiled, .compile_seconds
    state, metrics = trainer.step(state, batch)    # the compiled step, state donated

The step is one jitted function of (state, batch): objective loss, gradients, adam update,
EMA update. It is lowered and compiled ahead of time from abstract shapes, so a small
preset model can be compiled (for its FLOPs and memory analysis) without being run.
"""

from __future__ import annotations

import functools
import os
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

from dew.config import ATTENTION_IMPLS, DTYPES, AttentionImpl, Dtype, ModelConfig
from dew.models import registry
from dew.models.layers.text_condition import CharTable
from dew.train.mesh import MeshSpec, batch_shardings, state_shardings
from dew.train.objectives import get_objective
from dew.train.state import TrainState, count_params

LEARNING_RATE = 1e-4
DEFAULT_CACHE = "default"
# The initial state is computed once: a cheap compile matters more than a fast executable.
INIT_COMPILER_OPTIONS = {"xla_backend_optimization_level": 0}
# A state up to this size is computed on one device and then placed into its shardings
# (Trainer.init); a larger one is computed in place, sharded.
ONE_DEVICE_INIT_BYTES = 1024**3


def default_compilation_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "dew" / "jax"


def configure_compilation_cache(path: str | os.PathLike | None) -> None:
    """Turn JAX's persistent compilation cache on at `path` (DEFAULT_CACHE: dew's own,
    default_compilation_cache_dir; every executable cached), or off (None)."""
    if path is None:
        jax.config.update("jax_enable_compilation_cache", False)
        return
    if path == DEFAULT_CACHE:
        path = default_compilation_cache_dir()
    path = str(Path(path).expanduser())
    if jax.config.jax_compilation_cache_dir != path:
        Path(path).mkdir(parents=True, exist_ok=True)
        jax.config.update("jax_compilation_cache_dir", path)
        _reset_cache()
    jax.config.update("jax_enable_compilation_cache", True)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


# The persistent cache's hit events of the current compile (jax.monitoring): on a hit JAX
# reports the compile time the entry saved (the original compile's, minus the read).
_CACHE_EVENTS: dict[str, float] = {}


def _record_cache_event(event: str, duration: float, **_: object) -> None:
    if event.startswith("/jax/compilation_cache/"):
        _CACHE_EVENTS[event] = duration


jax.monitoring.register_event_duration_secs_listener(_record_cache_event)


def compile_timed(lowered: jax.stages.Lowered) -> tuple[jax.stages.Compiled, float, float | None]:
    """Compile `lowered`: (the executable, the compile's seconds, the load's seconds or None).
    From the persistent cache, the compile's seconds are the original compile's as the cache
    keeps it (JAX stores whole seconds, truncated) and the load's the read; compiled here,
    the load's are None."""
    _CACHE_EVENTS.clear()
    start = time.perf_counter()
    compiled = lowered.compile()
    seconds = time.perf_counter() - start
    original = _CACHE_EVENTS.get("/jax/compilation_cache/compile_time_saved_sec")
    retrieval = _CACHE_EVENTS.get("/jax/compilation_cache/cache_retrieval_time_sec")
    if original is None:
        return compiled, seconds, None
    return compiled, original + (retrieval or 0.0), seconds


def _reset_cache() -> None:
    # JAX opens the cache once per process; a new directory needs it reopened.
    try:
        from jax._src import compilation_cache

        compilation_cache.reset_cache()
    except (ImportError, AttributeError):  # private API; a missing reset only delays the change
        pass


class Trainer:
    """Builds one architecture with one objective and compiles its train step.

    architecture: a registry name (`dew.models.registry.names()`); config: that
    architecture's config (default: its `preset`); objective: default the config's own;
    dtype: compute dtype (params, optimizer state, losses and softmax stay fp32);
    condition_in_state: the CharTable is a leaf of the state (True: counted, carried, its
    gradient stopped as in the 2026-09-05 figures) or a constant of the executable (False);
    compilation_cache_dir: JAX's persistent cache ("default": under the XDG cache dir;
    None: off); attention_impl: "xla", "cudnn" or "auto"; devices: the mesh's devices
    (default jax.devices(); a TPU topology's devices compile for a chip this process does
    not hold: dew.train.executables).
    """

    def __init__(
        self,
        architecture: str,
        config: ModelConfig | None = None,
        *,
        preset: str = "small",
        objective: str | None = None,
        dtype: Dtype = "bfloat16",
        mesh: MeshSpec | None = None,
        condition_in_state: bool = False,
        compilation_cache_dir: str | os.PathLike | None = DEFAULT_CACHE,
        attention_impl: AttentionImpl = "xla",
        learning_rate: float = LEARNING_RATE,
        seed: int = 0,
        devices: list[jax.Device] | None = None,
    ):
        arch = registry.get(architecture)
        if dtype not in DTYPES:
            raise ValueError(f"unknown dtype {dtype!r}; valid: {', '.join(DTYPES)}")
        if attention_impl not in ATTENTION_IMPLS:
            raise ValueError(
                f"unknown attention_impl {attention_impl!r}; valid: {', '.join(ATTENTION_IMPLS)}"
            )
        config = arch.config_cls.preset(preset) if config is None else config
        if not isinstance(config, arch.config_cls):
            raise TypeError(
                f"{architecture} needs a {arch.config_cls.__name__}, got {type(config).__name__}"
            )
        config = _with_settings(config, dtype=dtype, attention_impl=attention_impl)
        configure_compilation_cache(compilation_cache_dir)

        self.architecture, self.config, self.seed = architecture, config, seed
        self.objective = get_objective(objective or type(config).objective)(config)
        self.mesh_spec = mesh or MeshSpec()
        self.mesh = self.mesh_spec.build(devices)
        self.optimizer = optax.adam(learning_rate)

        self._build_model = lambda: arch.module_cls(config, rngs=nnx.Rngs(seed))

        # The Trainer, not the model, holds the caption table. In the state it is there for
        # every architecture, used or not: the 2026-09-05 table counts its 99,840 parameters
        # for the decoder too.
        condition = CharTable(config.text_width, in_state=condition_in_state, seed=seed)
        self.condition_graphdef, self._condition_params = nnx.split(condition, nnx.Param)

        # One trace of the initial state gives the model's graphdef, the state's shapes and
        # shardings, and the program `init` compiles: every trace builds the whole model.
        self._init_traced = jax.jit(self._init_state).trace(self._condition_params)
        self.abstract_state = self._init_traced.out_info
        self.state_shardings = state_shardings(
            self.abstract_state, self.mesh, self.mesh_spec.min_shard_size
        )
        self._init = None
        self.compiled = None
        self.compile_seconds: float | None = None
        self.loaded_from_cache = False
        self.load_seconds: float | None = None
        self._batch_shardings = None
        self._flops: float | None = None
        self._last_step_end: float | None = None

    # -- state ---------------------------------------------------------------------------

    def _init_state(self, condition_params) -> TrainState:
        model = self._build_model()
        # The graphdef is static structure, the same at every trace: kept for the step.
        self.graphdef, model_params, rest = nnx.split(model, nnx.Param, ...)
        if jax.tree.leaves(rest):
            raise TypeError(
                f"{self.architecture} holds non-parameter state; models may hold only Params"
            )
        params = {"model": model_params, "condition": condition_params}
        return TrainState(
            step=jnp.zeros((), jnp.int32),
            params=params,
            opt_state=self.optimizer.init(params),
            ema=self.objective.init_ema(model_params),
        )

    def init(self) -> TrainState:
        """The initial state, in its shardings.

        It runs once, so it is compiled at XLA's lowest backend optimization level: for the
        small models the initializers' random-number code took as long to compile as the
        train step itself (unet on CPU: 8.4 s at the default level, 4.0 s at 0).

        A state of up to ONE_DEVICE_INIT_BYTES is computed on one device and placed into
        its shardings from the host: compiled for several devices, the SPMD partitioner
        (Shardy) took 60% of its compile (unet_2d_condition on 8 CPU devices: 7.9 s, 5.8 s
        on one). The values are the same either way (JAX's threefry is partitionable): a
        larger state, which one device might not hold, is computed in place, sharded.
        """
        if self._init is None:
            if self._init_on_one_device:  # the one trace, on the default device
                lowered = self._init_traced.lower()
            else:
                init = jax.jit(self._init_state, out_shardings=self.state_shardings)
                lowered = init.lower(self._condition_params)
            self._init = lowered.compile(compiler_options=INIT_COMPILER_OPTIONS)
        state = self._init(self._condition_params)
        if self._init_on_one_device:
            # Through the host: copied device to devices, every leaf compiled a program of
            # its own. One device: it is already there, and stays.
            if self.mesh.devices.size > 1:
                state = jax.device_get(state)
            state = jax.device_put(state, self.state_shardings)
        return state

    @functools.cached_property
    def _init_on_one_device(self) -> bool:
        leaves = jax.tree.leaves(self.abstract_state)
        return sum(leaf.size * leaf.dtype.itemsize for leaf in leaves) <= ONE_DEVICE_INIT_BYTES

    @property
    def param_counts(self) -> dict[str, int]:
        """Trainable parameters: the backbone's and the condition encoder's (0 when constant)."""
        params = self.abstract_state.params
        return {
            "backbone": count_params(params["model"]),
            "condition": count_params(params["condition"]),
        }

    # -- batches -------------------------------------------------------------------------

    def example_batch(self, batch_size: int) -> dict[str, np.ndarray]:
        """The objective's host batch (numpy default_rng(0)), built once and reused."""
        return self.objective.example_batch(batch_size)

    def put_batch(self, batch) -> dict[str, jax.Array]:
        """Host batch -> device arrays split over data × fsdp.

        Several processes: every process holds the same global host batch and feeds only
        the rows its own devices hold (the mesh spans every process's devices).
        """
        shardings = batch_shardings(batch, self.mesh)
        if jax.process_count() == 1:
            return jax.device_put(batch, shardings)
        return jax.tree.map(_local_rows_to_global, batch, shardings)

    # -- the step ------------------------------------------------------------------------

    def _train_step(self, state: TrainState, batch) -> tuple[TrainState, dict[str, jax.Array]]:
        rng = jax.random.fold_in(jax.random.key(self.seed), state.step)

        def loss_fn(params):
            model = nnx.merge(self.graphdef, params["model"])
            # The table rides in the state but no gradient reaches it: the 2026-09-05 figures
            # (table in the state) keep the 09-02 GFLOP, without the text projections' input
            # gradients a trainable table would add (+0.73 GFLOP for simple_dit).
            frozen = jax.lax.stop_gradient(params["condition"])
            condition = nnx.merge(self.condition_graphdef, frozen)
            return self.objective.loss(model, batch, rng, condition=condition, ema=state.ema)

        (loss, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
        updates, opt_state = self.optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        step = state.step + 1
        ema = self.objective.update_ema(state.ema, params["model"], step)
        new_state = TrainState(step=step, params=params, opt_state=opt_state, ema=ema)
        return new_state, {"train/loss": loss.astype(jnp.float32), **metrics}

    def compile(self, batch):
        """Lower and compile the step ahead of time for this batch's shapes (state donated)."""
        return self.compile_lowered(self.lower(batch))

    def lower(self, batch) -> jax.stages.Lowered:
        """The step traced and lowered for this batch's shapes (`compile_lowered` compiles
        it; the benchmark times the two apart)."""
        self._batch_shardings = batch_shardings(batch, self.mesh)
        abstract_batch = jax.tree.map(
            lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
            batch,
            self._batch_shardings,
        )
        abstract_state = jax.tree.map(
            lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
            self.abstract_state,
            self.state_shardings,
        )
        replicated = NamedSharding(self.mesh, PartitionSpec())
        step = jax.jit(
            self._train_step,
            in_shardings=(self.state_shardings, self._batch_shardings),
            out_shardings=(self.state_shardings, replicated),
            donate_argnums=0,
        )
        return step.lower(abstract_state, abstract_batch)

    def compile_lowered(self, lowered: jax.stages.Lowered):
        """Compile what `lower` returned. `compile_seconds` is the XLA compile's time, also
        when the executable came from the persistent cache (`loaded_from_cache`): then it is
        the original compile's as the cache keeps it (JAX stores whole seconds, truncated),
        and `load_seconds` the read."""
        self.compiled, self.compile_seconds, self.load_seconds = compile_timed(lowered)
        self.loaded_from_cache = self.load_seconds is not None
        self._flops = None
        return self.compiled

    def step(self, state: TrainState, batch) -> tuple[TrainState, dict[str, Any]]:
        """One compiled step; `state` is donated (its buffers are reused for the result).

        metrics: "train/loss" (a device scalar) and "train/mfu" (from the time since the
        previous step returned; None for the first step and where the device's peak is unknown).
        """
        if self.compiled is None:
            self.compile(batch)
        if any(isinstance(leaf, np.ndarray) for leaf in jax.tree.leaves(batch)):
            batch = self.put_batch(batch)
        state, metrics = self.compiled(state, batch)
        now = time.perf_counter()
        seconds = None if self._last_step_end is None else now - self._last_step_end
        self._last_step_end = now
        metrics["train/mfu"] = self.mfu(seconds)
        return state, metrics

    # -- telemetry -----------------------------------------------------------------------

    @property
    def flops(self) -> float:
        """FLOPs of one compiled step per device, from the optimized HLO (dew.telemetry)."""
        if self.compiled is None:
            raise RuntimeError("compile the step first: Trainer.compile(batch)")
        if self._flops is None:
            from dew.telemetry.instrumentation import compiled_flops

            self._flops = compiled_flops(self.compiled)
        return self._flops

    @property
    def device_kind(self) -> str:
        return self.mesh.devices.flat[0].device_kind

    def mfu(self, step_seconds: float | None) -> float | None:
        """train/mfu: this step's FLOPs over the time and the device's dense bf16 peak."""
        # no peak (a CPU, an unknown device): skip counting the FLOPs for a null anyway
        if step_seconds is None or self._peak_flops is None:
            return None
        from dew.telemetry.instrumentation import mfu

        return mfu(self.flops, step_seconds, self.device_kind)

    @functools.cached_property
    def _peak_flops(self) -> float | None:
        # looked up once: step() calls mfu() on every step, inside the timed windows
        from dew.telemetry.peaks import peak_bf16_flops

        return peak_bf16_flops(self.device_kind)


def _local_rows_to_global(host: np.ndarray, sharding: NamedSharding) -> jax.Array:
    """This process's rows of a global host array -> the global array (no cross-host copy)."""
    shape = tuple(host.shape)
    rows = [index[0] for index in sharding.addressable_devices_indices_map(shape).values()]
    first = min(r.start or 0 for r in rows)
    last = max(shape[0] if r.stop is None else r.stop for r in rows)
    return jax.make_array_from_process_local_data(sharding, host[first:last], shape)


def _with_settings(
    config: ModelConfig, *, dtype: Dtype, attention_impl: AttentionImpl
) -> ModelConfig:
    """The config with the Trainer's dtype and attention_impl (validated again)."""
    if (config.dtype, config.attention_impl) == (dtype, attention_impl):
        return config
    settings = {"dtype": dtype, "attention_impl": attention_impl}
    return type(config)(**{**config.model_dump(), **settings})
