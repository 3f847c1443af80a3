"""The Polatis EMULATOR of one optical switch of a running fabric, its cross-connects real
layer-1 patches (``fabric.layer1``). The player (``fabric.kinds.polatis_scpi``) runs one per
optical switch (``python -m fabric.kinds.polatis_scpi.panel``).
"""

from __future__ import annotations

import argparse

from emulators.polatis.__main__ import main as polatis_main
from fabric.layer1 import FabricLayer1, fabric_layer1

MODULE = "fabric.kinds.polatis_scpi.panel"


def _layer1(args: argparse.Namespace) -> FabricLayer1:
    return fabric_layer1(args.fabric, args.node)


def main(argv: list[str] | None = None) -> int:
    """Run the Polatis emulator of one optical switch of a fabric, patching its bridge."""
    parser = argparse.ArgumentParser(
        prog=f"python -m {MODULE}",
        description="Run a Polatis SCPI EMULATOR whose circuits are patches in a fabric.",
    )
    parser.add_argument("--fabric", required=True, help="name of the running fabric")
    parser.add_argument("--node", required=True, help="the optical switch it plays")
    return polatis_main(argv, _layer1, parser=parser)


if __name__ == "__main__":
    raise SystemExit(main())
