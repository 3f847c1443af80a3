"""The monitor's ICMP sampler, on loopback and in a namespace of our own: rtt of answered
echoes, NaN and loss for unanswered ones, the age of an outstanding echo as a lower bound."""

from __future__ import annotations

import itertools
import math
import subprocess
import time
from collections.abc import Iterator
from ipaddress import IPv4Address

import pytest

from services.reroute.monitor.samplers import LossWindow, Pinger

pytestmark = pytest.mark.fabric
NS = "rr-test-pinger"


@pytest.fixture
def lonely_ns() -> Iterator[str]:
    """A namespace with only loopback: nothing outside it answers, or is even reachable."""
    subprocess.run(["ip", "netns", "add", NS], check=True)
    subprocess.run(["ip", "-n", NS, "link", "set", "lo", "up"], check=True)
    try:
        yield NS
    finally:
        subprocess.run(["ip", "netns", "delete", NS], check=True)


def samples(sampler: Pinger | LossWindow, n: int, period: float = 0.01) -> list[float]:
    out = []
    for _ in range(n):
        out.append(sampler.sample())
        time.sleep(period)
    return out


def test_answered_echoes_give_small_rtts(lonely_ns: str) -> None:
    pinger = Pinger(lonely_ns, IPv4Address("127.0.0.1"), timeout_s=0.2)
    values = samples(pinger, 20)[2:]
    pinger.close()
    assert all(0 < v < 5 for v in values), values  # kernel-stamped: not the 10 ms period


def test_unanswered_echoes_are_nan_and_loss(lonely_ns: str) -> None:
    pinger = Pinger(lonely_ns, IPv4Address("10.255.0.1"), timeout_s=0.03)  # no route at all
    assert all(math.isnan(v) for v in samples(pinger, 5))
    loss = LossWindow(Pinger(lonely_ns, IPv4Address("10.255.0.1"), timeout_s=0.03), size=5)
    assert samples(loss, 8)[-1] == 1.0
    pinger.close()


def test_an_outstanding_echo_reports_its_age(lonely_ns: str) -> None:
    """Echoes nobody answers (the namespace ignores them): the sampler reports the age of
    the oldest one, growing, until its timeout turns it into NaN."""
    sysctl = ["ip", "netns", "exec", lonely_ns, "sysctl", "-qw"]
    subprocess.run([*sysctl, "net.ipv4.icmp_echo_ignore_all=1"], check=True)
    pinger = Pinger(lonely_ns, IPv4Address("127.0.0.1"), timeout_s=0.3)
    values = samples(pinger, 40)
    pinger.close()
    ages = values[:20]
    assert all(b >= a for a, b in itertools.pairwise(ages)), ages
    assert ages[-1] >= 150  # 20 samples of 10 ms: the first echo is that old
    assert any(math.isnan(v) for v in values[25:])  # then it times out
