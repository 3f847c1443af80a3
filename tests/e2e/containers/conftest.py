"""The two-site containers run only under ``make containers-test`` (REROUTE_CONTAINERS=1,
after docker/build.sh built the image from the committed tree): they need a Docker engine
and take minutes on this machine."""

from __future__ import annotations

import os

import pytest

ENABLE = "REROUTE_CONTAINERS"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "containers: the two-site Docker deployment")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if os.environ.get(ENABLE) == "1":
        return
    skip = pytest.mark.skip(reason=f"containers: run with `make containers-test` ({ENABLE}=1)")
    for item in items:
        if item.get_closest_marker("containers"):
            item.add_marker(skip)
