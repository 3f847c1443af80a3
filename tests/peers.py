"""The real third-party peers for tests (``fabric.peers``): their paths, or a skip whose
reason names what is missing and where it was looked for (never a silent skip). A peer
that fails to build is an error, not a skip."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabric import peers


def reference_dpctl() -> Path:
    """The OpenFlow 1.0 reference dpctl (built once, cached), or skip naming why not."""
    try:
        return peers.dpctl()
    except peers.PeerMissing as exc:
        pytest.skip(f"the OpenFlow 1.0 reference dpctl cannot be had here: {exc}")


def ryu_manager() -> Path:
    """Ryu 4.34's ryu-manager (its venv built once, cached), or skip naming why not."""
    try:
        return peers.ryu_manager()
    except peers.PeerMissing as exc:
        pytest.skip(f"real Ryu 4.34 cannot be had here: {exc}")
