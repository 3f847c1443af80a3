"""The service's config file (YAML), strict: unknown keys are rejected, errors name the field.

```yaml
topology: ../topologies/ngncs-ost.yaml   # relative paths: from this file's directory
inventory: lab-inventory.yaml   # how to reach the devices (default: the running emulated
                           # fabric's, /run/reroute/<fabric>/inventory.yaml)
fabric: ngncs-ost          # that fabric's name (default: the topology's name)
scope: [br2]               # switches this instance manages (default: all)
journal: /run/reroute/ngncs-ost/journal-site-a.sqlite   # default: in the inventory's state_dir
listen: 127.0.0.1:8080
tls: {certificate: api.pem, private_key: api.key}   # HTTPS (default: plain HTTP); add
                           # client_ca: ca.pem to require client certificates signed by it
tokens:
  - {token: "a-long-random-operator-token", role: operator}
  - {token: "a-long-random-read-only-token", role: read}
token_file: tokens.txt     # and/or: lines "ROLE TOKEN" ('#' comments)
step_timeout_s: 10
retention: {reroutes: 10000, days: 30}   # ended reroutes the journal keeps (pending and
                           # running ones are never removed)
store: {kind: sqlite}      # or, for several replicas on one fabric (README "Several replicas"):
# store: {kind: etcd, endpoints: [10.0.0.1:2379, 10.0.0.2:2379, 10.0.0.3:2379],
#         prefix: /reroute/lab, lease_ttl_s: 2, tls: {ca_certificate: ca.pem, ...},
#         user: reroute, password: {env: ETCD_PASSWORD}}
```

``load_config`` returns the validated file; ``resolve`` adds what needs the topology
(``Settings``: loaded topology and inventory, checked scope, token table, the address to
listen on). A bad inventory stops the service before it starts, naming file and device.
"""

from __future__ import annotations

import ipaddress
import math
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from services.reroute import runtime
from services.reroute.errors import ConfigError, RerouteError
from services.reroute.model.inventory import Inventory, check, load_inventory
from services.reroute.model.problems import report, validation_problems
from services.reroute.model.topology import Topology, load_topology
from services.reroute.model.yamlfile import (
    Document,
    YAMLError,
    strict_document,
    yaml_error_line,
    yaml_error_text,
)
from services.reroute.service.auth import Role, TokenTable
from services.reroute.store.config import STEP_SHARE, EtcdStore, SqliteStore, StoreSpec
from services.reroute.store.records import Retention

MIN_TOKEN = 16
STEP_MARGIN_S = 0.5  # a verified step's requests beside its device's read-back lag


def _listen(text: str) -> str:
    parse_listen(text)
    return text


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8080`` for IPv6) -> (host, port); ValueError names the fault."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{text!r}: expected HOST:PORT with a port 0-65535, e.g. 127.0.0.1:8080")
    host = host.removeprefix("[").removesuffix("]")
    if not host:
        raise ValueError(f"{text!r}: the host is missing (e.g. 127.0.0.1:8080)")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        if host != "localhost":
            raise ValueError(f"{text!r}: the host must be an IP address or localhost") from None
    return host, int(port)


class TokenSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    token: str = Field(min_length=MIN_TOKEN, pattern=r"^[\x21-\x7e]+$")
    role: Role


@dataclass(frozen=True, slots=True, kw_only=True)
class Source:
    """Where a config came from: its file, the document (lines), its relative paths."""

    file: Path
    doc: Document
    relative: Mapping[str, str]  # key -> the path as written, for keys taken from file's dir

    def at(self, key: str) -> str:
        """``FILE:LINE: key`` for an error about ``key``."""
        line = self.doc.line((key,))
        return f"{self.file}:{line}: {key}" if line else f"{self.file}: {key}"


