"""``reroute topo``: validate and summarise topology files, print the JSON Schema."""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from services.reroute.model.generate import leaf_spine, to_yaml
from services.reroute.model.topofile import TopologyFile
from services.reroute.model.topology import Topology, load_topology

SCHEMA_FILE = Path(__file__).resolve().parents[3] / "topologies" / "topology.schema.json"


def json_schema() -> str:
    """The JSON Schema of topology files."""
    schema = TopologyFile.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "reroute topology file"
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def summary(topo: Topology) -> str:
    """A few lines describing a valid topology: its nodes by kind, links and paths."""
    kinds = Counter(str(n.kind) for n in topo.nodes.values())
    lines = [
        f"{topo.name}: valid ({topo.file})",
        "  nodes: " + ", ".join(f"{count} {kind}" for kind, count in sorted(kinds.items())),
        f"  links: {len(topo.links)}",
    ]
    for host in topo.hosts:
        addrs = ", ".join(f"{i.name} {i.address}" for i in host.interfaces)
        lines.append(f"  host {host.name}: {addrs}")
    for optical in topo.optical_switches:
        xcs = ", ".join(str(c) for c in sorted(optical.cross_connects)) or "none"
        lines.append(f"  optical {optical.name}: cross-connects {xcs}")
    for path in topo.paths.values():
        mark = " (initial)" if path.initial else ""
        lines.append(f"  path {path.name}{mark}: {path.describe()}")
        if path.circuits:
            lines.append("    needs " + ", ".join(str(c) for c in sorted(path.circuits)))
    return "\n".join(lines)


def _check(args: argparse.Namespace) -> int:
    for file in args.files:
        print(summary(load_topology(file)))
    return 0


def _schema(args: argparse.Namespace) -> int:
    text = json_schema()
    if args.write:
        SCHEMA_FILE.write_text(text)
        print(f"wrote {SCHEMA_FILE}")
    else:
        print(text, end="")
    return 0


def _generate(args: argparse.Namespace) -> int:
    try:
        topology = leaf_spine(
            args.racks, args.spines, args.ocs, args.name or "", args.optical_driver
        )
        text = to_yaml(topology)
    except ValueError as exc:
        raise SystemExit(f"reroute topo generate: {exc}") from None
    if args.out is None:
        print(text, end="")
        return 0
    args.out.write_text(text)
    print(summary(load_topology(args.out)))
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``topo check|schema|generate`` to the ``reroute`` parser."""
    topo = sub.add_parser("topo", help="validate topology files")
    tsub = topo.add_subparsers(dest="topo_command", required=True, metavar="ACTION")
    check = tsub.add_parser("check", help="validate topology files and summarise them")
    check.add_argument("files", nargs="+", type=Path, metavar="FILE")
    check.set_defaults(func=_check)
    schema = tsub.add_parser("schema", help="print the topology JSON Schema")
    schema.add_argument("--write", action="store_true", help=f"write it to {SCHEMA_FILE.name}")
    schema.set_defaults(func=_schema)
    gen = tsub.add_parser("generate", help="write a generated topology file")
    kinds = gen.add_subparsers(dest="generator", required=True, metavar="KIND")
    ls = kinds.add_parser("leaf-spine", help="leaf-spine with optical circuit switches")
    ls.add_argument("--racks", type=int, required=True, help="leaf switches, one host each")
    ls.add_argument("--spines", type=int, required=True)
    ls.add_argument("--ocs", type=int, default=0, help="optical circuit switches")
    ls.add_argument(
        "--optical-driver",
        metavar="KIND",
        help="the optical switches' driver kind (default: the one registered kind that "
        "makes cross-connects; `reroute inventory kinds` lists them)",
    )
    ls.add_argument("--name", help="topology name (default: from the sizes)")
    ls.add_argument("--out", type=Path, help="file to write and validate (default: stdout)")
    ls.set_defaults(func=_generate)
