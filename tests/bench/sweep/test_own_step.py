"""A step that is not a model (`--step MODULE:FACTORY`, dew.bench.sweep.own_step): a step
factory written by the test in a temporary folder (plain jax + optax, a small MLP
regression), put on PYTHONPATH and run through tools/benchmark_step.py like dew's own
cases: compiled ahead of time, its FLOPs and fingerprint from that executable, timed in
fresh processes with repeats, --resume and --no-isolate, in a record that validates. Bad
factories, one way each: one line naming the factory, exit 2, the whole run refused before
any case (dew's own cases of the same run included).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dew.bench.record.schema import read_run
from dew.bench.sweep import own_step, presets
from dew.bench.sweep.case_run import final_loss

REPO = Path(__file__).resolve().parents[3]
STEP = [sys.executable, str(REPO / "tools" / "benchmark_step.py")]
SMOKE = ["--preset", "cpu-smoke", "--steps", "2", "--warmup", "1", "--idle-check", "off"]

FACTORY = '''
"""A small MLP regression, trained by a step of its own: plain jax + optax."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

SIZES = (16, 64, 64, 1)


def loss_fn(params, batch):
    x = batch["x"]
    for i in range(len(SIZES) - 1):
        x = x @ params[f"w{i}"] + params[f"b{i}"]
        x = jax.nn.relu(x) if i < len(SIZES) - 2 else x
    return jnp.mean((x - batch["y"]) ** 2)


def make_step(batch=8):
    key, params = jax.random.key(0), {}
    for i, (n, m) in enumerate(zip(SIZES[:-1], SIZES[1:])):
        key, sub = jax.random.split(key)
        params[f"w{i}"] = jax.random.normal(sub, (n, m)) / np.sqrt(n)
        params[f"b{i}"] = jnp.zeros((m,))
    optimizer = optax.adam(1e-3)

    @jax.jit
    def step(state, batch):
        loss, grads = jax.value_and_grad(loss_fn)(state["params"], batch)
        updates, opt = optimizer.update(grads, state["opt"], state["params"])
        return {"params": optax.apply_updates(state["params"], updates), "opt": opt}, {
            "loss": loss
        }

    rng = np.random.default_rng(0)
    data = {
        "x": rng.normal(size=(batch, SIZES[0])).astype(np.float32),
        "y": rng.normal(size=(batch, 1)).astype(np.float32),
    }
    return step, {"params": params, "opt": optimizer.init(params)}, data


def make_sharded(batch=8):
    """The state split over every device along its first axis where it divides."""
    step, state, data = make_step(batch)
    mesh = Mesh(np.array(jax.devices()), ("d",))

    def spec(x):
        split = x.ndim and x.shape[0] % len(jax.devices()) == 0
        return NamedSharding(mesh, PartitionSpec("d") if split else PartitionSpec())

    return step, state, data, jax.tree.map(spec, state)
