"""The experiments ``reroute experiment`` knows, by name, in the order ``list`` shows them."""

from __future__ import annotations

from experiments.bandwidth_steering import BandwidthSteering
from experiments.impulse_response import ImpulseResponse
from experiments.mptcp import Mptcp
from experiments.ost_vs_mbb import OstVsMbb
from experiments.rto_sweep import RtoSweep
from experiments.runner import Experiment

EXPERIMENTS: dict[str, Experiment] = {
    e.name: e
    for e in (
        OstVsMbb(),
        RtoSweep(),
        BandwidthSteering(),
        ImpulseResponse(),
        Mptcp(),
    )
}


def get(name: str) -> Experiment:
    """The experiment called ``name``; KeyError with the known names if there is none."""
    try:
        return EXPERIMENTS[name]
    except KeyError:
        known = ", ".join(EXPERIMENTS)
        raise KeyError(f"no experiment {name!r}; known: {known}") from None
