"""A controller's target URL with credentials in it is refused, saying neither the password
nor the URL; ofctl_rest behind an authenticating proxy takes ``user`` + ``password`` from
the environment or a file, and sends them (HTTP Basic) on every request."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path

import pytest
from aiohttp import web

from drivers.errors import ConfigError
from drivers.ryu_rest import RyuRestDriver
from drivers.ryu_rest.spec import RyuRestSpec
from drivers.spec import Expect, SecretRef
from services.reroute.model.inventory import load_inventory

SECRET = "s3cr3t-not-for-logs"
INVENTORY = """\
topology: ngncs-ost
devices:
  br1: {{driver: ovs, target: "unix:/run/x/br1.mgmt"}}
  br2: {{driver: ovs, target: "unix:/run/x/br2.mgmt"}}
  br3: {{driver: ovs, target: "unix:/run/x/br3.mgmt"}}
  br4: {entry}
  ost1: {{driver: polatis_scpi, target: "TCPIP0::127.0.0.1::5025::SOCKET"}}
"""


@pytest.mark.parametrize(
    "entry",
    [
        f'{{driver: odl, target: "http://admin:{SECRET}@192.0.2.4:8181", '
        "password: {env: ODL_PASSWORD}}",
        f'{{driver: ryu_rest, target: "https://ryu:{SECRET}@192.0.2.5:8080"}}',
    ],
)
def test_credentials_in_a_target_are_refused_without_showing_them(
    tmp_path: Path, entry: str
) -> None:
    path = tmp_path / "lab.yaml"
    path.write_text(INVENTORY.format(entry=entry))
    with pytest.raises(ConfigError) as info:
        load_inventory(path)
    said = str(info.value)
    assert "br4" in said and "credentials" in said and "password:" in said
    assert SECRET not in said and "192.0.2" not in said


def test_ofctl_rest_behind_a_proxy_gets_basic_auth_from_a_secret_file(tmp_path: Path) -> None:
    secret = tmp_path / "ryu-password"
    secret.write_text(f"{SECRET}\n")
    seen: list[str] = []

    async def switches(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization", ""))
        return web.json_response([1])

    async def main() -> None:
        app = web.Application()
        app.router.add_get("/stats/switches", switches)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        try:
            spec = RyuRestSpec(
                driver="ryu_rest", target=f"http://127.0.0.1:{port}", dpid=1, user="ryu",
                password=SecretRef(file=secret),
            )  # fmt: skip
            async with RyuRestDriver.from_spec("br4", spec, Expect()):
                pass
        finally:
            await runner.cleanup()

    asyncio.run(main())
    assert seen == ["Basic " + base64.b64encode(f"ryu:{SECRET}".encode()).decode()]
    with pytest.raises(ValueError, match="both user and password"):
        RyuRestSpec(driver="ryu_rest", target="http://127.0.0.1:1", user="ryu")
