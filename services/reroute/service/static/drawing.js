// The drawing: the topology as SVG, laid out by hand (packet switches on a circle, optical
// switches and long-haul nodes in the middle, hosts outside), each optical switch's
// cross-connects as read from it, and every path that carries flows over its links.
// Everything takes the model m = {topo, flows, optics} as the API gives it.

import { svg } from "./dom.js";

const COLORS = ["#d9480f", "#1c7ed6", "#2b8a3e", "#ae3ec9", "#f08c00", "#0c8599"];


export function parseHop(text) {
  const m = /^(.+)\[(\d+)>(\d+)\]$/.exec(text);
  return m ? { node: m[1], inPort: +m[2], outPort: +m[3] } : { node: text };
}


function opticalOf(m, name) {
  return (m.optics?.switches || []).find((o) => o.name === name) || null;
}

function duplex(optical, port) {
  // an optical switch's duplex port i is ingress i and egress N+i
  const n = optical ? optical.ingress_count : 0;
  return n && port > n ? port - n : port;
}

function layout(topo) {
  const kinds = Object.fromEntries(topo.nodes.map((n) => [n.name, n.kind]));
  const cores = topo.nodes.filter((n) => n.kind === "optical" || n.kind === "longhaul");
  const hosts = topo.nodes.filter((n) => n.kind === "host");
  const switches = topo.nodes.filter((n) => !cores.includes(n) && n.kind !== "host");
  const pos = {};
  const radius = 170;
  const start = switches.length === 2 ? 180 : 135;
  switches.forEach((n, i) => {
    const a = ((start + (i * 360) / switches.length) * Math.PI) / 180;
    pos[n.name] = { x: radius * Math.cos(a), y: -radius * Math.sin(a) };
  });
  // optical switches and long-haul nodes in the middle; below the line when two
  // switches face each other (so their direct links stay in sight)
  const middle = switches.length === 2 ? 110 : 0;
  cores.forEach((n, i) => {
    const offset = (i - (cores.length - 1) / 2) * 150;
    pos[n.name] = { x: offset, y: middle };
  });
  const neighbours = {};
  for (const [a, b] of topo.links) {
    const [na, nb] = [a.split(":")[0], b.split(":")[0]];
    (neighbours[na] ||= []).push(nb);
    (neighbours[nb] ||= []).push(na);
  }
  const perSwitch = {};
  hosts.forEach((h, i) => {
    const sw = (neighbours[h.name] || []).find((n) => kinds[n] !== "host" && pos[n]);
    if (!sw) {
      pos[h.name] = { x: -200 + i * 80, y: 280 };
      return;
    }
    const k = (perSwitch[sw] = (perSwitch[sw] || 0) + 1) - 1;
    const base = pos[sw];
    const len = Math.hypot(base.x, base.y) || 1;
    const angle = Math.atan2(base.y, base.x) + (k % 2 ? 1 : -1) * Math.ceil(k / 2) * 0.35;
    const reach = len + 105;
    pos[h.name] = { x: reach * Math.cos(angle), y: reach * Math.sin(angle) };
  });
  return pos;
}

const BOX = 62; // half the side of an optical switch's box

function portPoint(center, towards) {
  // where the ray from the box's center to `towards` leaves the box
  const dx = towards.x - center.x;
  const dy = towards.y - center.y;
  const scale = BOX / Math.max(Math.abs(dx), Math.abs(dy), 1e-9);
  return { x: center.x + dx * scale, y: center.y + dy * scale };
}

function linkLines(m, pos, ports) {
  // each link's line, by "a b" and "b a" (endpoints); parallel links between the same
  // two nodes are drawn side by side, 14 px apart
  const point = (endpoint) => ports[normalPort(m, endpoint)] || pos[endpoint.split(":")[0]];
  const pairs = {};
  for (const link of m.topo.links) {
    const pair = link.map((e) => e.split(":")[0]).sort().join(" ");
    (pairs[pair] ||= []).push(link);
  }
  const lines = {};
  for (const links of Object.values(pairs)) {
    links.forEach(([a, b], i) => {
      const by = (i - (links.length - 1) / 2) * 14;
      const [first] = [a, b].sort(); // one side for both directions of the pair
      const [p, q] = first === a ? [point(a), point(b)] : [point(b), point(a)];
      const len = Math.hypot(q.x - p.x, q.y - p.y) || 1;
      const n = { x: (-(q.y - p.y) / len) * by, y: ((q.x - p.x) / len) * by };
      const [pa, pb] = first === a ? [p, q] : [q, p];
      lines[`${a} ${b}`] = [{ x: pa.x + n.x, y: pa.y + n.y }, { x: pb.x + n.x, y: pb.y + n.y }];
      lines[`${b} ${a}`] = [...lines[`${a} ${b}`]].reverse();
    });
  }
  return lines;
}

