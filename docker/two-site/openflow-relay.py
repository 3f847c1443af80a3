"""The site's switch on the management network: a TCP listener that relays each connection to
the bridge's OpenFlow management socket (the site's Open vSwitch runs in the site's fabric
namespace; its unix socket is reachable from the container's own network namespace, a TCP
listener there would not be). site.sh starts it when OPENFLOW_LISTEN is set, so that a
reroute service in another container (the service image, ``reroute-service``) manages the
switch through an ``ovs`` inventory entry ``target: tcp:SITE:PORT``.

Plain OpenFlow, no authentication: for the containers' private management networks only. On
real equipment the switch listens itself, and ``ssl:`` targets with ``tls:`` authenticate
both ends (README, "Using it with real equipment").

    openflow-relay.py HOST:PORT unix:/run/reroute/two-site-docker/ovs/sw1.mgmt
"""

from __future__ import annotations

import asyncio
import contextlib
import sys


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    with contextlib.suppress(ConnectionError, OSError):
        writer.close()


async def main(listen: str, upstream: str) -> None:
    kind, _, path = upstream.partition(":")
    if kind != "unix":
        raise SystemExit(f"openflow-relay: the upstream must be unix:PATH, not {upstream!r}")
    host, _, port = listen.rpartition(":")

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_unix_connection(path)
        except OSError as exc:
            print(f"openflow-relay: {upstream}: {exc}", file=sys.stderr, flush=True)
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    server = await asyncio.start_server(client, host or "0.0.0.0", int(port))
    print(f"openflow-relay: {listen} -> {upstream}", file=sys.stderr, flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(sys.argv[1], sys.argv[2]))
