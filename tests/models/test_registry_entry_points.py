"""Architectures from other packages through the `dew.architectures` entry points, read by
dew.models.registry in this process: a package is a module and a dist-info folder (METADATA,
entry_points.txt) written into a temporary folder on sys.path, which importlib.metadata
finds as it finds an installed wheel. Each bad input is one line naming the package; dew's
own names never import another package. The same packages built and installed by pip and
run through tools/benchmark_step.py: tests/bench/sweep/test_own_architecture.py."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from dew.bench.sweep import presets
from dew.models import registry

MODEL = """
from typing import ClassVar

from flax import nnx

from dew.config import ModelConfig
from dew.models.registry import register


class {cls}Config(ModelConfig):
    objective: ClassVar[str] = "{objective}"
    width: int = 8
    presets: ClassVar = {presets}


@register("{name}", {cls}Config)
class {cls}(nnx.Module):
    def __init__(self, config, *, rngs):
        self.dense = nnx.Linear(3, config.width, rngs=rngs)
"""


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A folder on sys.path to install packages into; the registry as it was afterwards."""
    registry._import_families()  # dew's own registered before the copy that the test changes
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.syspath_prepend(str(tmp_path))
    registry._declared.cache_clear()
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        if name.startswith("pkg_"):
            del sys.modules[name]
    registry._declared.cache_clear()


def install(
    site: Path, dist: str, module: str, source: str, entry_points: dict[str, str], version="0.1.0"
) -> None:
    """The module and the dist-info a wheel of `dist` would install."""
    (site / f"{module}.py").write_text(textwrap.dedent(source))
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    lines = [f"{name} = {value}" for name, value in entry_points.items()]
    (info / "entry_points.txt").write_text("[dew.architectures]\n" + "\n".join(lines) + "\n")
    registry._declared.cache_clear()  # the registry reads the entry points once


def model(name: str, cls: str = "Net", objective: str = "flow", smoke=True) -> str:
    named = {"cpu-smoke": {}} if smoke else {"small": {}}
    return MODEL.format(name=name, cls=cls, objective=objective, presets=named)


def refusal(name: str) -> str:
    with pytest.raises(registry.RegistryError) as raised:
        registry.get(name)
    message = str(raised.value)
    assert "\n" not in message
    return message


def test_an_outside_architecture_loads_only_when_its_name_is_asked_for(site):
    install(site, "pkg-good", "pkg_good", model("good_net"), {"good_net": "pkg_good:Net"})
    assert "good_net" in registry.names()
    registry.get("simple_dit")
    assert "pkg_good" not in sys.modules  # listing and dew's own names import nothing of it
    arch = registry.get("good_net")
    assert (arch.distribution, arch.version, arch.module) == ("pkg-good", "0.1.0", "pkg_good")
    assert arch.outside and not registry.get("simple_dit").outside
    assert arch.module_cls is sys.modules["pkg_good"].Net
    assert arch.config_cls.preset("cpu-smoke").width == 8


def test_a_package_that_fails_to_import_is_one_line_and_leaves_dews_own_alone(site):
    install(site, "pkg-broken", "pkg_broken", "raise RuntimeError('no GPU here\\nat all')",
            {"broken_net": "pkg_broken:Net"})  # fmt: skip
    assert refusal("broken_net") == (
        "package pkg-broken 0.1.0 (entry point broken_net = pkg_broken:Net) fails to import: "
        "RuntimeError: no GPU here; fix the package or uninstall it"
    )
    assert registry.get("simple_dit").name == "simple_dit"
    assert presets.resolve("cpu-smoke", ["simple_dit"], None)[0].architecture == "simple_dit"


def test_a_name_declared_by_two_packages_is_refused(site):
    install(site, "pkg-one", "pkg_one", model("twin"), {"twin": "pkg_one:Net"})
    install(site, "pkg-two", "pkg_two", model("twin"), {"twin": "pkg_two:Net"}, version="2.0")
    assert refusal("twin") == (
        "architecture 'twin' is declared by two packages, pkg-one 0.1.0 and pkg-two 2.0; "
        "uninstall one, or rename one's dew.architectures entry point"
    )


def test_a_name_registered_twice_by_two_modules_names_both(site):
    install(site, "pkg-first", "pkg_first", model("first"), {"first": "pkg_first:Net"})
    install(site, "pkg-copy", "pkg_copy", model("first"), {"copy": "pkg_copy:Net"})
    registry.get("first")
    assert refusal("copy") == (
        "package pkg-copy 0.1.0 (entry point copy = pkg_copy:Net): architecture 'first' is "
        "registered twice: by pkg_first.Net and by pkg_copy.Net; rename one"
    )