function portPoints(m, pos) {
  // "node:port" of an optical switch or long-haul node -> its point on the node's box
  const points = {};
  const boxed = new Set(m.topo.nodes.filter((n) => n.kind === "optical").map((n) => n.name));
  for (const [a, b] of m.topo.links) {
    for (const [mine, other] of [[a, b], [b, a]]) {
      const node = mine.split(":")[0];
      if (!boxed.has(node)) continue;
      const port = +mine.split(":")[1].replace(/^p/, "");
      const key = `${node}:${duplex(opticalOf(m, node), port)}`;
      points[key] = portPoint(pos[node], pos[other.split(":")[0]]);
    }
  }
  return points;
}

function pathPoints(m, path, pos, ports) {
  // hops name the packet switches (in>out ports); between two of them the light may
  // cross an optical switch or a long-haul node: follow the links from port to port
  const peers = {};
  for (const [a, b] of m.topo.links) [peers[a], peers[b]] = [b, a];
  const lines = linkLines(m, pos, ports);
  const point = (endpoint) => ports[normalPort(m, endpoint)] || pos[endpoint.split(":")[0]];
  const along = (line, at) => ({
    x: line[0].x + (line[1].x - line[0].x) * at,
    y: line[0].y + (line[1].y - line[0].y) * at,
  });
  const hops = path.hops.map(parseHop);
  const points = [pos[path.src]];
  hops.forEach((hop, i) => {
    if (i > 0) {
      const prev = hops[i - 1];
      const from = `${prev.node}:p${prev.outPort}`;
      const out = peers[from];
      const into = peers[`${hop.node}:p${hop.inPort}`];
      if (out && out.split(":")[0] === hop.node && lines[`${from} ${out}`]) {
        const line = lines[`${from} ${out}`]; // a direct link: keep to its (parallel) line
        points.push(along(line, 0.2), along(line, 0.8));
      }
      if (out && out.split(":")[0] !== hop.node) points.push(point(out));
      if (into && into.split(":")[0] !== prev.node) points.push(point(into));
    }
    points.push(pos[hop.node]);
  });
  points.push(pos[path.dst]);
  return points.filter(Boolean);
}

export function pathNodes(topo, path) {
  // the nodes a path crosses, optical switches and long-haul nodes included
  const peers = {};
  for (const [a, b] of topo.links) [peers[a], peers[b]] = [b, a];
  const hops = path.hops.map(parseHop);
  const names = [path.src];
  hops.forEach((hop, i) => {
    const out = i > 0 ? peers[`${hops[i - 1].node}:p${hops[i - 1].outPort}`] : null;
    if (out && out.split(":")[0] !== hop.node) names.push(out.split(":")[0]);
    names.push(hop.node);
  });
  names.push(path.dst);
  return names;
}

function shifted(points, by) {
  // the polyline moved sideways by `by` px, so paths over the same link stay apart
  return points.map((p, i) => {
    const a = points[Math.max(i - 1, 0)];
    const b = points[Math.min(i + 1, points.length - 1)];
    const len = Math.hypot(b.x - a.x, b.y - a.y) || 1;
    return { x: p.x - ((b.y - a.y) / len) * by, y: p.y + ((b.x - a.x) / len) * by };
  });
}

export function flowsOn(flows, name) {
  return (flows?.paths || []).find((p) => p.path === name)?.flows || [];
}

export function pathColor(topo, name) {
  const i = topo.paths.findIndex((p) => p.name === name);
  return COLORS[i % COLORS.length];
}

export function drawTopology(root, m) {
  // m: {topo, flows, optics} as the API gives them
  const topo = m.topo;
  root.replaceChildren();
  if (!topo) return;
  const pos = layout(topo);
  const ports = portPoints(m, pos);
  const links = svg("g", { class: "links" });
  const lines = linkLines(m, pos, ports);
  for (const [a, b] of topo.links) {
    const [pa, pb] = lines[`${a} ${b}`];
    links.append(
      svg("line", { class: "link", x1: pa.x, y1: pa.y, x2: pb.x, y2: pb.y, "data-link": `${a} ${b}` }),
    );
  }
  root.append(links);
  root.append(drawPaths(m, pos, ports));
  const nodes = svg("g", { class: "nodes" });
  for (const node of topo.nodes) nodes.append(drawNode(m, node, pos[node.name], ports));
  root.append(nodes);
  fitView(root, pos);
}

function normalPort(m, endpoint) {
  const [node, port] = endpoint.split(":");
  const optical = opticalOf(m, node);
  return optical ? `${node}:${duplex(optical, +port.replace(/^p/, ""))}` : endpoint;
}

