"""The generated P4Runtime modules (PyPI ``p4runtime``), imported in one place.

The ``p4runtime`` wheel's generated code predates protobuf 4's C implementation (upb) and
only loads with the pure-Python one: ``PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python``.
protobuf reads that variable when ``google.protobuf`` is first imported, so this module
sets it (unless already set) before importing anything of protobuf, and fails with a clear
message when protobuf was already loaded with another implementation. Import the P4Runtime
messages only from here (``drivers.p4runtime`` and ``fabric.p4rt`` do).
"""

from __future__ import annotations

import os

os.environ.setdefault("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", "python")

from google.protobuf.internal import api_implementation

if api_implementation.Type() != "python":  # pragma: no cover - depends on import order
    raise ImportError(
        "the p4runtime protobuf modules need PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python, "
        f"but protobuf was already loaded with the {api_implementation.Type()!r} "
        "implementation: set the variable in the environment, or import drivers.p4runtime "
        "before anything that imports google.protobuf"
    )

from google.rpc import code_pb2, status_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

__all__ = ["code_pb2", "p4info_pb2", "p4runtime_pb2", "p4runtime_pb2_grpc", "status_pb2"]

STATUS_DETAILS_KEY = "grpc-status-details-bin"  # the trailer of a Write's per-update errors


def code_name(code: int) -> str:
    """``google.rpc.Code`` name of a number (``RESOURCE_EXHAUSTED``), or the number."""
    try:
        return str(code_pb2.Code.Name(code))
    except ValueError:
        return str(code)


def election(value: int) -> p4runtime_pb2.Uint128:
    return p4runtime_pb2.Uint128(high=value >> 64, low=value & 0xFFFF_FFFF_FFFF_FFFF)


def election_value(uint128: p4runtime_pb2.Uint128) -> int:
    return int(uint128.high) << 64 | int(uint128.low)