class RetentionSpec(BaseModel):
    """``retention:``: ended reroutes are removed from the journal once more than
    ``reroutes`` ended after them, or they ended over ``days`` ago."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    reroutes: int = Field(default=10_000, ge=1, le=10_000_000)
    days: float = Field(default=30.0, gt=0, le=36_500)


class ServeTls(BaseModel):
    """``tls:``: the API over HTTPS (TLS 1.2 or later) with this certificate and key;
    ``client_ca``: also require a client certificate signed by this CA (mutual TLS)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    certificate: Path = Field(description="PEM: the server's certificate (and its chain)")
    private_key: Path = Field(description="PEM: its private key (readable by the service only)")
    client_ca: Path | None = Field(
        default=None, description="PEM: require client certificates signed by this CA"
    )

    def context(self) -> ssl.SSLContext:
        """The server's TLS context (OSError, ssl.SSLError: a file is unreadable or wrong)."""
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(self.certificate, self.private_key)
        if self.client_ca is not None:
            ctx.load_verify_locations(self.client_ca)
            ctx.verify_mode = ssl.CERT_REQUIRED
        return ctx


class ServiceConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    topology: Path = Field(description="the topology file")
    inventory: Path | None = Field(
        default=None,
        description="how to reach the devices (default: the running emulated fabric's, "
        "/run/reroute/<fabric>/inventory.yaml)",
    )
    fabric: str | None = Field(
        default=None, min_length=1, description="the fabric's name (default: the topology's)"
    )
    scope: tuple[str, ...] | None = Field(
        default=None, min_length=1, description="the switches this instance manages (default: all)"
    )
    journal: Path | None = Field(
        default=None, description="the journal file (default: in the inventory's state_dir)"
    )
    listen: Annotated[str, AfterValidator(_listen)] = Field(
        default="127.0.0.1:8080", description="HOST:PORT of the API (and the page, /ui/)"
    )
    tls: ServeTls | None = Field(
        default=None,
        description="serve HTTPS: {certificate: FILE, private_key: FILE, client_ca?: FILE} "
        "(default: plain HTTP, for loopback or behind a TLS proxy)",
    )
    tokens: tuple[TokenSpec, ...] = Field(
        default=(),
        description=f"bearer tokens ({MIN_TOKEN}+ printable characters): read may GET, "
        "operator may also POST and DELETE",
    )
    token_file: Path | None = Field(
        default=None, description="and/or a file of lines 'ROLE TOKEN' ('#' comments)"
    )
    step_timeout_s: float = Field(
        default=10.0, gt=0, le=600, description="seconds one device step may take"
    )
    retention: RetentionSpec = Field(
        default=RetentionSpec(),
        description="ended reroutes kept in the journal: {reroutes: N, days: D} (running "
        "and pending ones are never removed)",
    )
    auto_resync: bool = Field(
        default=True,
        description="a device found out of sync (it came back with fewer of our rules than "
        "the journal expects: a cold restart; a P4 target without its program) is resynced "
        "at once: its program put back, our rules written from the journal (false: only "
        "reported, `reroute recover --resync` does it)",
    )
    store: StoreSpec = Field(
        default=SqliteStore(),
        description="where the journal, queue and device locks live: {kind: sqlite} (one "
        "process, the default) or {kind: etcd, endpoints: [...], ...} (replicas)",
    )
    _source: Source | None = PrivateAttr(default=None)  # the file it was read from


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """A resolved config: what the service runs with."""

    topo: Topology
    fabric: str  # the name the API shows (the topology's, or the config's fabric:)
    scope: frozenset[str] | None
    journal: Path | None  # None: the inventory's journal
    inventory: Inventory | None = None  # None: drivers come from elsewhere (tests' fakes)
    host: str
    port: int
    tokens: TokenTable
    step_timeout_s: float
    retention: Retention = field(default_factory=Retention)
    store: SqliteStore | EtcdStore = field(default_factory=SqliteStore)
    auto_resync: bool = True
    tls: ServeTls | None = None  # None: plain HTTP

    @property
    def scheme(self) -> str:
        return "http" if self.tls is None else "https"


def load_config(path: Path) -> ServiceConfig:
    """Load and validate the service's YAML configuration (ConfigError naming the file, and
    every problem at its line)."""
    try:
        doc = strict_document(path.read_text())
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc
    except YAMLError as exc:
        at = f"{path}:{line}" if (line := yaml_error_line(exc)) else f"{path}"
        raise ConfigError(f"{at}: not valid YAML: {yaml_error_text(exc)}") from exc
    if not isinstance(doc.data, dict):
        raise ConfigError(f"{path}: expected a mapping of settings (topology: FILE, ...)")
    try:
        config = ServiceConfig.model_validate(doc.data)
    except ValidationError as exc:
        raise ConfigError(report(path, validation_problems(exc, ServiceConfig, doc))) from exc
    return _relative_to(config, path, doc)


