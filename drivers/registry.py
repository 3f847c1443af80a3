"""The registry of driver kinds: every driver package registers its class under a kind
name with the model of its inventory entries (``drivers.spec.DeviceSpec``);
``build(name, spec, expect)`` makes a driver from an inventory entry. The packages under
``drivers/`` are found by scanning (``load_all``), so the registry is the one list of
kinds.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from drivers.contract import Session
from drivers.errors import UnknownDriver
from drivers.spec import DeviceSpec, Expect


@dataclass(frozen=True, slots=True, kw_only=True)
class Kind:
    """A registered driver kind: its class, and the model of its inventory entries."""

    name: str
    factory: type[Session]
    spec: type[DeviceSpec]

    @property
    def summary(self) -> str:
        """The first line of the driver's docstring (or its name)."""
        return (self.factory.__doc__ or self.name).strip().splitlines()[0]


@dataclass(slots=True)
class _Registry:
    kinds: dict[str, Kind] = field(default_factory=dict)
    broken: dict[str, str] = field(default_factory=dict)  # package -> why it did not import
    loaded: bool = False


_REGISTRY = _Registry()
_C = TypeVar("_C", bound=type[Session])


def register(kind: str, *, spec: type[DeviceSpec]) -> Callable[[_C], _C]:
    """Class decorator: make a driver available under ``kind``. The class builds itself from
    an inventory entry with ``from_spec(name, spec, expect)``."""

    def deco(factory: _C) -> _C:
        """Register ``factory`` under ``kind`` (again: only the same factory)."""
        old = _REGISTRY.kinds.get(kind)
        if old is not None and old.factory is not factory:
            raise ValueError(f"driver kind {kind!r} registered twice")
        if not callable(getattr(factory, "from_spec", None)):
            raise TypeError(f"driver kind {kind!r}: {factory.__name__} has no from_spec()")
        _REGISTRY.kinds[kind] = Kind(name=kind, factory=factory, spec=spec)
        return factory

    return deco


def load_all() -> None:
    """Import every driver package under ``drivers/`` once (each registers its kinds). A
    package whose dependencies are missing is remembered, not fatal: ``lookup`` says why."""
    if _REGISTRY.loaded:
        return
    _REGISTRY.loaded = True
    import drivers

    for info in pkgutil.iter_modules(drivers.__path__):
        if info.ispkg:
            try:
                importlib.import_module(f"drivers.{info.name}")
            except ImportError as exc:
                _REGISTRY.broken[info.name] = str(exc)


def registered() -> list[str]:
    """The kinds that can be used here, sorted."""
    load_all()
    return sorted(_REGISTRY.kinds)


def broken() -> dict[str, str]:
    """The driver packages that did not import here, with why (``load_all``)."""
    load_all()
    return dict(_REGISTRY.broken)


def kinds() -> list[Kind]:
    """Every registered driver kind, by name."""
    return [_REGISTRY.kinds[k] for k in registered()]


def kind(name: str) -> Kind:
    """The registered kind ``name``; UnknownDriver listing the known ones otherwise."""
    load_all()
    found = _REGISTRY.kinds.get(name)
    if found is not None:
        return found
    if name in _REGISTRY.broken:
        why = _REGISTRY.broken[name]
        raise UnknownDriver(name, f"driver kind {name!r} cannot be loaded here: {why}")
    known = ", ".join(registered()) or "none"
    raise UnknownDriver(name, f"no driver for kind {name!r}; known kinds: {known}")


def lookup(name: str) -> type[Session]:
    """The driver class of kind ``name`` (UnknownDriver listing the known kinds)."""
    return kind(name).factory


def build(name: str, spec: DeviceSpec, expect: Expect) -> Session:
    """The driver of device ``name`` from its inventory entry (not yet opened)."""
    factory: Any = kind(spec.driver).factory
    driver: Session = factory.from_spec(name, spec, expect)
    return driver
