"""An OpenDaylight-compatible northbound EMULATOR (no ODL distribution is obtainable here).

A real OpenFlow 1.3 controller (os-ken) that Open vSwitch bridges connect to, serving the
URL shapes of OpenDaylight's northbound REST so the seeds' "ODL method" can be run and
tested: a host script sends flows to the controller's northbound, the controller programs
the switch over OpenFlow.

- ``flows``: the emulator's own flow model (what ODL's inventory model can say here);
- ``restconf`` / ``adsal``: JSON bodies of RESTCONF (RFC 8040 and the older draft) and of
  Hydrogen's AD-SAL flowprogrammer, both ways;
- ``datastore``: the config datastore (what was asked) and the operational one (what the
  switches report, refreshed by the statistics poll);
- ``oskenapp`` / ``southbound``: the os-ken application and its thread-safe bridge to the
  asyncio side;
- ``controller``: config writes -> flow-mods, the statistics poll, reconnect handling;
- ``northbound``: the HTTP server (aiohttp); ``__main__``: ``python -m emulators.odl``.

As in ODL, a flow the switch refuses (OFPT_ERROR) stays in the config datastore, never
shows in the operational one, and is only reported in the emulator's log.
"""
