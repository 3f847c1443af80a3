"""A P4Runtime switch EMULATOR (no bmv2, simple_switch_grpc or p4c is obtainable here).

A real gRPC server speaking P4Runtime v1 to its clients, for one device running one fixed
program, ``reroute`` (``drivers.p4runtime.program``: the ternary table
``MyIngress.reroute``), whose dataplane is an Open vSwitch bridge: each table entry is one
OpenFlow 1.3 flow (same priority, cookie = the entry's metadata), programmed through the
project's ``OvsDriver`` on the bridge's management socket, so packets really follow the
entries.

- ``arbitration``: the StreamChannel's primary election (highest election id wins);
- ``table``: the entries (the emulator's state, answered by Read), checked as P4Runtime
  says, and kept consistent with the bridge: an update the bridge refuses fails with a
  ``p4.v1.Error`` code (RESOURCE_EXHAUSTED for a full table) and changes nothing;
- ``server``: the P4Runtime service (grpc.aio); ``__main__``: ``python -m fabric.p4rt``.

The updates of one Write are applied in order, those that fail are reported (gRPC
UNKNOWN with one ``p4.v1.Error`` per update in ``grpc-status-details-bin``), the others
stay applied: a Write is not atomic (only CONTINUE_ON_ERROR is implemented).

The generated P4Runtime modules need protobuf's pure-Python implementation:
``drivers.p4runtime.proto`` sets ``PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python`` before
protobuf is first imported.
"""
