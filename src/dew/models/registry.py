"""Architecture name -> (config class, module class): dew's own and other packages'.

A family module registers each architecture it defines:

    @register("simple_dit", DiTConfig)
    class SimpleDiT(nnx.Module): ...

Every module of `dew.models` is imported on first lookup, so registering is all a new
family has to do. Another package registers its architectures the same way, in a module
that its entry point of the group `dew.architectures` names (pyproject.toml:
`tiny_mixer = "dew_example.models:TinyMixer"`; the entry point's name is the
architecture's, its object the registered class). docs/own-models.md is the contract.

Other packages are read lazily, so a broken one affects only the runs that name it: a
lookup of one of dew's own names imports nothing outside dew (it reads the entry points'
names, metadata only, to refuse a package that claims the name too); an unknown name
loads the one entry point of that name; `names()` lists the entry points without
loading them. Every refusal is a RegistryError (a ValueError): one line naming the
package and what to do.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.metadata
import pkgutil

from dew.config import ModelConfig

GROUP = "dew.architectures"
OWN_PACKAGE = "dew.models"


class RegistryError(ValueError):
    """An architecture that cannot be registered or loaded, in one line."""


@dataclasses.dataclass(frozen=True)
class Architecture:
    name: str
    config_cls: type[ModelConfig]
    module_cls: type
    # The package (distribution) that declared it through an entry point, and its
    # version; None for dew's own and for a module imported without one.
    distribution: str | None = None
    version: str | None = None

    @property
    def module(self) -> str:
        return self.module_cls.__module__

    @property
    def outside(self) -> bool:
        """Defined outside dew.models (another package, or a script's module)."""
        return not _own_module(self.module)

    def origin(self) -> str:
        """Where it comes from, as an error line names it: "package NAME VERSION" or the
        module."""
        if self.distribution:
            return f"package {self.distribution} {self.version or '(no version)'}"
        return f"module {self.module}"


_REGISTRY: dict[str, Architecture] = {}


def _own_module(module: str) -> bool:
    return module == OWN_PACKAGE or module.startswith(OWN_PACKAGE + ".")


def _where(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def register(name: str, config_cls: type[ModelConfig]):
    """Register the decorated nnx.Module class as architecture `name`, configured by
    `config_cls` (a dew.config.ModelConfig subclass naming its objective and presets)."""

    def decorate(module_cls: type) -> type:
        check_classes(name, config_cls, module_cls)
        if not _own_module(module_cls.__module__):
            _import_families()  # dew's own names first, whatever imported this module
            own = _REGISTRY.get(name)
            if own is not None and not own.outside:
                raise RegistryError(
                    f"architecture {name!r} of {_where(module_cls)} shadows dew's own "
                    f"({_where(own.module_cls)}); register it under another name"
                )
        registered = _REGISTRY.get(name)
        if registered is not None and registered.module_cls is not module_cls:
            raise RegistryError(
                f"architecture {name!r} is registered twice: by {_where(registered.module_cls)} "
                f"and by {_where(module_cls)}; rename one"
            )
        _REGISTRY[name] = Architecture(name, config_cls, module_cls)
        return module_cls

    return decorate


def check_classes(name: str, config_cls: object, module_cls: object) -> None:
    """An architecture is an nnx.Module class with a ModelConfig subclass that names its
    objective (RegistryError otherwise)."""
    check_module_class(name, module_cls)
    where = _where(module_cls)
    if not (isinstance(config_cls, type) and issubclass(config_cls, ModelConfig)):
        raise RegistryError(
            f"architecture {name!r} of {where}: its config {config_cls!r} is not a subclass "
            "of dew.config.ModelConfig; subclass it"
        )
    if not isinstance(getattr(config_cls, "objective", None), str):
        raise RegistryError(
            f"architecture {name!r} of {where}: its config {config_cls.__name__} names no "
            'objective; set objective: ClassVar[str] = "flow" (or another objective)'
        )


def check_module_class(name: str, module_cls: object) -> None:
    from flax import nnx  # here, so that reading this registry's names needs no flax

    if not (isinstance(module_cls, type) and issubclass(module_cls, nnx.Module)):
        what = _where(module_cls) if isinstance(module_cls, type) else repr(module_cls)[:80]
        raise RegistryError(
            f"architecture {name!r}: {what} is not an nnx.Module class; register the model class"
        )


def _import_families() -> None:
    import dew.models as package

    for info in pkgutil.iter_modules(package.__path__):
        if info.name not in ("registry", "layers"):
            importlib.import_module(f"{package.__name__}.{info.name}")


# --- other packages' entry points ------------------------------------------------------------


@functools.cache
def _declared() -> tuple[importlib.metadata.EntryPoint, ...]:
    """The group's entry points, read once (metadata only: nothing is imported)."""
    return tuple(importlib.metadata.entry_points(group=GROUP))


def _package(entry: importlib.metadata.EntryPoint) -> tuple[str | None, str | None]:
    """(distribution, version) of the package that declares an entry point."""
    dist = entry.dist
    if dist is None:
        return None, None
    return dist.metadata["Name"] or None, dist.version


def _label(entry: importlib.metadata.EntryPoint) -> str:
    distribution, version = _package(entry)
    what = f"package {distribution} {version}" if distribution else "a package"
    return f"{what} (entry point {entry.name} = {entry.value})"


def _declaring(name: str) -> list[importlib.metadata.EntryPoint]:
    return [entry for entry in _declared() if entry.name == name]


def outside_names() -> list[str]:
    """The architectures other packages declare or have registered (nothing is loaded)."""
    own = {name for name, arch in _REGISTRY.items() if not arch.outside}
    declared = {entry.name for entry in _declared()}
    registered = {name for name, arch in _REGISTRY.items() if arch.outside}
    return sorted((declared | registered) - own)


def _load(name: str) -> Architecture | None:
    """The architecture an entry point of this name registers, loaded (None: no package
    declares the name)."""
    entries = _declaring(name)
    if not entries:
        return None
    if len({_package(entry) for entry in entries}) > 1:
        packages = " and ".join(
            f"{dist} {version}" for dist, version in sorted({_package(e) for e in entries})
        )
        raise RegistryError(
            f"architecture {name!r} is declared by two packages, {packages}; "
            "uninstall one, or rename one's dew.architectures entry point"
        )
    entry = entries[0]
    label = _label(entry)
    try:
        loaded = entry.load()  # imports its module: its @register runs
    except RegistryError as error:
        raise RegistryError(f"{label}: {error}") from None
    except (Exception, SystemExit) as error:  # someone else's import, whatever it raises
        first = (str(error).strip().splitlines() or [""])[0][:300]
        raise RegistryError(
            f"{label} fails to import: {type(error).__name__}: {first}; fix the package "
            "or uninstall it"
        ) from None
    registered = _REGISTRY.get(name)
    if registered is None or registered.module_cls is not loaded:
        try:
            check_module_class(name, loaded)
        except RegistryError as error:
            raise RegistryError(f"{label}: {error}") from None
        also = [n for n, arch in _REGISTRY.items() if arch.module_cls is loaded]
        where = f"registered as {', '.join(map(repr, also))}" if also else "not registered"
        raise RegistryError(
            f"{label}: {_where(loaded)} is {where}, not as {name!r}; decorate it with "
            f"@dew.models.registry.register({name!r}, ItsConfig)"
        )
    distribution, version = _package(entry)
    arch = dataclasses.replace(registered, distribution=distribution, version=version)
    _REGISTRY[name] = arch
    return arch


def names() -> list[str]:
    """dew's own architectures and those other packages declare (listed, not loaded)."""
    _import_families()
    return sorted(set(_REGISTRY) | set(outside_names()))


def get(name: str) -> Architecture:
    _import_families()
    arch = _REGISTRY.get(name)
    if arch is not None and not arch.outside:
        shadows = [_label(entry) for entry in _declaring(name)]
        if shadows:
            raise RegistryError(
                f"{shadows[0]} declares architecture {name!r}, which is dew's own: dew "
                "never runs another model under its name; rename that entry point"
            )
        return arch
    if arch is None or arch.distribution is None:
        arch = _load(name) or arch
    if arch is None:
        raise RegistryError(f"unknown architecture {name!r}; valid: {', '.join(names())}")
    return arch