function drawPaths(m, pos, ports) {
  const group = svg("g", { class: "paths" });
  const carrying = m.topo.paths.filter((p) => flowsOn(m.flows, p.name).length);
  carrying.forEach((path, i) => {
    const points = shifted(pathPoints(m, path, pos, ports), (i - (carrying.length - 1) / 2) * 7);
    const flows = flowsOn(m.flows, path.name);
    const line = svg("polyline", {
      class: "flowpath",
      points: points.map((p) => `${p.x.toFixed(1)},${p.y.toFixed(1)}`).join(" "),
      stroke: pathColor(m.topo, path.name),
      "data-path": path.name,
      "data-flows": flows.join(" "),
    });
    line.append(svg("title", { text: `${path.name}: ${flows.join(", ")}` }));
    group.append(line);
  });
  const hint = svg("polyline", { class: "pathhint", points: "" });
  group.append(hint);
  return group;
}

function drawNode(m, node, p, ports) {
  const g = svg("g", {
    class: `node ${node.kind}${node.managed ? " managed" : ""}`,
    "data-node": node.name,
    "data-kind": node.kind,
    transform: `translate(${p.x.toFixed(1)},${p.y.toFixed(1)})`,
  });
  if (node.kind === "host") {
    g.append(svg("circle", { r: 17 }), svg("text", { y: 4, text: node.name }));
  } else if (node.kind === "optical") {
    g.append(drawOptical(m, node, p, ports));
  } else if (node.kind === "longhaul") {
    g.append(
      svg("rect", { x: -42, y: -18, width: 84, height: 36, rx: 18 }),
      svg("text", { y: -1, text: node.name }),
      svg("text", { y: 12, class: "small", text: "long-haul" }),
    );
  } else {
    g.append(
      svg("rect", { x: -30, y: -18, width: 60, height: 36, rx: 6 }),
      svg("text", { y: 5, text: node.name }),
    );
  }
  g.append(svg("title", { text: `${node.name} (${node.kind}${node.managed ? ", managed" : ""})` }));
  return g;
}

function drawOptical(m, node, center, ports) {
  const g = svg("g", { class: "optical" });
  g.append(svg("rect", { x: -BOX, y: -BOX, width: 2 * BOX, height: 2 * BOX, rx: 10 }));
  const optical = opticalOf(m, node.name);
  const local = (key) => {
    const q = ports[key];
    return q ? { x: q.x - center.x, y: q.y - center.y } : null;
  };
  const connects = optical?.cross_connects;
  for (const [ingress, egress] of connects || []) {
    const a = local(`${node.name}:${duplex(optical, ingress)}`);
    const b = local(`${node.name}:${duplex(optical, egress)}`);
    if (!a || !b) continue;
    // the two directions of a duplex circuit bow apart, so both show
    const len = Math.hypot(b.x - a.x, b.y - a.y) || 1;
    const c = { x: (-(b.y - a.y) / len) * 10, y: ((b.x - a.x) / len) * 10 };
    g.append(
      svg("path", {
        class: "xc",
        d: `M${a.x.toFixed(1)},${a.y.toFixed(1)} Q${c.x.toFixed(1)},${c.y.toFixed(1)} ${b.x.toFixed(1)},${b.y.toFixed(1)}`,
        "data-xc": `${ingress}-${egress}`,
      }),
    );
  }
  for (const [key, q] of Object.entries(ports)) {
    if (!key.startsWith(`${node.name}:`)) continue;
    const x = q.x - center.x;
    const y = q.y - center.y;
    g.append(
      svg("circle", { class: "port", cx: x, cy: y, r: 4 }),
      svg("text", { class: "small", x: x * 0.72, y: y * 0.72 + 3, text: `p${key.split(":")[1]}` }),
    );
  }
  g.append(svg("text", { y: -BOX + 16, text: node.name }));
  const note = connects ? `${connects.length} cross-connects (read now)` : "not managed here";
  g.append(svg("text", { class: "small", y: BOX + 14, text: note }));
  return g;
}

function fitView(root, pos) {
  const xs = Object.values(pos).map((p) => p.x);
  const ys = Object.values(pos).map((p) => p.y);
  const pad = 60;
  const x0 = Math.min(...xs) - pad;
  const y0 = Math.min(...ys) - pad;
  const w = Math.max(...xs) - x0 + pad;
  const h = Math.max(...ys) - y0 + pad;
  root.setAttribute("viewBox", `${x0.toFixed(0)} ${y0.toFixed(0)} ${w.toFixed(0)} ${h.toFixed(0)}`);
}

export function highlightPath(root, m, name) {
  // a dashed line along path `name` (none: null)
  const hint = root.querySelector(".pathhint");
  if (!hint) return;
  const path = name && m.topo.paths.find((p) => p.name === name);
  if (!path) {
    hint.setAttribute("points", "");
    return;
  }
  const pos = layout(m.topo);
  const points = pathPoints(m, path, pos, portPoints(m, pos));
  hint.setAttribute("points", points.map((p) => `${p.x},${p.y}`).join(" "));
}
