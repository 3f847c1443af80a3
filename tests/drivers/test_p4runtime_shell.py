"""Interop: p4runtime-shell (the P4Runtime project's own client, in ``.venv-p4shell``,
built by ``make setup``) against our EMULATOR, beside our driver.

p4runtime-shell connects as a second controller with a lower election id (a backup):
it reads the entries our driver wrote and may not write; once it is the primary, it
writes an entry that our driver reads back as a flow rule.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import text_format

from drivers.base import FlowMatch, FlowRule, Output, Prefix
from drivers.p4runtime import P4RuntimeDriver, mapping
from drivers.p4runtime.proto import p4runtime_pb2
from tests.drivers.test_p4runtime import OTHERS, PROGRAM, RULE, add, emulator

ROOT = Path(__file__).resolve().parents[2]
SHELL_PYTHON = ROOT / ".venv-p4shell" / "bin" / "python"
CLIENT = ROOT / "scripts" / "p4shell_client.py"
INSERTED = FlowRule(  # what scripts/p4shell_client.py inserts
    match=FlowMatch(in_port=2, eth_type=0x0800, ipv4_dst=Prefix.parse("10.9.9.9")),
    priority=50,
    actions=(Output(1),),
    cookie=0,
)


@pytest.fixture(scope="module", autouse=True)
def _shell() -> None:
    assert SHELL_PYTHON.exists(), "no .venv-p4shell: run `make setup`"


async def shell(address: str, election_id: int, *command: str) -> dict[str, Any]:
    process = await asyncio.create_subprocess_exec(
        str(SHELL_PYTHON), str(CLIENT), address, str(election_id), *command,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return result


def test_p4runtime_shell_reads_our_entries_as_backup_and_we_read_what_it_writes() -> None:
    ours = [RULE, *OTHERS]

    async def main() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], list[FlowRule]]:
        async with emulator() as (_, _, address):
            async with P4RuntimeDriver("dut", address, device_id=1, election_id=10) as driver:
                await driver.apply([add(r) for r in ours])
                backup_read = await shell(address, 5, "read")
                backup_insert = await shell(address, 5, "insert")
            primary_insert = await shell(address, 20, "insert")
            async with P4RuntimeDriver("dut", address, device_id=1, election_id=10) as driver:
                return backup_read, backup_insert, primary_insert, await driver.read()

    backup_read, backup_insert, primary_insert, table = asyncio.run(main())
    assert backup_read["primary"] is False
    read = [text_format.Parse(e, p4runtime_pb2.TableEntry()) for e in backup_read["entries"]]
    assert {mapping.to_rule(PROGRAM, e) for e in read} == set(ours)
    assert backup_insert["ok"] is False and "PERMISSION_DENIED" in backup_insert["error"]
    assert primary_insert == {"ok": True, "primary": True}
    assert set(table) == {*ours, INSERTED} and len(table) == len(ours) + 1
