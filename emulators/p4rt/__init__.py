"""A P4Runtime switch EMULATOR (no bmv2, simple_switch_grpc or p4c is obtainable here).

A real gRPC server speaking P4Runtime v1 to its clients, for one device running the
program of a P4Info file (``p4/reroute.p4``: the ternary table ``MyIngress.reroute``),
whose dataplane is an Open vSwitch bridge: each table entry is one OpenFlow 1.3 flow
(same priority, cookie = the entry's metadata), programmed on the bridge's management
socket (a Write as one OpenFlow bundle, read back with ``ovs-ofctl``), so packets really
follow the entries. It shares no code with
the drivers (``tests/test_layers.py``): it reads the P4Info itself and decodes entries by
the names in it.

- ``program``: the P4Info indexed by id, the P4Runtime checks of an entry (error codes
  per update), the canonical form a Read answers with;
- ``dataplane``: an entry of ``MyIngress.reroute`` as a flow of the bridge (``flow``), by
  field and action names; ``bridge``: those flows on the bridge (``openflow``: the
  bundles it writes; ``ovs-ofctl`` dumps for a warm start);
- ``arbitration``: the StreamChannel's primary election (highest election id wins);
- ``table``: the entries (the emulator's state, answered by Read), kept consistent with
  the bridge: an update the bridge refuses fails with a ``p4.v1.Error`` code
  (RESOURCE_EXHAUSTED for a full table) and changes nothing;
- ``server``: the P4Runtime service (grpc.aio); ``__main__``: ``python -m emulators.p4rt``.

The updates of one Write are applied in order, those that fail are reported (gRPC
UNKNOWN with one ``p4.v1.Error`` per update in ``grpc-status-details-bin``), the others
stay applied: a Write is not atomic (only CONTINUE_ON_ERROR is implemented).
"""
