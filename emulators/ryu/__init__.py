"""A Ryu ``ofctl_rest``-compatible controller EMULATOR (seed 003's controller).

A real OpenFlow 1.3 controller (os-ken, the maintained fork of Ryu; its OpenFlow
listener and the switch-events application of ``emulators.odl``) serving the REST shapes of
Ryu's ``ryu.app.ofctl_rest`` for the calls seed 003's scripts made, so the
``ryu_rest`` driver can be run and tested against real switches:

- ``rest``: the HTTP side (aiohttp): ``/stats/switches``, ``/stats/flow/<dpid>``,
  ``/stats/portdesc/<dpid>``, ``/stats/port/<dpid>``,
  ``/stats/flowentry/<cmd>``, ``/stats/flowentry/clear/<dpid>``,
  with ofctl_rest's status codes and (empty) error bodies; bodies are converted to and
  from OpenFlow 1.3 messages by os-ken's own ``os_ken.lib.ofctl_v1_3``, the module Ryu's
  ofctl_rest uses, so match and action names are exactly Ryu's;
- ``__main__``: ``python -m emulators.ryu``.

As in Ryu, a flow-mod is answered 200 once it is sent: a switch's refusal (OFPT_ERROR)
only shows in the emulator's log. os-ken >= 2.0 ships no ofctl_rest application (and
Ryu's no longer imports on Python 3.11), hence this emulator.
"""
