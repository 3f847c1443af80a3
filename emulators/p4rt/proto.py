"""The EMULATOR's P4Runtime protobuf modules (the same generated ``p4.v1`` a switch agent
would use; ``make setup`` regenerates them for protobuf's C implementation) and the
Uint128 election ids. Deliberately not shared with ``drivers.p4runtime``."""

from __future__ import annotations

from google.rpc import code_pb2, status_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

__all__ = ["code_pb2", "p4info_pb2", "p4runtime_pb2", "p4runtime_pb2_grpc", "status_pb2"]

STATUS_DETAILS_KEY = "grpc-status-details-bin"


def election(value: int) -> p4runtime_pb2.Uint128:
    """An election id as a ``Uint128``."""
    return p4runtime_pb2.Uint128(high=value >> 64, low=value & 0xFFFF_FFFF_FFFF_FFFF)


def election_value(uint128: p4runtime_pb2.Uint128) -> int:
    """The int of a ``Uint128`` election id."""
    return int(uint128.high) << 64 | int(uint128.low)
