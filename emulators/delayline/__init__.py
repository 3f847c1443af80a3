"""Delay line: an EMULATOR of a long-haul connection (a userspace ANUE network emulator).

This kernel has no netem qdisc, so the fabric emulates the delay of a long-haul link in
userspace. A delay line bridges two interfaces at layer 2 (e.g. ``lh1-p1`` and ``lh1-p2``,
both in one network namespace, neither attached to a bridge): every frame received on one
leaves the other after a configurable one-way delay, in order. The delay is the same both
ways by default and may be set per direction; it changes at run time over HTTP, as the seeds
changed the ANUE emulator's delay with curl ("rtt extension" degradation). A change applies
to frames received from then on: frames already queued keep their due time.

Parts:
    model    DelayState, DirectionStats, LineStats; validation of a delay change
    ports    promiscuous AF_PACKET sockets bound to one interface
    forward  Forwarder (one direction: a FIFO of frames with due times) and its loop
    line     DelayLine: two ports, two forwarders, a thread per direction
    control  the HTTP endpoint (loopback only): GET/PUT /delay, GET /stats, GET /healthz
    errors   DelayLineError, and Refused (a change refused, naming its field)
    __main__ the process: ``python -m emulators.delayline --netns NS --a IF --b IF ...``

Its typed client is the fabric's (``fabric.delaycontrol``).
"""

from emulators.delayline.line import DelayLine
from emulators.delayline.model import DelayState, DirectionStats, LineStats

__all__ = ["DelayLine", "DelayState", "DirectionStats", "LineStats"]
