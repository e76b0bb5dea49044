"""Architecture name -> (config class, module class).

A family module registers each architecture it defines:

    @register("simple_dit", DiTConfig)
    class SimpleDiT(nnx.Module): ...

Every module of `dew.models` is imported on first lookup, so registering is all a new
family has to do.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil

from dew.config import ModelConfig


@dataclasses.dataclass(frozen=True)
class Architecture:
    name: str
    config_cls: type[ModelConfig]
    module_cls: type


_REGISTRY: dict[str, Architecture] = {}


def register(name: str, config_cls: type[ModelConfig]):
    def decorate(module_cls: type) -> type:
        if name in _REGISTRY and _REGISTRY[name].module_cls is not module_cls:
            raise ValueError(f"architecture {name!r} is registered twice")
        _REGISTRY[name] = Architecture(name, config_cls, module_cls)
        return module_cls

    return decorate


def _import_families() -> None:
    import dew.models as package

    for info in pkgutil.iter_modules(package.__path__):
        if info.name not in ("registry", "layers"):
            importlib.import_module(f"{package.__name__}.{info.name}")


def names() -> list[str]:
    _import_families()
    return sorted(_REGISTRY)


def get(name: str) -> Architecture:
    _import_families()
    if name not in _REGISTRY:
        raise ValueError(f"unknown architecture {name!r}; valid: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name]