'''
PARAMS = 16 * 64 + 64 + 64 * 64 + 64 + 64 + 1  # the MLP's weights and biases

# Factories that are bad input, one way each, and the line each is refused with.
BAD = """
import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from mlp_step import make_step

NOT_A_FACTORY = 3


def raises(batch=8):
    raise RuntimeError("no data here")


def no_file(batch=8):
    raise FileNotFoundError("/data/regression.npz: no such file")


def two(batch=8):
    return make_step(batch)[:2]


def a_list(batch=8):
    return list(make_step(batch))


def not_jitted(batch=8):
    step, state, data = make_step(batch)
    return (lambda s, b: step(s, b)), state, data


def not_callable(batch=8):
    return ("step", *make_step(batch)[1:])


def a_string_in_the_state(batch=8):
    step, state, data = make_step(batch)
    return step, {**state, "name": "mlp"}, data


def a_list_batch(batch=8):
    step, state, data = make_step(batch)
    return step, state, {"x": [1.0, 2.0], "y": data["y"]}


def half_a_sharding(batch=8):
    step, state, data = make_step(batch)
    whole = NamedSharding(Mesh(np.array(jax.devices()), ("d",)), PartitionSpec())
    return step, state, data, {"params": jax.tree.map(lambda _: whole, state["params"])}


def no_metrics(batch=8):
    return (jax.jit(lambda s, b: s), *make_step(batch)[1:])
"""
REFUSED = {
    "nowhere:make_step": "cannot import nowhere: ModuleNotFoundError: No module named 'nowhere'",
    "broken:make_step": "cannot import broken: ImportError: needs a GPU library",
    "mlp_step:missing": "module mlp_step has no missing",
    "bad:NOT_A_FACTORY": "NOT_A_FACTORY is an int, not a factory returning (step, state, batch)",
    "bad:raises": "raises(batch=8) raised RuntimeError: no data here",
    "bad:no_file": "no_file(batch=8) raised FileNotFoundError: /data/regression.npz: no such",
    "bad:two": "two(batch=8) returned a tuple of 2; it must return (step, state, batch) or",
    "bad:a_list": "a_list(batch=8) returned a list of 3; it must return",
    "bad:not_jitted": "its step is not jax.jit-wrapped",
    "bad:not_callable": "its step is a str, not a jax.jit-wrapped function",
    "bad:a_string_in_the_state": "its state holds a str at ['name']; state and batch must be",
    "bad:a_list_batch": "its batch holds a float at ['x'][0]",
    "bad:half_a_sharding": "its state_sharding does not match its state (the state has ['opt']",
    "bad:no_metrics": "its step returns a dict; it must return (state, metrics)",
}


@pytest.fixture(scope="module")
def factories(tmp_path_factory) -> Path:
    """A folder (never the repo) holding the step factory and the bad ones."""
    folder = tmp_path_factory.mktemp("factories")
    (folder / "mlp_step.py").write_text(textwrap.dedent(FACTORY))
    (folder / "bad.py").write_text(textwrap.dedent(BAD))
    (folder / "broken.py").write_text('raise ImportError("needs a GPU library")\n')
    return folder


def _tool(factories: Path, *argv: str, timeout: float = 300) -> subprocess.CompletedProcess:
    path = os.pathsep.join(filter(None, [str(factories), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path, "JAX_PLATFORMS": "cpu"}
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    return subprocess.run(
        [*STEP, *SMOKE, *argv], capture_output=True, text=True, env=env, timeout=timeout
    )


# --- the cases a --step makes (dew.bench.sweep.presets) --------------------------------------


def test_a_step_alone_is_the_runs_only_case_and_after_the_named_architectures():
    (alone,) = presets.resolve("cpu-smoke", None, None, "mlp_step:make_step")
    assert alone.architecture == alone.step == "mlp_step:make_step"
    assert alone.batch == presets.OWN_BATCH and alone.label() == "mlp_step:make_step"
    mixed = presets.resolve("cpu-smoke", ["simple_dit"], None, "mlp_step:make_step")
    assert [case.architecture for case in mixed] == ["simple_dit", "mlp_step:make_step"]
    (listed,) = presets.resolve("small", None, '[{"step": "a.b:make", "batch": 16}]')
    assert (listed.architecture, listed.batch) == ("a.b:make", 16)
    # through the case's process: its job is the case as JSON
    assert presets.Case.model_validate(listed.model_dump()) == listed


@pytest.mark.parametrize(
    ("step", "cases", "line"),
    [
        ("mlp_step", None, "--step 'mlp_step' is not MODULE:FACTORY"),
        ("a:b:c", None, "--step 'a:b:c' is not MODULE:FACTORY"),
        (None, '[{"step": "a:b", "moe": true}]', "moe does not apply to the step a:b"),
        (None, '[{"step": "a:b", "architecture": "unet"}]', "architecture is its step 'a:b'"),
    ],
)
def test_a_step_that_is_not_module_colon_factory_is_refused(step, cases, line):
    with pytest.raises(ValueError) as refused:
        presets.resolve("cpu-smoke", None, cases, step)
    assert line in str(refused.value)


# --- the factory checked, in this process (the check's own functions) ------------------------


@pytest.mark.parametrize("spec", sorted(REFUSED))
def test_a_bad_factory_is_one_line_naming_it(spec, factories, monkeypatch):
    monkeypatch.syspath_prepend(str(factories))
    with pytest.raises(own_step.StepFactoryError) as refused:
        built = own_step.load(spec, 8)
        own_step.lowered(spec, built.step, *own_step.placed(spec, built))
    line = str(refused.value)
    assert line.startswith(f"--step {spec}: ") and "\n" not in line
    assert REFUSED[spec] in line


def test_params_are_the_states_params_or_every_float_leaf_said_so(factories, monkeypatch):
    monkeypatch.syspath_prepend(str(factories))
    built = own_step.load("mlp_step:make_step", 8)
    assert own_step.param_count(built.state) == (PARAMS, None)
    count, note = own_step.param_count(built.state["opt"])
    assert count == 2 * PARAMS and note == own_step.ALL_FLOATS  # adam's two moments
    assert final_loss({"loss": 1.5}) == 1.5 and final_loss({}) is None
    assert final_loss({"loss": [1.0, 2.0]}) is None and final_loss(()) is None


# --- through the real tool --------------------------------------------------------------------


def test_a_bad_step_refuses_the_whole_run_before_any_case(factories, tmp_path):
    out = tmp_path / "run.json"
    done = _tool(
        factories, "--architectures", "simple_dit", "--step", "bad:raises", "--json-out", str(out)
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "tools/benchmark_step.py: error: --step bad:raises: raises(batch=8) raised RuntimeError: "
        "no data here"
    ]
    assert not out.exists() and done.stdout == ""  # no case ran, simple_dit's neither


@pytest.mark.slow  # a run of the tool per bad factory: ~3.5 s each, 45 s in all
@pytest.mark.parametrize("spec", sorted(REFUSED))
def test_each_bad_factory_through_the_tool_is_one_line_and_exit_2(spec, factories):
    done = _tool(factories, "--step", spec)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    (line,) = done.stderr.strip().splitlines()
    print(f"\n{line}")
    assert (
        line.startswith(f"tools/benchmark_step.py: error: --step {spec}: ")
        and REFUSED[spec] in line
    )


@pytest.mark.slow  # three runs of the tool: repeats, --resume, --no-isolate (~35 s)
def test_a_step_of_its_own_is_timed_like_dews_cases_in_a_record_that_validates(factories, tmp_path):
    out = tmp_path / "run.json"
    argv = ["--step", "mlp_step:make_step", "--repeats", "2", "--json-out", str(out)]
    done = _tool(factories, *argv)
    assert done.returncode == 0, done.stderr
    (row,) = read_run(out).rows
    print(f"\n{json.dumps(row.model_dump(mode='json', exclude={'repeats'}))}")
    assert row.status == "ok" and row.architecture == "mlp_step:make_step"
    assert row.batch == 8 and row.params == PARAMS and row.sample is None
    assert row.gflop_per_step > 0 and row.uncounted_custom_calls == {} and not row.flops_error
    assert row.cost_analysis_gflop > 0 and row.compiler_peak_gib > 0
    assert row.ms_per_step > 0 and row.p10_ms <= row.p50_ms <= row.p90_ms
    assert row.ms_per_step_ci95 is not None and len(row.repeats) == 2
    assert all(repeat.compile_s > 0 for repeat in row.repeats)  # two fresh compiles
    phases = [phase.name for phase in row.repeats[0].phases]
    assert phases[:5] == ["imports", "init", "trace_lower", "compile", "flop_count"]
    assert row.fingerprint is not None  # one program, both repeats
    assert row.loss is not None and row.loss_finite
    assert row.util is None and row.peak_gib is None  # CPU: no peak, no allocator peak
    valid = subprocess.run(
        [sys.executable, "-m", "dew.bench.record.validate", str(out)],
        capture_output=True,
        text=True,
    )
    assert valid.returncode == 0, valid.stderr

    again = _tool(factories, *argv, "--resume")  # the row is ok: nothing runs again
    assert again.returncode == 0, again.stderr
    assert read_run(out).rows == [row]

    # In this process, from --cases with its own batch, its state split over the 8 devices.
    cases = '[{"step": "mlp_step:make_sharded", "batch": 16}]'
    alone = tmp_path / "alone.json"
    done = _tool(
        factories, "--no-isolate", "--compilation-cache-dir", "off", "--cases", cases,
        "--json-out", str(alone),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (row,) = read_run(alone).rows
    assert row.status == "ok" and (row.architecture, row.batch) == ("mlp_step:make_sharded", 16)
    assert row.params == PARAMS and 0 < row.gflop_per_step and row.compile_s > 0