def _relative_to(config: ServiceConfig, path: Path, doc: Document) -> ServiceConfig:
    """Every relative path of ``config`` taken from the directory of its file ``path``."""
    base = path.absolute().parent
    relative = {
        key: str(value)
        for key, value in config
        if isinstance(value, Path) and not value.is_absolute()
    }
    updates: dict[str, Any] = {k: base / v for k, v in relative.items()}
    if (store := _store_relative_to(config.store, base)) is not config.store:
        updates["store"] = store
    if config.tls is not None:
        files = {k: p for k, p in config.tls if isinstance(p, Path) and not p.is_absolute()}
        updates["tls"] = config.tls.model_copy(update={k: base / p for k, p in files.items()})
    fixed = config.model_copy(update=updates)
    fixed._source = Source(file=path, doc=doc, relative=relative)
    return fixed


def _store_relative_to(store: StoreSpec, base: Path) -> StoreSpec:
    """An etcd store's TLS and password files taken from ``base`` when relative."""
    if not isinstance(store, EtcdStore) or (store.tls is None and store.password is None):
        return store

    def fix(p: Path | None) -> Path | None:
        return None if p is None or p.is_absolute() else base / p

    tls = store.tls and store.tls.model_copy(
        update={k: p for k in ("private_key", "certificate", "ca_certificate")
                if (p := fix(getattr(store.tls, k)))}
    )  # fmt: skip
    password = store.password
    if password is not None and (file := fix(password.file)):
        password = password.model_copy(update={"file": file})
    return store.model_copy(update={"tls": tls, "password": password})


def _at(config: ServiceConfig, key: str) -> str:
    """``FILE:LINE: key`` (just ``key`` for a config not read from a file)."""
    return config._source.at(key) if config._source is not None else key


def _path_error(config: ServiceConfig, key: str, exc: RerouteError) -> ConfigError:
    """An error of the file named by ``key``, saying how a relative path was taken."""
    source = config._source
    note = ""
    if source is not None and key in source.relative:
        note = (
            f" ({source.relative[key]!r} is relative: taken from the directory of "
            f"{source.file}, {source.file.absolute().parent})"
        )
    return ConfigError(f"{_at(config, key)}: {exc}{note}")


def resolve(config: ServiceConfig, *, listen: str | None = None) -> Settings:
    """Load the topology, the tokens and the inventory, check the scope; ``listen``
    overrides the file's."""
    try:
        topo = load_topology(config.topology)
    except RerouteError as exc:
        raise _path_error(config, "topology", exc) from exc
    try:
        host, port = parse_listen(listen or config.listen)
    except ValueError as exc:
        raise ConfigError(f"{'--listen' if listen else _at(config, 'listen')}: {exc}") from exc
    scope = _scope(config, topo)
    fabric = config.fabric or topo.name
    tokens = TokenTable(_tokens(config))
    _check_journal(config)
    _check_tls(config)
    inventory = _inventory(config, topo, fabric, scope)
    _check_step_cap(config, inventory, scope)
    return Settings(
        topo=topo,
        fabric=fabric,
        scope=scope,
        journal=config.journal,
        inventory=inventory,
        host=host,
        port=port,
        tokens=tokens,
        step_timeout_s=config.step_timeout_s,
        retention=Retention(reroutes=config.retention.reroutes, days=config.retention.days),
        store=config.store,
        auto_resync=config.auto_resync,
        tls=config.tls,
    )


def _check_tls(config: ServiceConfig) -> None:
    """The TLS files load (before the service opens any device): the error names them."""
    if config.tls is None:
        return
    try:
        config.tls.context()
    except (OSError, ssl.SSLError) as exc:
        files = ", ".join(str(p) for _, p in config.tls if p is not None)
        raise ConfigError(f"{_at(config, 'tls')}: cannot load {files}: {exc}") from exc


