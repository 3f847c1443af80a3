"""Typos in a topology, inventory or service config: every problem at once, each at its
file and line, an unknown key with the nearest known one; the same for a key a model
gains later (nothing lists today's keys)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from services.reroute.cli.main import main
from services.reroute.errors import ConfigError, TopologyError
from services.reroute.model.inventory import check, load_inventory
from services.reroute.model.problems import report, validation_problems
from services.reroute.model.topology import load_topology
from services.reroute.model.yamlfile import strict_document
from services.reroute.service.config import ServiceConfig, load_config, resolve

ROOT = Path(__file__).resolve().parents[3]
NGNCS = ROOT / "topologies" / "ngncs-ost.yaml"

TOPOLOGY = """\
name: t
topology:
  subnets: [10.0.0.0/24]
  nodes:
    vm1: {kind: host, interfaces: {eth0: 10.0.0.1/24}}
    br1: {kind: ovs, dpid: 1, protocls: [OpenFlow13]}
    ost1: {kind: opticl, driver: polatis_scpi, size: 4x4}
  links:
    - endpionts: ["vm1:eth0", "br1:p1"]
  paths:
    a: {src: vm1, dst: vm1, via: ["br1:p1"], inital: true}
"""


def test_a_topology_with_typos_names_each_at_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "t.yaml"
    file.write_text(TOPOLOGY)
    with pytest.raises(TopologyError) as info:
        load_topology(file)
    assert (info.value.line, info.value.where) == (6, "node br1")
    assert str(info.value) == "\n".join(
        [
            f"{file}: 5 problems",
            f"  {file}:6: node br1: protocls: unknown key; did you mean `protocols`?",
            f"  {file}:7: node ost1: unknown kind 'opticl'; did you mean `optical`?",
            f"  {file}:9: link 1: endpionts: unknown key; did you mean `endpoints`?",
            f"  {file}:9: link 1: endpoints: missing (required)",
            f"  {file}:11: path a: inital: unknown key; did you mean `initial`?",
        ]
    )
    assert main(["topo", "check", str(file)]) == 1
    assert capsys.readouterr().err == f"reroute: error: {info.value}\n"


def test_a_topology_fault_found_after_the_schema_names_its_line(tmp_path: Path) -> None:
    file = tmp_path / "t.yaml"
    text = TOPOLOGY.replace(", protocls: [OpenFlow13]", "").replace("opticl", "optical")
    file.write_text(text.replace("endpionts", "endpoints").replace(", inital: true", ""))
    with pytest.raises(TopologyError) as info:
        load_topology(file)
    assert str(info.value).startswith(f"{file}:11: path a: ")


def test_an_inventory_with_typos_shows_every_one(tmp_path: Path) -> None:
    file = tmp_path / "lab.yaml"
    file.write_text(
        "topology: ngncs-ost\n"
        "devices:\n"
        '  br1: {driver: ovs, targt: "tcp:127.0.0.1:6001"}\n'
        '  br2: {driver: ovs, target: "tcp:127.0.0.1:6002", timeout: 3}\n'
        '  ost1: {driver: polatis_scip, target: "TCPIP0::127.0.0.1::5025::SOCKET"}\n'
    )
    with pytest.raises(ConfigError) as info:
        load_inventory(file)
    assert str(info.value).splitlines() == [
        f"{file}: 4 problems",
        f"  {file}:3: device br1: targt: unknown key; did you mean `target`?",
        f"  {file}:3: device br1: target: missing (required)",
        f"  {file}:4: device br2: timeout: unknown key; did you mean `timeout_s`?",
        f"  {file}:5: device ost1: no driver for kind 'polatis_scip'; did you mean `polatis_scpi`?",
    ]


def test_a_service_config_with_typos_shows_every_one(tmp_path: Path) -> None:
    file = tmp_path / "reroute.yaml"
    file.write_text(
        f"topology: {NGNCS}\n"
        "tokns: [{token: operator-secret-0123456789, role: operator}]\n"
        "step_timeout: 5\n"
        "listen: 127.0.0.1\n"
    )
    with pytest.raises(ConfigError) as info:
        load_config(file)
    assert str(info.value).splitlines() == [
        f"{file}: 3 problems",
        f"  {file}:2: tokns: unknown key; did you mean `tokens`?",
        f"  {file}:3: step_timeout: unknown key; did you mean `step_timeout_s`?",
        f"  {file}:4: listen: '127.0.0.1': expected HOST:PORT with a port 0-65535, e.g. "
        "127.0.0.1:8080",
    ]


def test_a_relative_path_that_is_not_there_shows_the_path_tried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "reroute.yaml").write_text(
        "tokens: [{token: operator-secret-0123456789, role: operator}]\n"
        "topology: topologies/ngncs-ost.yaml\n"
    )
    monkeypatch.chdir(tmp_path)  # as `reroute serve --config etc/reroute.yaml` from here
    with pytest.raises(ConfigError) as info:
        resolve(load_config(Path("etc/reroute.yaml")))
    tried = tmp_path / "etc" / "topologies" / "ngncs-ost.yaml"
    assert str(info.value) == (
        f"etc/reroute.yaml:2: topology: {tried}: cannot read: No such file or directory "
        "('topologies/ngncs-ost.yaml' is relative: taken from the directory of "
        f"etc/reroute.yaml, {tmp_path / 'etc'})"
    )


def test_bad_yaml_names_its_line(tmp_path: Path) -> None:
    file = tmp_path / "reroute.yaml"
    file.write_text("topology: x.yaml\ntokens: [{token: a, role: read}\n")
    with pytest.raises(ConfigError, match=r"reroute.yaml:3: not valid YAML: expected ',' or ']'"):
        load_config(file)


class Etcd(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["etcd"]
    endpoints: list[str]
    prefix: str = "/reroute"


class Sqlite(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["sqlite"]
    path: Path


class WithStore(ServiceConfig):
    """The service config as it may grow: a section with kinds of its own."""

    store: Annotated[Etcd | Sqlite, Field(discriminator="kind")] | None = None


def test_a_key_the_config_gains_later_gets_the_same_help() -> None:
    text = "topology: t.yaml\nstore:\n  kind: etcd\n  endpionts: [127.0.0.1:2379]\n  prefx: /x\n"
    doc = strict_document(text)
    with pytest.raises(ValidationError) as info:
        WithStore.model_validate(doc.data)
    assert report("c.yaml", validation_problems(info.value, WithStore, doc)).splitlines() == [
        "c.yaml: 3 problems",
        "  c.yaml:2: store.endpoints: missing (required)",  # the section's line
        "  c.yaml:4: store.endpionts: unknown key; did you mean `endpoints`?",
        "  c.yaml:5: store.prefx: unknown key; did you mean `prefix`?",
    ]


def test_a_misspelt_node_or_device_name_gets_the_nearest_one(tmp_path: Path) -> None:
    file = tmp_path / "t.yaml"
    good = TOPOLOGY.replace(", protocls: [OpenFlow13]", "").replace("opticl", "optical")
    good = good.replace("endpionts", "endpoints").replace("inital", "initial")
    file.write_text(good.replace('"br1:p1"]', '"bt1:p1"]', 1))
    with pytest.raises(
        TopologyError, match=re.escape("endpoint bt1:p1 names no node; did you mean `br1`?")
    ):
        load_topology(file)
    file.write_text(good.replace('"vm1:eth0"', '"vm1:eht0"'))
    with pytest.raises(
        TopologyError, match=re.escape("vm1 has no interface 'eht0'; did you mean `eth0`?")
    ):
        load_topology(file)
    file.write_text(good.replace("src: vm1", "src: vn1"))
    with pytest.raises(
        TopologyError, match=re.escape("src must be a host node; did you mean `vm1`?")
    ):
        load_topology(file)
    lab = tmp_path / "lab.yaml"
    lab.write_text(
        "topology: ngncs-ost\ndevices:\n"
        '  br1: {driver: ovs, target: "tcp:127.0.0.1:6001"}\n'
        '  bt2: {driver: ovs, target: "tcp:127.0.0.1:6002"}\n'
    )
    with pytest.raises(ConfigError) as info:
        check(load_inventory(lab), load_topology(NGNCS))
    assert str(info.value).startswith(
        f"{lab}:4: device bt2: not a switching node of topology ngncs-ost; did you mean `br2`? "
    )
