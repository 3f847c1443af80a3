"""The deployment's subnets: free ones on a Docker host where some are taken (the CI run
whose management network Docker had placed over the long-haul link's range)."""

from __future__ import annotations

from ipaddress import IPv4Network

import pytest

from tests.e2e.containers.deployment import free_prefixes


def test_the_compose_defaults_when_nothing_is_taken() -> None:
    taken = [IPv4Network("172.17.0.0/16"), IPv4Network("192.0.2.0/24")]
    assert free_prefixes(5, taken) == [f"172.30.{i}" for i in range(11, 16)]


def test_taken_ranges_are_skipped_whatever_their_size() -> None:
    taken = [IPv4Network("172.30.12.0/29"), IPv4Network("172.30.14.0/23")]
    assert free_prefixes(3, taken) == ["172.30.11", "172.30.13", "172.30.16"]


def test_a_docker_pool_over_all_of_172_30_moves_them_to_172_31() -> None:
    taken = [IPv4Network("172.30.0.0/16")]
    assert free_prefixes(2, taken) == ["172.31.0", "172.31.1"]


def test_none_free_is_an_error_naming_the_range() -> None:
    with pytest.raises(RuntimeError, match=r"172\.30\.0\.0/15"):
        free_prefixes(1, [IPv4Network("172.16.0.0/12")])
