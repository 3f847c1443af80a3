"""The service config file: strict, errors name the file and the field."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Literal

import pytest
from pydantic import BaseModel, Field

from services.reroute.cli.main import main
from services.reroute.errors import ConfigError
from services.reroute.model.modeldoc import keys_help
from services.reroute.service.auth import Role
from services.reroute.service.config import ServiceConfig, load_config, parse_listen, resolve
from tests.unit.services.service.conftest import NGNCS

TOKEN = "t" * 20


INVENTORY = """\
topology: ngncs-ost
state_dir: state
devices:
  br1: {driver: ovs, target: "tcp:127.0.0.1:6001"}
  br2: {driver: ovs, target: "tcp:127.0.0.1:6002"}
  br3: {driver: ovs, target: "tcp:127.0.0.1:6003"}
  br4: {driver: ovs, target: "tcp:127.0.0.1:6004"}
  ost1: {driver: polatis_scpi, target: "TCPIP0::127.0.0.1::5025::SOCKET"}
"""


def write(tmp_path: Path, text: str) -> Path:
    """The config ``text`` (and an inventory of the ngncs-ost devices, lab.yaml, beside it)."""
    (tmp_path / "lab.yaml").write_text(INVENTORY)
    path = tmp_path / "reroute.yaml"
    path.write_text(text)
    return path


def test_a_full_config_resolves(tmp_path: Path) -> None:
    (tmp_path / "tokens.txt").write_text(f"# site A\nread {'r' * 20}\n\noperator {'o' * 20}\n")
    path = write(
        tmp_path,
        f"topology: {NGNCS}\ninventory: lab.yaml\nfabric: lab\nscope: [br2, br3]\n"
        "journal: j.sqlite\n"
        f"listen: '[::1]:9000'\ntokens: [{{token: {TOKEN}, role: operator}}]\n"
        "token_file: tokens.txt\nstep_timeout_s: 2.5\n",
    )
    s = resolve(load_config(path))
    assert (s.fabric, s.scope) == ("lab", frozenset({"br2", "br3"}))
    assert s.journal == tmp_path / "j.sqlite"
    assert s.inventory is not None and s.inventory.state_dir == tmp_path / "state"
    assert (s.host, s.port, s.step_timeout_s) == ("::1", 9000, 2.5)
    assert s.tokens.role_of(f"Bearer {'r' * 20}") is Role.READ
    assert s.tokens.role_of(f"Bearer {TOKEN}") is Role.OPERATOR
    assert s.tokens.role_of("Bearer nope") is None and len(s.tokens) == 3


def test_defaults_fabric_is_the_topology_name_and_its_inventory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REROUTE_RUN_DIR", str(tmp_path / "run"))
    path = write(tmp_path, f"topology: {NGNCS}\ntokens: [{{token: {TOKEN}, role: read}}]\n")
    with pytest.raises(ConfigError, match="no emulated fabric ngncs-ost is up"):
        resolve(load_config(path))
    (tmp_path / "run" / "ngncs-ost").mkdir(parents=True)
    (tmp_path / "run" / "ngncs-ost" / "inventory.yaml").write_text(INVENTORY)
    s = resolve(load_config(path), listen="127.0.0.1:0")
    assert (s.fabric, s.scope, s.journal, s.port) == ("ngncs-ost", None, None, 0)
    assert s.inventory is not None
    assert s.inventory.journal == tmp_path / "run" / "ngncs-ost" / "state" / "journal.sqlite"


@pytest.mark.parametrize(
    ("text", "names"),
    [
        (
            "colour: red\n",
            "reroute.yaml:2: colour: unknown key (known: auto_resync, fabric, inventory,",
        ),
        ("step_timeout_s: -1\n", "reroute.yaml:2: step_timeout_s: Input should be greater"),
        ("listen: 'localhost'\n", "reroute.yaml:2: listen: 'localhost': expected HOST:PORT"),
        ("listen: 'example.com:80'\n", "reroute.yaml:2: listen"),
        ("tokens: [{token: short, role: read}]\n", "reroute.yaml:2: tokens[0].token: String"),
        (f"tokens: [{{token: {TOKEN}, role: admin}}]\n", "reroute.yaml:2: tokens[0].role"),
        (
            f"tokens: [{{token: {TOKEN}, role: read, extra: 1}}]\n",
            "reroute.yaml:2: tokens[0].extra: unknown key (known: role, token)",
        ),
    ],
)
def test_bad_fields_are_named(tmp_path: Path, text: str, names: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, f"topology: {NGNCS}\n{text}"))
    assert str(err.value).startswith(str(tmp_path / "reroute.yaml"))
    assert names in str(err.value)


@pytest.mark.parametrize(
    ("text", "names"),
    [
        (f"topology: {NGNCS}\n", "tokens: give at least one"),
        (f"topology: {NGNCS}\nscope: [br9]\ntokens: [{{token: {TOKEN}, role: read}}]", "br9"),
        (f"topology: missing.yaml\ntokens: [{{token: {TOKEN}, role: read}}]", "topology:"),
        (f"topology: {NGNCS}\ntoken_file: nofile\n", "token_file"),
    ],
)
def test_resolve_errors_are_named(tmp_path: Path, text: str, names: str) -> None:
    with pytest.raises(ConfigError, match=names):
        resolve(load_config(write(tmp_path, text)))


def test_token_file_lines_are_checked(tmp_path: Path) -> None:
    (tmp_path / "t").write_text("operator short\n")
    path = write(tmp_path, f"topology: {NGNCS}\ntoken_file: t\n")
    with pytest.raises(ConfigError, match=r"t:1: expected 'read\|operator TOKEN'"):
        resolve(load_config(path))


def test_listen_parsing() -> None:
    assert parse_listen("0.0.0.0:8080") == ("0.0.0.0", 8080)
    assert parse_listen("localhost:1") == ("localhost", 1)
    for bad in ("8080", ":80", "1.2.3.4:99999", "[::1]"):
        with pytest.raises(ValueError):
            parse_listen(bad)


def test_serve_help_lists_every_key_of_the_config_model(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as done:
        main(["serve", "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "config keys (a YAML mapping; relative paths are taken from its directory):" in out
    for name in ServiceConfig.model_fields:
        assert f"\n  {name}: " in out, name
    assert "  topology: FILE            the topology file (required)" in out
    assert "tokens: [{token: TEXT, role: read|operator}, ...]" in out
    assert "(default 10.0, > 0, <= 600)" in out


def test_a_key_the_model_gains_is_listed_with_its_shape() -> None:
    class Store(BaseModel):
        kind: Literal["etcd"]
        endpoints: list[str]

    class Grown(ServiceConfig):
        store: Store | None = Field(default=None, description="where the journal lives")

    assert "  store: {kind: etcd, endpoints: [TEXT, ...]}\n" in keys_help(Grown) + "\n"
    assert "where the journal lives" in keys_help(Grown)


def test_apply_help_explains_flow_and_step_timeout(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["apply", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--flow 'SRC>DST[,tcp|udp|icmp][,sport=N][,dport=N]'" in out
    assert "Quote it (an unquoted > is a shell redirect) or write src=SRC,dst=DST" in out
    assert "--step-timeout S seconds one device step" in out


def test_a_port_in_use_is_an_error_naming_the_key_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        path = write(
            tmp_path,
            f"topology: {NGNCS}\ninventory: lab.yaml\nlisten: 127.0.0.1:{port}\n"
            f"tokens: [{{token: {TOKEN}, role: operator}}]\n",
        )
        assert main(["serve", "--config", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"reroute: error: {path}: listen: cannot listen on 127.0.0.1:{port}: ")
    assert "Address already in use" in err and "Traceback" not in err


ODL_INVENTORY = """\
topology: ngncs-ost
state_dir: state
devices:
  br1: {driver: ovs, target: "tcp:127.0.0.1:6001"}
  br2: {driver: odl, target: "http://127.0.0.1:8181", password: {env: HOME}%s}
  br3: {driver: odl, target: "http://127.0.0.1:8181", password: {env: HOME}%s}
  br4: {driver: ovs, target: "tcp:127.0.0.1:6004"}
  ost1: {driver: polatis_scpi, target: "TCPIP0::127.0.0.1::5025::SOCKET"}
