"""docs/drivers.md carries each driver's CHECKED.md: what was checked against the device's
public documentation (cited) and what only against our emulator."""

from __future__ import annotations

import re

import pytest

from drivers import matrix
from drivers.base import registered

KINDS = registered()


@pytest.mark.parametrize("kind", KINDS)
def test_every_driver_says_what_was_checked_and_against_what(kind: str) -> None:
    path = matrix.checked_file(kind)
    text = path.read_text()
    assert text.startswith(f"# {kind}: "), path
    assert "Checked against public documentation:" in text
    assert re.search(r"^Only against our emulat", text, re.MULTILINE), path
    assert "http" in text or "PROTOCOLS.md" in text, "cite the document"


def test_the_rendered_document_has_every_drivers_section() -> None:
    text = matrix.render()
    for kind in KINDS:
        section = matrix.checked_section(kind)
        assert f"### `{kind}`" in section and section in text
    assert "Not checked yet" not in text
