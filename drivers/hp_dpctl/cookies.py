"""64-bit cookies through the OpenFlow 1.0 reference ``dpctl``, which cannot carry them.

Its ``add-flow``/``add-flows``/``mod-flows`` read ``cookie=VALUE`` with C ``atoi``
(``utilities/dpctl.c``, ``str_to_flow``): a hexadecimal cookie becomes 0, a decimal one is
cut to a 32-bit ``int`` and stored sign-extended to 64 bits (``-1`` is
``0xffffffffffffffff`` on the switch). ``dump-flows`` prints the 64-bit cookie in decimal
(``lib/ofp-print.c``). So dpctl can write 2^32 cookies: below 2^31, and within 2^31 of 2^64.

The driver folds the cookies it is given into those, and unfolds what it reads, so the
engine's 64-bit cookies survive without the engine knowing. A cookie is OWNER (bits 48..63:
who wrote the entry) and VALUE (bits 0..15); it can be folded when bits 16..47 are zero:

    fold(OWNER << 48 | VALUE) = the C int whose 32 bits are OWNER << 16 | VALUE

Read back, a cookie dpctl can have written (below 2^31, or at least 2^64 - 2^31) unfolds
the same way; any other was written with its full 64 bits by another tool (ovs-ofctl, a
controller) and is taken as printed. Cookies below 2^16 (OWNER 0) are the same both ways.
Two things follow: a foreign entry written with a cookie in [2^16, 2^31) by another tool
reads as the folded cookie it looks like (e.g. 0x10000 as 0x0001000000000000), and
``0xffff00000000ffff`` (the int -1, all ones on the switch) is not written: OpenFlow
reserves an all-ones cookie.
"""

from __future__ import annotations

OWNER_SHIFT = 48
VALUE_MASK = 0xFFFF
MIDDLE = ((1 << OWNER_SHIFT) - 1) & ~VALUE_MASK  # bits 16..47: must be zero to fold
INT_MAX = (1 << 31) - 1
U64 = 1 << 64
ALL_ONES = (1 << 32) - 1


def fold(cookie: int) -> int | None:
    """The C int dpctl must read for ``cookie`` (None: dpctl cannot carry it)."""
    if not 0 <= cookie < U64 or cookie & MIDDLE:
        return None
    bits = (cookie >> OWNER_SHIFT) << 16 | cookie & VALUE_MASK
    if bits == ALL_ONES:
        return None
    return bits if bits <= INT_MAX else bits - (1 << 32)


def unfold(printed: int) -> int:
    """The cookie of an entry whose ``dump-flows`` cookie is ``printed``."""
    if printed <= INT_MAX:
        bits = printed
    elif printed >= U64 - (1 << 31):
        bits = printed & ALL_ONES
    else:
        return printed  # a full 64-bit cookie: not written by dpctl
    return (bits >> 16) << OWNER_SHIFT | bits & VALUE_MASK


def why_not(cookie: int) -> str | None:
    """Why dpctl cannot carry ``cookie`` (None: it can)."""
    if fold(cookie) is not None:
        return None
    return (
        f"cookie {cookie:#x} cannot pass the reference dpctl, which reads cookie= with atoi "
        "(32 bits): the driver folds OWNER (bits 48..63) and VALUE (bits 0..15) and needs "
        "bits 16..47 zero (use tool: ovs-ofctl for any 64-bit cookie)"
    )
