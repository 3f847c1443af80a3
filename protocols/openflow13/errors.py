"""Names of OpenFlow 1.3 error types and codes, and of the ONF bundle errors OVS sends.

On OpenFlow 1.3 Open vSwitch reports bundle failures as experimenter errors (type 0xFFFF,
experimenter ``0x4F4E4600``) with error types 2300..2315, the OpenFlow 1.4
``OFPET_BUNDLE_FAILED`` codes shifted by 2300.
"""

from __future__ import annotations

ONF_EXPERIMENTER = 0x4F4E4600
ONF_BUNDLE_ERROR_BASE = 2300


def _codes(names: str) -> tuple[str, ...]:
    return tuple(names.split())


TYPES: dict[int, tuple[str, str, tuple[str, ...]]] = {
    # type: (type name, code prefix, code names in code order)
    0: ("OFPET_HELLO_FAILED", "OFPHFC", ("INCOMPATIBLE", "EPERM")),
    1: ("OFPET_BAD_REQUEST", "OFPBRC", _codes("""
        BAD_VERSION BAD_TYPE BAD_MULTIPART BAD_EXPERIMENTER BAD_EXP_TYPE EPERM BAD_LEN
        BUFFER_EMPTY BUFFER_UNKNOWN BAD_TABLE_ID IS_SLAVE BAD_PORT BAD_PACKET
        MULTIPART_BUFFER_OVERFLOW""")),
    2: ("OFPET_BAD_ACTION", "OFPBAC", _codes("""
        BAD_TYPE BAD_LEN BAD_EXPERIMENTER BAD_EXP_TYPE BAD_OUT_PORT BAD_ARGUMENT EPERM
        TOO_MANY BAD_QUEUE BAD_OUT_GROUP MATCH_INCONSISTENT UNSUPPORTED_ORDER BAD_TAG
        BAD_SET_TYPE BAD_SET_LEN BAD_SET_ARGUMENT""")),
    3: ("OFPET_BAD_INSTRUCTION", "OFPBIC", _codes("""
        UNKNOWN_INST UNSUP_INST BAD_TABLE_ID UNSUP_METADATA UNSUP_METADATA_MASK
        BAD_EXPERIMENTER BAD_EXP_TYPE BAD_LEN EPERM""")),
    4: ("OFPET_BAD_MATCH", "OFPBMC", _codes("""
        BAD_TYPE BAD_LEN BAD_TAG BAD_DL_ADDR_MASK BAD_NW_ADDR_MASK BAD_WILDCARDS BAD_FIELD
        BAD_VALUE BAD_MASK BAD_PREREQ DUP_FIELD EPERM""")),
    5: ("OFPET_FLOW_MOD_FAILED", "OFPFMFC", _codes("""
        UNKNOWN TABLE_FULL BAD_TABLE_ID OVERLAP EPERM BAD_TIMEOUT BAD_COMMAND
        BAD_FLAGS""")),
    6: ("OFPET_GROUP_MOD_FAILED", "OFPGMFC", ()),
    7: ("OFPET_PORT_MOD_FAILED", "OFPPMFC", ("BAD_PORT", "BAD_HW_ADDR", "BAD_CONFIG")),
    8: ("OFPET_TABLE_MOD_FAILED", "OFPTMFC", ("BAD_TABLE", "BAD_CONFIG", "EPERM")),
    9: ("OFPET_QUEUE_OP_FAILED", "OFPQOFC", ("BAD_PORT", "BAD_QUEUE", "EPERM")),
    10: ("OFPET_SWITCH_CONFIG_FAILED", "OFPSCFC", ("BAD_FLAGS", "BAD_LEN", "EPERM")),
    11: ("OFPET_ROLE_REQUEST_FAILED", "OFPRRFC", ("STALE", "UNSUP", "BAD_ROLE")),
    12: ("OFPET_METER_MOD_FAILED", "OFPMMFC", ()),
    13: ("OFPET_TABLE_FEATURES_FAILED", "OFPTFFC", ()),
}  # fmt: skip

BUNDLE_CODES = _codes(
    """
    UNKNOWN EPERM BAD_ID BUNDLE_EXIST BUNDLE_CLOSED OUT_OF_BUNDLES BAD_TYPE BAD_FLAGS
    MSG_BAD_LEN MSG_BAD_XID MSG_UNSUP MSG_CONFLICT MSG_TOO_MANY MSG_FAILED TIMEOUT
    BUNDLE_IN_PROGRESS"""
)


def error_name(err_type: int, code: int, experimenter: int | None = None) -> str:
    """``OFPET_BAD_MATCH/OFPBMC_BAD_PREREQ``, ``ONF/OFPBFC_MSG_FAILED``, or numbers."""
    if experimenter is not None:
        return _experimenter_name(code, experimenter)
    if err_type not in TYPES:
        return f"OFPET_{err_type}/{code}"
    type_name, prefix, codes = TYPES[err_type]
    code_name = f"{prefix}_{codes[code]}" if code < len(codes) else f"{prefix}_{code}"
    return f"{type_name}/{code_name}"


def code_name(err_type: int, code: int, experimenter: int | None = None) -> str:
    """Just the code part of ``error_name``, e.g. ``OFPBMC_BAD_PREREQ``."""
    return error_name(err_type, code, experimenter).rsplit("/", 1)[-1]


def _experimenter_name(exp_type: int, experimenter: int) -> str:
    index = exp_type - ONF_BUNDLE_ERROR_BASE
    if experimenter == ONF_EXPERIMENTER and 0 <= index < len(BUNDLE_CODES):
        return f"ONF/OFPBFC_{BUNDLE_CODES[index]}"
    return f"EXPERIMENTER {experimenter:#x}/{exp_type}"
