"""The one registry of how the fabric plays each driver kind: kind -> its ``Player``
(``fabric.player``), one module per kind, in the order the fabric starts them."""

from __future__ import annotations

from fabric import hp, odlsite, ovssite, p4rtsite, ryusite
from fabric.errors import FabricError
from fabric.player import Player

PLAYERS: dict[str, Player] = {
    p.kind: p for p in (ovssite.PLAYER, hp.PLAYER, odlsite.PLAYER, ryusite.PLAYER, p4rtsite.PLAYER)
}


def player(kind: str, where: str = "") -> Player:
    """The player of driver ``kind`` (FabricError naming those there are, if none)."""
    found = PLAYERS.get(kind)
    if found is None:
        raise FabricError(
            f"{where}the emulated fabric cannot play a {kind} switch (it plays: "
            f"{', '.join(PLAYERS)}); real ones are reached through an inventory"
        )
    return found
