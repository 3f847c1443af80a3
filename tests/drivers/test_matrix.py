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
    assert re.search(r"^(#+ )?Checked against ", text, re.MULTILINE), path
    assert re.search(r"^(#+ )?(Checked )?only against our emulat", text, re.M | re.I), path
    assert re.search(r"https?://|PROTOCOLS\.md|source", text), "cite the document"


def test_a_checked_files_headings_go_under_the_kinds_heading() -> None:
    for kind in KINDS:
        section = matrix.checked_section(kind)
        headings = re.findall(r"^(#+) ", section, re.MULTILINE)
        assert headings[0] == "###" and all(len(h) > 3 for h in headings[1:]), kind


def test_the_rendered_document_has_every_drivers_section() -> None:
    text = matrix.render()
    for kind in KINDS:
        section = matrix.checked_section(kind)
        assert f"### `{kind}`" in section and section in text
    assert "Not checked yet" not in text


@pytest.mark.parametrize("kind", KINDS)
def test_every_driver_says_which_third_party_peer_it_ran_against(kind: str) -> None:
    summary = matrix.peer_summary(kind)
    assert not summary.startswith("not said"), summary
    assert f"| `{kind}` | {summary} |" in matrix.render()