def test_a_package_shadowing_dews_own_name_is_refused_either_way(site):
    install(site, "pkg-shadow", "pkg_shadow", model("simple_dit"), {"my_dit": "pkg_shadow:Net"})
    assert refusal("my_dit") == (
        "package pkg-shadow 0.1.0 (entry point my_dit = pkg_shadow:Net): architecture "
        "'simple_dit' of pkg_shadow.Net shadows dew's own (dew.models.dit.SimpleDiT); "
        "register it under another name"
    )
    assert registry.get("simple_dit").module == "dew.models.dit"  # dew's own still runs

    install(site, "pkg-claim", "pkg_claim", model("unet", cls="Unet"), {"unet": "pkg_claim:Unet"})
    assert refusal("unet") == (
        "package pkg-claim 0.1.0 (entry point unet = pkg_claim:Unet) declares architecture "
        "'unet', which is dew's own: dew never runs another model under its name; rename "
        "that entry point"
    )
    assert "pkg_claim" not in sys.modules and "unet" not in registry.outside_names()


def test_an_entry_point_must_name_the_registered_module_class(site):
    install(site, "pkg-config", "pkg_config", model("cfg_net"), {"cfg_net": "pkg_config:NetConfig"})
    assert refusal("cfg_net") == (
        "package pkg-config 0.1.0 (entry point cfg_net = pkg_config:NetConfig): architecture "
        "'cfg_net': pkg_config.NetConfig is not an nnx.Module class; register the model class"
    )
    install(site, "pkg-other", "pkg_other", model("named_a"), {"named_b": "pkg_other:Net"})
    assert refusal("named_b") == (
        "package pkg-other 0.1.0 (entry point named_b = pkg_other:Net): pkg_other.Net is "
        "registered as 'named_a', not as 'named_b'; decorate it with "
        "@dew.models.registry.register('named_b', ItsConfig)"
    )


def test_a_config_must_be_a_model_config_naming_its_objective(site):
    source = model("plain").replace("(ModelConfig)", "").replace("objective:", "#")
    install(site, "pkg-plain", "pkg_plain", source, {"plain": "pkg_plain:Net"})
    assert refusal("plain") == (
        "package pkg-plain 0.1.0 (entry point plain = pkg_plain:Net): architecture 'plain' "
        "of pkg_plain.Net: its config <class 'pkg_plain.NetConfig'> is not a subclass of "
        "dew.config.ModelConfig; subclass it"
    )


def test_a_config_without_the_preset_or_with_an_unknown_objective_is_refused(site):
    install(site, "pkg-small", "pkg_small", model("only_small", smoke=False),
            {"only_small": "pkg_small:Net"})  # fmt: skip
    with pytest.raises(ValueError) as raised:
        presets.resolve("cpu-smoke", ["only_small"], None)
    assert str(raised.value) == (
        "architecture 'only_small' (package pkg-small 0.1.0): its config NetConfig has no "
        "preset 'cpu-smoke' (it has: small); run --preset small, or add 'cpu-smoke' to "
        "NetConfig.presets"
    )
    install(site, "pkg-obj", "pkg_obj", model("odd", objective="nope"), {"odd": "pkg_obj:Net"})
    with pytest.raises(
        ValueError,
        match=r"^--cases\[0\]: architecture 'odd' \(package pkg-obj "
        r"0.1.0\): its objective 'nope' is not registered \(dew's: .*edm.*flow",
    ):
        presets.resolve("cpu-smoke", None, '[{"architecture": "odd", "batch": 16}]')


def test_an_outside_case_runs_in_every_preset_its_config_names(site):
    install(site, "pkg-good", "pkg_good", model("good_net"), {"good_net": "pkg_good:Net"})
    (case,) = presets.resolve("cpu-smoke", ["good_net"], None)
    assert (case.architecture, case.batch) == ("good_net", presets.OWN_BATCH)
    cases = presets.resolve("cpu-smoke", None, '[{"architecture": "good_net", "batch": 16, '
                            '"model": {"width": 4}}, {"architecture": "unet"}]')  # fmt: skip
    assert [(c.architecture, c.batch, c.model) for c in cases] == [
        ("good_net", 16, {"width": 4}),
        ("unet", presets.CPU_SMOKE_BATCH, {}),
    ]
    assert presets.outside_modules(cases) == {"pkg_good": ["good_net"]}
    with pytest.raises(
        ValueError, match="unknown architecture 'nope' for preset 'cpu-smoke'; valid: .*good_net"
    ):
        presets.resolve("cpu-smoke", ["nope"], None)
