"""``--flow`` as a shell hands it over: the three forms, and what the shell did to an
unquoted ``>`` said plainly (with the empty file it made), before anything is read or changed."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from services.reroute.cli.flowarg import parse_flows, redirect_files
from services.reroute.errors import ConfigError, PlanError
from services.reroute.model.intent import FlowSpec

ROOT = Path(__file__).resolve().parents[4]
NGNCS = ROOT / "topologies" / "ngncs-ost.yaml"


def shell(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``command`` run by bash in ``cwd``, ``reroute`` being this checkout's."""
    env = {**os.environ, "REROUTE_RUN_DIR": str(cwd / "run")}  # no fabric of anyone's
    reroute = f"{sys.executable} -m services.reroute.cli"
    return subprocess.run(
        ["bash", "-c", f"cd {cwd} && PYTHONPATH={ROOT} {reroute} {command}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


@pytest.mark.parametrize(
    "text",
    [
        "10.0.0.2>10.0.0.3,udp,dport=5000",
        "10.0.0.2->10.0.0.3,udp,dport=5000",
        "src=10.0.0.2,dst=10.0.0.3,udp,dport=5000",
        "udp,dport=5000,dst=10.0.0.3,src=10.0.0.2",
    ],
)
def test_every_form_is_the_same_flow(text: str) -> None:
    assert str(FlowSpec.parse(text)) == "10.0.0.2/32>10.0.0.3/32,udp,dport=5000"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("10.0.0.2", "no destination: expected SRC>DST, SRC->DST or src=SRC,dst=DST"),
        ("dst=10.0.0.3", "no source"),
        ("10.0.0.2>10.0.0.3,dst=10.0.0.4", "dst given twice"),
        ("10.0.0.2>vm3", "'vm3' is not an IPv4 address or prefix"),
        ("10.0.0.2>10.0.0.3,colour=red", "unknown option 'colour=red' (src=, dst=, tcp"),
    ],
)
def test_malformed_flows_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(PlanError, match="flow .*" + message.replace("(", r"\(")):
        FlowSpec.parse(text)


def test_no_flow_gets_an_example_in_both_forms_quoted() -> None:
    with pytest.raises(ConfigError) as info:
        parse_flows([], "10.0.0.2", "10.0.0.3")
    assert "--flow '10.0.0.2>10.0.0.3' (or --flow src=10.0.0.2,dst=10.0.0.3" in str(info.value)


def test_only_recent_empty_files_named_like_an_address_count_as_redirects(
    tmp_path: Path,
) -> None:
    for name in ("10.0.0.3", "10.0.0.4,udp,dport=5", "notes.txt", "10.0.0.9"):
        (tmp_path / name).touch()
    (tmp_path / "10.0.0.9").write_text("not empty")
    old = tmp_path / "10.0.0.5"
    old.touch()
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    assert sorted(p.name for p in redirect_files(tmp_path)) == [
        "10.0.0.3",
        "10.0.0.4,udp,dport=5",
    ]


def test_an_unquoted_flow_in_bash_is_explained_with_the_file_the_shell_made(
    tmp_path: Path,
) -> None:
    done = shell(f"plan --topology {NGNCS} --flow 10.0.0.2>10.0.0.3 --to temporary", tmp_path)
    assert done.returncode == 1
    made = tmp_path / "10.0.0.3"
    assert made.exists() and made.stat().st_size == 0  # the shell's, and nothing written
    assert "flow '10.0.0.2': no destination" in done.stderr
    assert f"the empty file {made} (remove it)" in done.stderr
    assert "--flow '10.0.0.2>10.0.0.3', or write --flow src=10.0.0.2,dst=10.0.0.3" in done.stderr
    ok = shell(f"plan --topology {NGNCS} --flow src=10.0.0.2,dst=10.0.0.3 --to temporary", tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("MBB: 1 flow(s) long -> temporary")


def test_the_monitor_explains_an_unquoted_arrow_before_it_calls_anything(
    tmp_path: Path,
) -> None:
    done = shell(
        "monitor rtt --target 10.10.0.2 --api http://127.0.0.1:9 --token x"
        " --flow 10.10.0.1->10.10.0.2 --to standby --once",
        tmp_path,
    )
    assert done.returncode == 1
    assert "flow '10.10.0.1-': no destination" in done.stderr
    assert "--flow '10.10.0.1>10.10.0.2'" in done.stderr
    assert "Traceback" not in done.stderr


def test_host_names_stand_for_their_addresses_where_a_topology_names_them(
    tmp_path: Path,
) -> None:
    hosts = {"vm2": "10.0.0.2", "vm3": "10.0.0.3"}
    (named,) = parse_flows(["vm2>vm3,udp"], "10.0.0.2", "10.0.0.3", tmp_path, hosts)
    assert named == FlowSpec.parse("10.0.0.2>10.0.0.3,udp")
    with pytest.raises(PlanError, match="'vm9' is not a host of the topology; hosts: vm2, vm3"):
        parse_flows(["vm9>vm3"], "10.0.0.2", "10.0.0.3", tmp_path, hosts)
    with pytest.raises(PlanError, match="'vm2' is not an IPv4 address or prefix"):  # no topology
        FlowSpec.parse("vm2>vm3")
