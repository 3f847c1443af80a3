"""The experiments ``reroute experiment`` knows, by name, in the order ``list`` shows them."""

from __future__ import annotations

from experiments.bandwidth_steering import BandwidthSteering
from experiments.data_rate_sweep import DataRateSweep
from experiments.impulse_response import ImpulseResponse
from experiments.lock_sweep import LockSweep
from experiments.mptcp import Mptcp
from experiments.mptcp_bdp import MptcpBdp
from experiments.odl_poll_sweep import OdlPollSweep
from experiments.ost_vs_mbb import OstVsMbb
from experiments.rto_sweep import RtoSweep
from experiments.runner import Experiment
from experiments.switching_delay import SwitchingDelay

EXPERIMENTS: dict[str, Experiment] = {
    e.name: e
    for e in (
        OstVsMbb(),
        RtoSweep(),
        BandwidthSteering(),
        DataRateSweep(),
        SwitchingDelay(),
        ImpulseResponse(),
        Mptcp(),
        MptcpBdp(),
        LockSweep(),
        OdlPollSweep(),
    )
}


def get(name: str) -> Experiment:
    """The experiment called ``name``; KeyError with the known names if there is none."""
    try:
        return EXPERIMENTS[name]
    except KeyError:
        known = ", ".join(EXPERIMENTS)
        raise KeyError(f"no experiment {name!r}; known: {known}") from None
