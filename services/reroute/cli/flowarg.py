"""``--flow`` on the command line: its metavar and help, and errors that say what the shell
did to it.

In a shell ``--flow 10.0.0.2>10.0.0.3`` is a redirect: the command gets ``--flow 10.0.0.2``
and the shell creates an empty file ``10.0.0.3``. ``--flow src=10.0.0.2,dst=10.0.0.3``
needs no quotes: ``=`` and ``,`` mean nothing to any shell, the keys cannot be mistaken for
an address range (``a-b``, ``a..b``) or a port (``a:b``), and they read as the options
after them do (``sport=N``). Examples and hints quote the ``>`` form.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from services.reroute.errors import ConfigError, PlanError
from services.reroute.model.intent import FlowSpec, lacks_destination

METAVAR = "'SRC>DST[,tcp|udp|icmp][,sport=N][,dport=N]'"
HELP = (
    "a flow to move (repeatable); its reverse direction moves with it. Quote it (an unquoted "
    "> is a shell redirect) or write src=SRC,dst=DST[,...], which needs no quotes"
)
# what a shell leaves of ">10.0.0.3,udp,dport=5000": a file of that name
_REDIRECTED = re.compile(r"^\d{1,3}(\.\d{1,3}){3}(,[a-z0-9=,]*)?$")
RECENT_S = 300.0


def example(src: str, dst: str) -> str:
    """Both ways to write a flow on a command line, e.g. for an error message."""
    return f"--flow '{src}>{dst}' (or --flow src={src},dst={dst}, which needs no quotes)"


def parse_flows(
    texts: Sequence[str],
    src: str,
    dst: str,
    here: Path | None = None,
    hosts: Mapping[str, str] | None = None,
) -> tuple[FlowSpec, ...]:
    """The flows of the ``--flow`` options (``hosts``: the topology's host names, which may
    stand for addresses); errors give an example from ``src`` to ``dst`` and, for a flow
    without destination, say that the shell probably took its ``>`` (naming the empty file
    it made in ``here``, the working directory, when there is one)."""
    if not texts:
        raise ConfigError(f"give at least one flow to move, e.g. {example(src, dst)}")
    return tuple(_parse(text, here or Path.cwd(), hosts) for text in texts)


def _parse(text: str, here: Path, hosts: Mapping[str, str] | None) -> FlowSpec:
    try:
        return FlowSpec.parse(text, hosts)
    except PlanError as exc:
        if not lacks_destination(text) or not text.strip():
            raise
        raise PlanError(f"{exc}. {shell_took_redirect(text, here)}") from exc


def shell_took_redirect(text: str, here: Path) -> str:
    """The hint for a flow that lost its ``>DST`` to the shell."""
    src = text.split(",")[0].strip().removesuffix("-")
    made = redirect_files(here)
    if made:
        name = made[0].name
        return (
            f"The shell probably took '>' as a redirect: it created the empty file "
            f"{made[0]} (remove it). Quote the flow: --flow '{src}>{name}', or write "
            f"--flow src={src},dst={name}"
        )
    return (
        "The shell probably took '>' as a redirect (and created an empty file named after "
        f"the destination). Quote the flow: --flow '{src}>DST', or write "
        f"--flow src={src},dst=DST"
    )


def redirect_files(here: Path, now: float | None = None) -> list[Path]:
    """Empty files in ``here`` named like a flow's destination, made in the last minutes
    (what ``--flow A>B`` leaves unquoted), newest first."""
    now = time.time() if now is None else now
    found: list[tuple[float, Path]] = []
    try:
        entries = list(here.iterdir())
    except OSError:
        return []
    for path in entries:
        if not _REDIRECTED.match(path.name):
            continue
        try:
            st = path.stat()
        except OSError:
            continue
        if path.is_file() and st.st_size == 0 and now - st.st_mtime <= RECENT_S:
            found.append((st.st_mtime, path))
    return [p for _, p in sorted(found, reverse=True)]
