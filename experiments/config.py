"""The experiments' parameters: one strict YAML file per experiment, overridable per run.

``experiments/configs/NAME.yaml`` holds an experiment's defaults (its full scale) and, under
``quick:``, what ``--quick`` changes. A run's configuration is, in order: those defaults,
the ``quick:`` section with ``--quick``, the file of ``--config FILE`` (a subset of the keys,
the same shape, optionally its own ``quick:``; mappings merge key by key), then every
``--set KEY=VALUE`` (``KEY`` a dotted path, ``VALUE`` read as YAML and put there as it is:
``--set rates_mbps=[50,100]``, ``--set cases.fail-10s.fail_s=5``). The result is checked
against the experiment's model (pydantic, unknown keys refused with the nearest known one
suggested) and recorded in ``env.json`` and in every raw file.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from services.reroute.errors import ConfigError
from services.reroute.model.yamlfile import YAMLError, strict_yaml

DIR = Path(__file__).resolve().parent / "configs"
QUICK = "quick"


class Config(BaseModel):
    """Every experiment's parameters share these; each experiment adds its own."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    runs: int = Field(ge=1, description="repetitions per case")


C = TypeVar("C", bound=Config)


def typed(config: Config, model: type[C]) -> C:
    """``config`` as ``model`` (as it is when the command line resolved it with that model)."""
    return config if isinstance(config, model) else model.model_validate(config.model_dump())


def default_file(name: str) -> Path:
    """The defaults of experiment ``name``."""
    return DIR / f"{name}.yaml"


def _mapping(doc: object, where: str) -> dict[str, Any]:
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ConfigError(f"{where}: expected a mapping of parameters, got {type(doc).__name__}")
    return {str(k): v for k, v in doc.items()}


def read(path: Path) -> dict[str, Any]:
    """A config file's mapping; ConfigError naming the file if it is not one."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    try:
        return _mapping(strict_yaml(text), str(path))
    except YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc


def merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` on top of ``base``; mappings merge key by key, anything else replaces."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def parse_set(item: str) -> tuple[list[str], Any]:
    """``a.b=[1, 2]`` -> ``(["a", "b"], [1, 2])`` (the value read as YAML); ConfigError if
    malformed."""
    key, sep, text = item.partition("=")
    parts = key.strip().split(".")
    if not sep or not all(parts):
        raise ConfigError(f"--set {item!r}: expected KEY=VALUE (e.g. --set runs=5)")
    try:
        value = strict_yaml(text) if text.strip() else ""
    except YAMLError as exc:
        raise ConfigError(f"--set {item!r}: the value is not valid YAML: {exc}") from exc
    return parts, value


def assign(doc: Mapping[str, Any], path: Sequence[str], value: Any) -> dict[str, Any]:
    """``doc`` with the value at ``path`` replaced by ``value`` (not merged: ``--set
    cases={...}`` sets exactly those cases); missing mappings on the way are made."""
    out = dict(doc)
    head, *rest = path
    if rest:
        inner = out.get(head)
        out[head] = assign(inner if isinstance(inner, Mapping) else {}, rest, value)
    else:
        out[head] = value
    return out


def _layer(doc: Mapping[str, Any], quick: bool) -> dict[str, Any]:
    """A file's mapping as it applies: its ``quick:`` section on top with ``--quick``."""
    base = {k: v for k, v in doc.items() if k not in (QUICK, "experiment")}
    extra = doc.get(QUICK) or {}
    if not isinstance(extra, Mapping):
        raise ConfigError(f"{QUICK}: expected a mapping of parameters")
    return merge(base, extra) if quick else base


def resolve(
    name: str,
    model: type[Config],
    *,
    file: Path | None = None,
    sets: Sequence[str] = (),
    quick: bool = False,
    defaults: Path | None = None,
) -> Config:
    """Experiment ``name``'s configuration for a run (see the module docstring)."""
    defaults = defaults or default_file(name)
    doc = _layer(read(defaults), quick)
    sources = [str(defaults)]
    if file is not None:
        mine = read(file)
        said = mine.get("experiment")
        if said is not None and said != name:
            raise ConfigError(f"{file}: is for experiment {said!r}, not {name!r}")
        doc = merge(doc, _layer(mine, quick))
        sources.append(str(file))
    for item in sets:
        doc = assign(doc, *parse_set(item))
        sources.append(f"--set {item}")
    return validate(model, doc, sources)


def validate(model: type[Config], doc: Mapping[str, Any], sources: Iterable[str] = ()) -> Config:
    """``doc`` as ``model``; ConfigError listing every problem (and where it came from)."""
    try:
        return model.model_validate(dict(doc))
    except ValidationError as exc:
        problems = [_problem(model, e) for e in exc.errors()]
        where = ", ".join(sources) or model.__name__
        lines = "\n".join(f"  - {p}" for p in problems)
        raise ConfigError(f"{where}: {len(problems)} problem(s):\n{lines}") from None


def _problem(model: type[Config], error: Any) -> str:
    loc = ".".join(str(p) for p in error["loc"]) or "(top)"
    if error["type"] == "extra_forbidden":
        known = _known_keys(model, error["loc"][:-1])
        near = difflib.get_close_matches(str(error["loc"][-1]), known, n=1)
        hint = f" (did you mean `{near[0]}`?)" if near else f" (known: {', '.join(known)})"
        return f"{loc}: unknown key{hint}"
    return f"{loc}: {error['msg']}"


def _known_keys(model: type[BaseModel], path: Sequence[Any]) -> list[str]:
    """The field names at ``path`` inside ``model`` (top level when it cannot be followed)."""
    current: Any = model
    for part in path:
        field = getattr(current, "model_fields", {}).get(part)
        annotation = getattr(field, "annotation", None)
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            break
        current = annotation
    return sorted(getattr(current, "model_fields", {}))


def as_doc(config: Config) -> dict[str, Any]:
    """The configuration as JSON-ready data."""
    return config.model_dump(mode="json")


def differences(
    docs: Sequence[Mapping[str, Any]], *, ignore: Iterable[str] = ("runs",)
) -> list[str]:
    """The top-level keys whose values differ between ``docs`` (``ignore`` left out)."""
    skip = set(ignore)
    keys = sorted({k for d in docs for k in d} - skip)
    return [k for k in keys if len({repr(d.get(k)) for d in docs}) > 1]