"""
ETCD = "store: {kind: etcd, endpoints: ['127.0.0.1:2379'], lease_ttl_s: %d}\n"


@pytest.mark.parametrize(
    ("br3", "settings", "refusal"),
    [  # ODL confirms a write at its next statistics poll (3 s by default): a step needs it
        ("", ETCD % 2, r"reroute.yaml:\d+: store: a device step may take 0.75 s \(0.375 x "
         r"lease_ttl_s 2\), but br2, br3 show a write .* after up to 3 s .* say "
         r"lease_ttl_s: 10 or more, or give them read_back: config"),
        ("", ETCD % 10, None),
        (", stats_interval_s: 0.2", ETCD % 2, r"but br2 show .* up to 3 s"),
        ("", "step_timeout_s: 3\n", r"step_timeout_s: a device step may take 3 s .* say "
         r"step_timeout_s: 3.5 or more"),
        ("", "step_timeout_s: 3.5\n", None),
        ("", f"scope: [br1, br4, ost1]\n{ETCD % 2}", None),  # not this replica's devices
    ],
)  # fmt: skip
def test_a_step_cap_below_a_device_s_read_back_lag_is_refused(
    tmp_path: Path, br3: str, settings: str, refusal: str | None
) -> None:
    (tmp_path / "lab.yaml").write_text(ODL_INVENTORY % ("", br3))
    path = tmp_path / "reroute.yaml"
    tokens = f"tokens: [{{token: {TOKEN}, role: read}}]\n"
    path.write_text(f"topology: {NGNCS}\ninventory: lab.yaml\n{tokens}{settings}")
    config = load_config(path)
    if refusal is None:
        assert resolve(config).inventory is not None
        return
    with pytest.raises(ConfigError, match=refusal):
        resolve(config)
    # read_back: config trusts the controller: nothing waits for a poll
    (tmp_path / "lab.yaml").write_text(
        ODL_INVENTORY % (", read_back: config", f"{br3}, read_back: config")
    )
    assert resolve(load_config(path)).inventory is not None
