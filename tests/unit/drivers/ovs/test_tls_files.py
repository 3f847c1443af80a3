"""An ``ssl:`` target whose TLS files cannot be used: the error names the files, before any
connection is tried."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from drivers.errors import ConfigError
from drivers.ovs import OvsDriver
from drivers.spec import TlsFiles


def test_unusable_tls_files_are_named_in_the_error(tmp_path: Path) -> None:
    key, cert, ca = (tmp_path / n for n in ("switch.key", "switch.crt", "ca.crt"))
    key.write_text("not a key\n")
    cert.write_text("not a certificate\n")
    ca.write_text("not a CA\n")
    tls = TlsFiles(private_key=key, certificate=cert, ca_certificate=ca)
    driver = OvsDriver("br1", "ssl:127.0.0.1:1", timeout=1.0, tls=tls)
    with pytest.raises(ConfigError) as err:
        asyncio.run(driver.open())
    text = str(err.value)
    assert text.startswith("br1: its TLS files (")
    assert all(str(p) in text for p in (key, cert, ca)), text
