"""The one table of the experiments' backends: how the packet switches are driven.

A backend names a driver kind of the packet switches, the topology files that drive them
that way (seed 003's testbed and the two-site fabric of seeds 000/001), what it adds
(extra flows), which of seed 000's Table I configurations it plays, and its colour in
every plot. An experiment lists the backends it runs on by name; ``--backend`` offers
exactly the names of this table that some experiment runs on. Pure data (the command line
reads it before it imports any experiment).

To add a backend: one row here, then its name in the ``backends`` of the experiments that
can run it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class Backend:
    """One way of driving the packet switches."""

    name: str
    driver: str  # the driver kind of the packet switches (drivers/ registry)
    about: str  # one line for help texts and reports
    colour: str  # matplotlib colour, the same in every plot
    ost: str | None = None  # seed 003's testbed driven this way (topologies/)
    two_site: str | None = None  # the two-site fabric driven this way (topologies/)
    extra_flows: int = 0  # impulse-response: flows moved beside the measured one
    local: bool = False  # impulse-response: traffic and monitors on the controller hosts
    seed_000: str = ""  # seed 000 Table I configurations it plays: "path[,rtt]" letters
    impulse: bool = True  # with a two-site fabric: run by impulse-response (seed 000's)


TABLE: tuple[Backend, ...] = (
    Backend(
        name="ovs",
        driver="ovs",
        about="OpenFlow 1.3 with bundles, straight to each switch",
        colour="tab:blue",
        ost="ngncs-ost.yaml",
        two_site="two-site-longhaul.yaml",
    ),
    Backend(
        name="ryu",
        driver="ryu_rest",
        about="through a Ryu ofctl_rest controller (seed 003's), the fabric's EMULATOR",
        colour="tab:cyan",
        ost="ngncs-ost-ryu.yaml",
        two_site="two-site-ryu.yaml",  # bench/two_site_backends.py; not a seed 000 method
        impulse=False,
    ),
    Backend(
        name="dpctl",
        driver="hp_dpctl",
        about="OpenFlow 1.0 to each switch, no controller (the seeds' dpctl method)",
        colour="tab:red",
        ost="ngncs-ost-dpctl.yaml",
        two_site="two-site-dpctl.yaml",
        seed_000="A",
    ),
    Backend(
        name="dpctl+10",
        driver="hp_dpctl",
        about="dpctl with 10 extra flows per border switch (seed 000 Figure 11)",
        colour="tab:orange",
        two_site="two-site-dpctl.yaml",
        extra_flows=10,
        seed_000="A+10",
    ),
    Backend(
        name="dpctl+100",
        driver="hp_dpctl",
        about="dpctl with 100 extra flows per border switch (seed 000 Figure 11)",
        colour="tab:brown",
        two_site="two-site-dpctl.yaml",
        extra_flows=100,
        seed_000="A+100",
    ),
    Backend(
        name="odl",
        driver="odl",
        about="through an OpenDaylight northbound EMULATOR, ODL remote mode",
        colour="tab:green",
        two_site="two-site-odl.yaml",
        seed_000="C,D",
    ),
    Backend(
        name="odl-local",
        driver="odl",
        about="ODL local mode: traffic and monitors on the controller hosts c1, c2",
        colour="tab:olive",
        two_site="two-site-odl-b.yaml",
        local=True,
        seed_000="B",
    ),
    Backend(
        name="p4runtime",
        driver="p4runtime",
        about="P4Runtime switches running p4/reroute.p4 (the fabric's EMULATOR)",
        colour="tab:purple",
        ost="ngncs-ost-p4.yaml",
        two_site="two-site-p4.yaml",
    ),
)
BACKENDS: dict[str, Backend] = {b.name: b for b in TABLE}


def get(name: str) -> Backend:
    """The backend called ``name``; KeyError naming the known ones."""
    try:
        return BACKENDS[name]
    except KeyError:
        raise KeyError(f"no backend {name!r}; known: {', '.join(BACKENDS)}") from None


def colour(name: str) -> str:
    """The plot colour of backend ``name`` (grey for one this table does not know)."""
    found = BACKENDS.get(name)
    return found.colour if found is not None else "tab:gray"


def ost_backends() -> tuple[str, ...]:
    """The backends seed 003's testbed can be driven by."""
    return tuple(b.name for b in TABLE if b.ost is not None)


def two_site_backends() -> tuple[str, ...]:
    """The backends the two-site fabric can be driven by."""
    return tuple(b.name for b in TABLE if b.two_site is not None)


def impulse_backends() -> tuple[str, ...]:
    """The backends impulse-response runs on: the two-site ones it measures."""
    return tuple(b.name for b in TABLE if b.two_site is not None and b.impulse)


def seed_000_letter(name: str, degradation: str) -> str:
    """Seed 000 Table I's configuration a backend plays with ``degradation`` (``path`` or
    ``rtt``): ``A``, ``B``, ``C``, ``D``, ``A+10``..., or "" when the seed has none."""
    found = BACKENDS.get(name)
    letters = found.seed_000.split(",") if found is not None and found.seed_000 else []
    by = dict(zip(("path", "rtt"), letters, strict=False))  # listed in that order
    return by.get(degradation, "")