def _check_step_cap(config: ServiceConfig, inv: Inventory, scope: frozenset[str] | None) -> None:
    """Every step can finish within the cap: a device whose read-back lags its writes (a
    controller's statistics poll) needs its lag and ``STEP_MARGIN_S`` per verified step;
    under a cap below that every step would time out (and every undo with it)."""
    etcd = config.store if isinstance(config.store, EtcdStore) else None
    cap = min(config.step_timeout_s, etcd.step_cap_s if etcd else math.inf)
    slow = {
        name: spec.readback_lag_s
        for name, spec in inv.devices.items()
        if (scope is None or name in scope) and spec.readback_lag_s + STEP_MARGIN_S > cap
    }
    if not slow:
        return
    lag = max(slow.values())
    need = lag + STEP_MARGIN_S
    if etcd is not None and etcd.step_cap_s < config.step_timeout_s:
        key, why = "store", f"{STEP_SHARE:g} x lease_ttl_s {etcd.lease_ttl_s}"
        fix = f"lease_ttl_s: {math.ceil(need / STEP_SHARE)} or more"
    else:
        key, why, fix = "step_timeout_s", "step_timeout_s", f"step_timeout_s: {need:g} or more"
    raise ConfigError(
        f"{_at(config, key)}: a device step may take {cap:g} s ({why}), but "
        f"{', '.join(sorted(slow))} show a write in what they read back only after up to "
        f"{lag:g} s (stats_interval_s in {inv.file}); a verified step needs that and "
        f"{STEP_MARGIN_S:g} s: say {fix}, or give them read_back: config"
    )


def _check_journal(config: ServiceConfig) -> None:
    folder = config.journal.parent if config.journal is not None else None
    if folder is not None and not folder.is_dir():
        error = ConfigError(f"{config.journal}: its directory {folder} does not exist")
        raise _path_error(config, "journal", error)


def _inventory(
    config: ServiceConfig, topo: Topology, fabric: str, scope: frozenset[str] | None
) -> Inventory:
    """The inventory named in the config (or the running emulated fabric's), checked
    against the topology for the switches in scope."""
    path = config.inventory or runtime.default_inventory(fabric)
    if config.inventory is None and not path.exists():
        raise ConfigError(
            f"{_at(config, 'inventory')}: none given and no emulated fabric {fabric} is up "
            f"({path} is missing): say inventory: FILE, or `reroute fabric up "
            f"{config.topology}` first"
        )
    try:
        inv = load_inventory(path)
    except ConfigError as exc:
        if "cannot read" not in str(exc):
            raise
        raise _path_error(config, "inventory", exc) from exc
    check(inv, topo, scope)
    return inv


def _scope(config: ServiceConfig, topo: Topology) -> frozenset[str] | None:
    if config.scope is None:
        return None
    switches = {s.name for s in topo.switches} | {o.name for o in topo.optical_switches}
    unknown = sorted(set(config.scope) - switches)
    if unknown:
        raise ConfigError(
            f"{_at(config, 'scope')}: {', '.join(unknown)} not a switch of topology "
            f"{topo.name} (switches: {', '.join(sorted(switches))})"
        )
    return frozenset(config.scope)


def _tokens(config: ServiceConfig) -> dict[str, Role]:
    table = {t.token: t.role for t in config.tokens}
    if config.token_file is not None:
        try:
            table |= read_token_file(config.token_file)
        except ConfigError as exc:
            raise _path_error(config, "token_file", exc) from exc
    if not table:
        where = config._source.file if config._source is not None else "config"
        raise ConfigError(
            f"{where}: tokens: give at least one token (tokens: [...] or token_file: FILE)"
        )
    return table


def read_token_file(path: Path) -> dict[str, Role]:
    """Lines ``ROLE TOKEN`` (role ``read`` or ``operator``); blank lines and ``#`` comments."""
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc
    table: dict[str, Role] = {}
    for n, line in enumerate(lines, start=1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        try:
            spec = TokenSpec(role=Role(words[0]), token=" ".join(words[1:]))
        except (ValueError, ValidationError):
            raise ConfigError(
                f"{path}:{n}: expected 'read|operator TOKEN' with a token of at "
                f"least {MIN_TOKEN} printable characters"
            ) from None
        table[spec.token] = spec.role
    return table
