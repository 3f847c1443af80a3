// The operator's page of `reroute serve`: plain JavaScript, SVG drawn by hand, no library.
// Everything it shows comes from the API with the operator's token (kept in sessionStorage,
// for this tab only); it can do exactly what the token's role allows, nothing more.
// The event stream is read with fetch (EventSource cannot send the Authorization header)
// and reconnected, with everything re-read, whenever it ends.
"use strict";

(() => {
  const SVG_NS = "http://www.w3.org/2000/svg";
  const TOKEN_KEY = "reroute.token";
  const COLORS = ["#d9480f", "#1c7ed6", "#2b8a3e", "#ae3ec9", "#f08c00", "#0c8599"];
  const $ = (id) => document.getElementById(id);

  const state = {
    token: null,
    role: null,
    topo: null, // TopologyView
    flows: null, // FlowsView
    optics: null, // OpticsView
    history: [],
    live: null, // RerouteView of the reroute shown in the timeline
    started: {}, // step index -> performance.now() of its start (live reroute)
    plannedBody: null, // the body the shown dry run was made for
    connects: 0,
    stream: null, // AbortController of the event stream
  };

  // ---------------------------------------------------------------- API

  class ApiError extends Error {
    constructor(status, detail) {
      super(`${status}: ${detail}`);
      this.status = status;
      this.detail = detail;
    }
  }

  function detailText(body, fallback) {
    if (!body || body.detail === undefined) return fallback;
    if (typeof body.detail === "string") return body.detail;
    return body.detail.map((d) => `${(d.loc || []).join(".")}: ${d.msg}`).join("; ");
  }

  async function api(path, { method = "GET", body, headers = {} } = {}) {
    const init = { method, headers: { Authorization: `Bearer ${state.token}`, ...headers } };
    if (body !== undefined) {
      init.body = JSON.stringify(body);
      init.headers["Content-Type"] = "application/json";
    }
    const answer = await fetch(path, init);
    const text = await answer.text();
    let parsed = null;
    try {
      parsed = text ? JSON.parse(text) : null;
    } catch (_) {
      parsed = null;
    }
    if (!answer.ok) throw new ApiError(answer.status, detailText(parsed, answer.statusText));
    return parsed;
  }

  function randomKey() {
    const bytes = new Uint8Array(16);
    crypto.getRandomValues(bytes); // works on plain HTTP too (randomUUID does not)
    return "ui-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  }

  // ---------------------------------------------------------------- small DOM helpers

  function el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    setAttrs(node, attrs);
    for (const child of children) node.append(child);
    return node;
  }

  function svg(tag, attrs = {}, ...children) {
    const node = document.createElementNS(SVG_NS, tag);
    setAttrs(node, attrs);
    for (const child of children) node.append(child);
    return node;
  }

  function setAttrs(node, attrs) {
    for (const [k, v] of Object.entries(attrs)) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "text") node.textContent = v;
      else node.setAttribute(k, v === true ? "" : String(v));
    }
  }

  function showError(message) {
    const box = $("error");
    box.textContent = message;
    box.hidden = !message;
  }

  function ms(value) {
    if (value === null || value === undefined) return "";
    return value >= 1000 ? `${(value / 1000).toFixed(2)} s` : `${value.toFixed(1)} ms`;
  }

  function clock(unix) {
    return unix ? new Date(unix * 1000).toLocaleTimeString([], { hour12: false }) : "";
  }

  // ---------------------------------------------------------------- token and start

  function askToken(message) {
    state.token = null;
    sessionStorage.removeItem(TOKEN_KEY);
    if (state.stream) state.stream.abort();
    $("main").hidden = true;
    $("change-token").hidden = true;
    $("role").textContent = "";
    $("login").hidden = false;
    showError(message || "");
    $("token").value = "";
    $("token").focus();
  }

  async function boot() {
    let me;
    try {
      me = await api("/v1/whoami");
    } catch (err) {
      if (err instanceof ApiError && err.status === 401) {
        askToken(`The service refused this token (${err.message}). Enter another.`);
      } else {
        showError(`Cannot reach the service: ${err.message}. Retrying…`);
        setTimeout(boot, 2000);
      }
      return;
    }
    state.role = me.role;
    $("fabric").textContent = me.fabric;
    $("role").textContent = `${me.role} token`;
    $("role").dataset.role = me.role;
    $("login").hidden = true;
    $("change-token").hidden = false;
    $("main").hidden = false;
    const operator = me.role === "operator";
    for (const node of document.querySelectorAll(".operator-only")) node.hidden = !operator;
    $("read-only").hidden = operator;
    showError("");
    try {
      await refreshAll();
    } catch (err) {
      showError(`Reading the fabric failed: ${err.message}`);
    }
    listen();
  }

  async function refreshAll() {
    const [topo, flows, optics, history] = await Promise.all([
      api("/v1/topology"),
      api("/v1/flows"),
      api("/v1/optics"),
      api("/v1/reroutes?limit=20"),
    ]);
    Object.assign(state, { topo, flows, optics, history: history.reroutes });
    if (!state.live && state.history.length) state.live = state.history[0];
    else if (state.live) state.live = state.history.find((r) => r.id === state.live.id) || state.live;
    renderAll();
    fillForm();
  }

  let deviceRefresh = null;
  function refreshDevicesSoon() {
    // the drawing follows the rules and circuits as they move (coalesced)
    if (deviceRefresh) return;
    deviceRefresh = setTimeout(async () => {
      deviceRefresh = null;
      try {
        const [flows, optics] = await Promise.all([api("/v1/flows"), api("/v1/optics")]);
        Object.assign(state, { flows, optics });
        drawTopology();
        renderPaths();
        fillFlowChoices();
      } catch (err) {
        showError(`Reading the devices failed: ${err.message}`);
      }
    }, 50);
  }

  async function refreshHistory() {
    const history = await api("/v1/reroutes?limit=20");
    state.history = history.reroutes;
    renderHistory();
  }

  // ---------------------------------------------------------------- event stream

  function setConn(name, text) {
    const badge = $("conn");
    badge.dataset.state = name;
    badge.dataset.connects = String(state.connects);
    badge.textContent = text;
  }

  async function listen() {
    if (state.stream) state.stream.abort();
    const control = new AbortController();
    state.stream = control;
    let delay = 500;
    while (!control.signal.aborted) {
      try {
        const answer = await fetch("/v1/events", {
          headers: { Authorization: `Bearer ${state.token}`, Accept: "text/event-stream" },
          signal: control.signal,
          cache: "no-store",
        });
        if (answer.status === 401) {
          askToken("The service no longer accepts this token (401). Enter another.");
          return;
        }
        if (!answer.ok || !answer.body) throw new Error(`HTTP ${answer.status}`);
        state.connects += 1;
        setConn("live", "live");
        delay = 500;
        if (state.connects > 1) {
          showError("");
          await refreshAll(); // what happened while the stream was down
        }
        await readEvents(answer.body, control.signal);
      } catch (err) {
        if (control.signal.aborted) return;
      }
      setConn("reconnecting", "reconnecting…");
      await new Promise((resolve) => setTimeout(resolve, delay));
      delay = Math.min(delay * 2, 4000);
    }
  }

  async function readEvents(body, signal) {
    const reader = body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    while (!signal.aborted) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, "\n");
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const event = parseEvent(block);
        if (event) onEvent(event);
      }
    }
  }

  function parseEvent(block) {
    let kind = "message";
    const data = [];
    for (const line of block.split("\n")) {
      if (!line || line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
      if (field === "event") kind = value;
      else if (field === "data") data.push(value);
    }
    if (!data.length) return null;
    try {
      return { kind, data: JSON.parse(data.join("\n")) };
    } catch (_) {
      return null;
    }
  }

  function onEvent({ kind, data }) {
    if (kind === "reroute") onRerouteEvent(data).catch((err) => showError(err.message));
    else if (kind === "step") onStepEvent(data);
  }

  const RANK = { planned: 0, started: 1, done: 2, failed: 2, undone: 3 };
  let fetching = null; // the reroute being read after its first event, and events meanwhile

  async function onRerouteEvent(data) {
    if (data.state === "running" || !state.live || state.live.id === data.reroute_id) {
      await showLive(data.reroute_id, data.state === "running");
    }
    if (!["pending", "running"].includes(data.state)) refreshDevicesSoon();
    await refreshHistory();
  }

  async function showLive(id, fresh) {
    if (fresh) state.started = {};
    if (!fetching || fetching.id !== id) fetching = { id, events: [] };
    const mine = fetching;
    try {
      const view = await api(`/v1/reroutes/${encodeURIComponent(id)}`);
      state.live = view;
      for (const event of mine.events) applyStep(view, event);
    } finally {
      if (fetching === mine) fetching = null;
    }
    renderTimeline();
  }

  function onStepEvent(data) {
    const live = state.live;
    if (!live || live.id !== data.reroute_id) {
      // its first sign (the page opened mid-reroute, or the "running" event is being read)
      const known = fetching && fetching.id === data.reroute_id;
      if (!known) showLive(data.reroute_id, true).catch((err) => showError(err.message));
      fetching.events.push(data);
      return;
    }
    const step = applyStep(live, data);
    renderTimeline();
    if (step && data.state !== "started" && /^(shift|circuits|remove|install)/.test(step.description)) {
      refreshDevicesSoon();
    }
  }

  function applyStep(view, data) {
    // events and reads may cross: a step's state only ever moves forward
    const step = view.steps[data.index - 1];
    if (!step || RANK[data.state] < RANK[step.state]) return step;
    step.state = data.state;
    if (data.state === "started") state.started[data.index] = performance.now();
    if (data.ms !== null && data.ms !== undefined) step.ms = data.ms;
    if (data.error) step.error = data.error;
    return step;
  }

  // ---------------------------------------------------------------- drawing

  function parseHop(text) {
    const m = /^(.+)\[(\d+)>(\d+)\]$/.exec(text);
    return m ? { node: m[1], inPort: +m[2], outPort: +m[3] } : { node: text };
  }


  function opticalOf(name) {
    return (state.optics?.switches || []).find((o) => o.name === name) || null;
  }

  function duplex(optical, port) {
    // an optical switch's duplex port i is ingress i and egress N+i
    const n = optical ? optical.ingress_count : 0;
    return n && port > n ? port - n : port;
  }

  function layout(topo) {
    const kinds = Object.fromEntries(topo.nodes.map((n) => [n.name, n.kind]));
    const cores = topo.nodes.filter((n) => n.kind === "polatis" || n.kind === "longhaul");
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

  function linkLines(topo, pos, ports) {
    // each link's line, by "a b" and "b a" (endpoints); parallel links between the same
    // two nodes are drawn side by side, 14 px apart
    const point = (endpoint) => ports[normalPort(endpoint)] || pos[endpoint.split(":")[0]];
    const pairs = {};
    for (const link of topo.links) {
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

  function portPoints(topo, pos) {
    // "node:port" of an optical switch or long-haul node -> its point on the node's box
    const points = {};
    const boxed = new Set(topo.nodes.filter((n) => n.kind === "polatis").map((n) => n.name));
    for (const [a, b] of topo.links) {
      for (const [mine, other] of [[a, b], [b, a]]) {
        const node = mine.split(":")[0];
        if (!boxed.has(node)) continue;
        const port = +mine.split(":")[1].replace(/^p/, "");
        const key = `${node}:${duplex(opticalOf(node), port)}`;
        points[key] = portPoint(pos[node], pos[other.split(":")[0]]);
      }
    }
    return points;
  }

  function pathPoints(path, pos, ports) {
    // hops name the packet switches (in>out ports); between two of them the light may
    // cross an optical switch or a long-haul node: follow the links from port to port
    const peers = {};
    for (const [a, b] of state.topo.links) [peers[a], peers[b]] = [b, a];
    const lines = linkLines(state.topo, pos, ports);
    const point = (endpoint) => ports[normalPort(endpoint)] || pos[endpoint.split(":")[0]];
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

  function pathNodes(path) {
    // the nodes a path crosses, optical switches and long-haul nodes included
    const peers = {};
    for (const [a, b] of state.topo.links) [peers[a], peers[b]] = [b, a];
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

  function flowsOn(name) {
    return (state.flows?.paths || []).find((p) => p.path === name)?.flows || [];
  }

  function pathColor(name) {
    const i = state.topo.paths.findIndex((p) => p.name === name);
    return COLORS[i % COLORS.length];
  }

  function drawTopology() {
    const topo = state.topo;
    const root = $("topo");
    root.replaceChildren();
    if (!topo) return;
    const pos = layout(topo);
    const ports = portPoints(topo, pos);
    const links = svg("g", { class: "links" });
    const lines = linkLines(topo, pos, ports);
    for (const [a, b] of topo.links) {
      const [pa, pb] = lines[`${a} ${b}`];
      links.append(
        svg("line", { class: "link", x1: pa.x, y1: pa.y, x2: pb.x, y2: pb.y, "data-link": `${a} ${b}` }),
      );
    }
    root.append(links);
    root.append(drawPaths(topo, pos, ports));
    const nodes = svg("g", { class: "nodes" });
    for (const node of topo.nodes) nodes.append(drawNode(node, pos[node.name], ports));
    root.append(nodes);
    fitView(root, pos);
  }

  function normalPort(endpoint) {
    const [node, port] = endpoint.split(":");
    const optical = opticalOf(node);
    return optical ? `${node}:${duplex(optical, +port.replace(/^p/, ""))}` : endpoint;
  }

  function drawPaths(topo, pos, ports) {
    const group = svg("g", { class: "paths" });
    const carrying = topo.paths.filter((p) => flowsOn(p.name).length);
    carrying.forEach((path, i) => {
      const points = shifted(pathPoints(path, pos, ports), (i - (carrying.length - 1) / 2) * 7);
      const flows = flowsOn(path.name);
      const line = svg("polyline", {
        class: "flowpath",
        points: points.map((p) => `${p.x.toFixed(1)},${p.y.toFixed(1)}`).join(" "),
        stroke: pathColor(path.name),
        "data-path": path.name,
        "data-flows": flows.join(" "),
      });
      line.append(svg("title", { text: `${path.name}: ${flows.join(", ")}` }));
      group.append(line);
    });
    const hint = svg("polyline", { id: "path-hint", class: "pathhint", points: "" });
    group.append(hint);
    return group;
  }

  function drawNode(node, p, ports) {
    const g = svg("g", {
      class: `node ${node.kind}${node.managed ? " managed" : ""}`,
      "data-node": node.name,
      "data-kind": node.kind,
      transform: `translate(${p.x.toFixed(1)},${p.y.toFixed(1)})`,
    });
    if (node.kind === "host") {
      g.append(svg("circle", { r: 17 }), svg("text", { y: 4, text: node.name }));
    } else if (node.kind === "polatis") {
      g.append(drawOptical(node, p, ports));
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

  function drawOptical(node, center, ports) {
    const g = svg("g", { class: "optical" });
    g.append(svg("rect", { x: -BOX, y: -BOX, width: 2 * BOX, height: 2 * BOX, rx: 10 }));
    const optical = opticalOf(node.name);
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

  function highlightPath(name) {
    const hint = $("path-hint");
    if (!hint) return;
    const path = name && state.topo.paths.find((p) => p.name === name);
    if (!path) {
      hint.setAttribute("points", "");
      return;
    }
    const pos = layout(state.topo);
    const points = pathPoints(path, pos, portPoints(state.topo, pos));
    hint.setAttribute("points", points.map((p) => `${p.x},${p.y}`).join(" "));
  }

  // ---------------------------------------------------------------- panels

  function renderAll() {
    drawTopology();
    renderLegend();
    renderPaths();
    renderTimeline();
    renderHistory();
  }

  function renderLegend() {
    $("legend").replaceChildren(
      el("span", { class: "key host" }, "host"),
      el("span", { class: "key ovs" }, "packet switch"),
      el("span", { class: "key polatis" }, "optical switch (cross-connects read from it)"),
      el("span", { class: "key longhaul" }, "long-haul"),
      el("span", { class: "key flowpath" }, "path carrying flows"),
    );
  }

  function renderPaths() {
    const table = $("paths");
    table.replaceChildren(el("tr", {}, el("th", {}, "path"), el("th", {}, "hops"), el("th", {}, "flows")));
    for (const path of state.topo.paths) {
      const flows = flowsOn(path.name);
      const row = el(
        "tr",
        { "data-path": path.name, class: flows.length ? "carrying" : "" },
        el("td", {}, el("span", { class: "swatch", style: `background:${pathColor(path.name)}` }), path.name),
        el("td", { class: "hops" }, pathNodes(path).join(" › ")),
        el("td", { class: "flowlist" }, flows.length ? flows.join("\n") : "–"),
      );
      row.addEventListener("mouseenter", () => highlightPath(path.name));
      row.addEventListener("mouseleave", () => highlightPath(null));
      table.append(row);
    }
  }

  function phaseGroup(phase) {
    // park (all of the move onto the temporary path), circuits, await-lock, swap, clean:
    // how an operator reads an optical MBB; an electronic one reads make, shift, clean
    if (!phase) return "steps";
    if (phase.startsWith("park-")) return "park";
    const name = phase.replace(/^swap-/, "").replace(/^verify-/, "");
    if (name === "drain" || name === "clean") return "clean";
    return phase.startsWith("swap-") ? "swap" : name;
  }

  function groups(steps) {
    const out = [];
    for (const step of steps) {
      const name = phaseGroup(step.phase);
      if (!out.length || out[out.length - 1].name !== name) out.push({ name, steps: [] });
      out[out.length - 1].steps.push(step);
    }
    return out;
  }

  function groupState(steps) {
    const states = steps.map((s) => s.state);
    for (const s of ["failed", "undone", "started"]) if (states.includes(s)) return s;
    return states.every((s) => s === "done") ? "done" : states.some((s) => s === "done") ? "started" : "planned";
  }

  function elapsed(step) {
    const t0 = state.started[step.index];
    if (step.state === "started" && t0 !== undefined) return performance.now() - t0;
    if (step.state === "started" && step.started) return Date.now() - step.started * 1000;
    return null;
  }

  function renderTimeline() {
    const live = state.live;
    const box = $("timeline");
    const badge = $("live-state");
    badge.hidden = !live;
    if (!live) return;
    badge.textContent = live.state;
    badge.dataset.state = live.state;
    const intent = live.intent;
    const head = el(
      "p",
      { class: "summary" },
      el("code", {}, live.id),
      " ",
      intent ? `${intent.strategy.toUpperCase()} ${intent.flows.join(", ")} → ${intent.to_path}` : live.summary,
      intent?.via ? ` via ${intent.via}` : "",
    );
    const list = el("ol", { class: "phases", "data-reroute": live.id, "data-state": live.state });
    for (const group of groups(live.steps)) {
      const gs = groupState(group.steps);
      const done = took(group.steps);
      const running = group.steps.map(elapsed).find((v) => v !== null);
      let time = done ? ms(done) : "";
      const lock = group.name === "await-lock" && intent;
      if (running !== undefined) time = `${ms(running)} elapsed`;
      if (lock) time = `${time || "–"} / timeout ${ms(intent.lock_timeout_ms)}`;
      const bar = el("div", { class: "bar" });
      if (lock) {
        const fill = Math.min(1, (running ?? done) / (intent.lock_timeout_ms || 1));
        bar.append(el("div", { class: "fill", style: `width:${(fill * 100).toFixed(1)}%` }));
      }
      const open = gs === "started" || gs === "failed" || gs === "undone";
      const steps = el("ul", { class: "steps" });
      for (const s of group.steps) {
        steps.append(
          el(
            "li",
            { "data-state": s.state, "data-index": s.index },
            `${s.index}. ${s.description}`,
            s.ms !== null && s.ms !== undefined ? el("span", { class: "ms" }, ms(s.ms)) : "",
            s.error ? el("div", { class: "step-error" }, s.error) : "",
          ),
        );
      }
      list.append(
        el(
          "li",
          { class: "phase", "data-phase": group.name, "data-state": gs },
          el("div", { class: "phase-head" }, el("strong", {}, group.name), el("span", { class: "time" }, time)),
          bar,
          el("details", { open }, el("summary", {}, `${group.steps.length} steps`), steps),
        ),
      );
    }
    const parts = [head, list];
    if (live.error) parts.push(el("p", { class: "error" }, live.error));
    if (!live.steps.length && live.state === "pending") parts.push(el("p", { class: "hint" }, "queued"));
    box.replaceChildren(...parts);
  }

  function took(steps) {
    // a phase's wall time (its steps may run at once), else the sum of what is known
    const timed = steps.every((s) => s.started && s.finished);
    if (timed && steps.length) {
      const first = Math.min(...steps.map((s) => s.started));
      const last = Math.max(...steps.map((s) => s.finished));
      return (last - first) * 1000;
    }
    return steps.reduce((sum, s) => sum + (s.ms || 0), 0);
  }

  function historyPhases(view) {
    return groups(view.steps)
      .map((g) => `${g.name} ${ms(took(g.steps))}`)
      .join(" · ");
  }

  function renderHistory() {
    const table = $("history");
    table.replaceChildren(
      el(
        "tr",
        {},
        ...["time", "id", "reroute", "state", "took", "phases", "error"].map((h) => el("th", {}, h)),
      ),
    );
    for (const r of state.history) {
      const took = r.finished && r.started ? ms((r.finished - r.started) * 1000) : "";
      const what = r.intent
        ? `${r.intent.strategy} ${r.intent.flows.join(", ")} → ${r.intent.to_path}${r.intent.via ? ` via ${r.intent.via}` : ""}`
        : r.summary;
      const row = el(
        "tr",
        { "data-id": r.id, "data-state": r.state },
        el("td", {}, clock(r.created)),
        el("td", {}, el("code", {}, r.id)),
        el("td", {}, what),
        el("td", {}, el("span", { class: "badge", "data-state": r.state }, r.state)),
        el("td", {}, took),
        el("td", { class: "small" }, historyPhases(r)),
        el("td", { class: "error-cell" }, r.error || ""),
      );
      row.addEventListener("click", () => {
        state.live = r;
        renderTimeline();
      });
      table.append(row);
    }
  }

  // ---------------------------------------------------------------- the reroute form

  function fillForm() {
    fillFlowChoices();
    const names = state.topo.paths.map((p) => p.name);
    fillSelect($("to-path"), names);
    fillSelect($("via"), ["", ...names]);
  }

  function fillSelect(select, values) {
    const chosen = select.value;
    select.replaceChildren(...values.map((v) => el("option", { value: v }, v || "(none)")));
    if (values.includes(chosen)) select.value = chosen;
  }

  function fillFlowChoices() {
    const box = $("flow-choices");
    const checked = new Set([...box.querySelectorAll("input:checked")].map((i) => i.value));
    const rows = [];
    for (const p of state.flows?.paths || []) {
      for (const flow of p.flows) {
        const input = el("input", { type: "checkbox", name: "flow", value: flow, checked: checked.has(flow) });
        rows.push(el("label", { class: "flow" }, input, ` ${flow} `, el("span", { class: "on" }, `on ${p.path}`)));
      }
    }
    if (!rows.length) rows.push(el("p", { class: "hint" }, "no flows installed"));
    box.replaceChildren(el("legend", {}, "Flows"), ...rows);
  }

  function formBody() {
    const flows = [...document.querySelectorAll("#flow-choices input:checked")].map((i) => i.value);
    const extra = $("extra-flow").value.trim();
    if (extra) flows.push(extra);
    const body = {
      flows,
      to_path: $("to-path").value,
      strategy: $("strategy").value,
      drain_ms: Number($("drain-ms").value || 0),
      lock_timeout_ms: Number($("lock-timeout-ms").value || 0),
    };
    if ($("via").value) body.via = $("via").value;
    return body;
  }

  function formError(message) {
    $("form-error").textContent = message;
    $("form-error").hidden = !message;
  }

  function discardPlan() {
    state.plannedBody = null;
    $("plan").hidden = true;
  }

  async function dryRun(event) {
    event.preventDefault();
    discardPlan();
    formError("");
    $("form-note").textContent = "";
    const body = formBody();
    if (!body.flows.length) {
      formError("Choose at least one flow.");
      return;
    }
    try {
      const plan = await api("/v1/reroutes", { method: "POST", body: { ...body, dry_run: true } });
      showPlan(plan);
      state.plannedBody = body;
    } catch (err) {
      formError(`Not planned (${err.message}). Nothing was changed.`);
    }
  }

  function showPlan(plan) {
    $("plan-summary").textContent = `${plan.summary} · ${plan.steps.length} steps`;
    $("plan-summary").dataset.disruption = plan.disruption;
    $("plan-steps").replaceChildren(
      ...plan.steps.map((s) =>
        el("li", { "data-phase": s.phase }, el("span", { class: "phase-name" }, phaseGroup(s.phase)), ` ${s.description}`),
      ),
    );
    $("plan").hidden = false;
  }

  async function confirm() {
    const body = state.plannedBody;
    if (!body) return;
    $("confirm").disabled = true;
    try {
      const view = await api("/v1/reroutes", {
        method: "POST",
        body,
        headers: { "Idempotency-Key": randomKey() },
      });
      discardPlan();
      $("form-note").textContent = `Reroute ${view.id} asked for (${view.state} then): its timeline is above.`;
      state.live = view;
      renderTimeline();
      await refreshHistory();
    } catch (err) {
      formError(`Refused (${err.message}).`);
    } finally {
      $("confirm").disabled = false;
    }
  }

  // ---------------------------------------------------------------- wiring

  function ticker() {
    // elapsed times of running steps (the lock wait above all)
    if (state.live && state.live.steps.some((s) => s.state === "started")) renderTimeline();
  }

  function start() {
    $("login").addEventListener("submit", (event) => {
      event.preventDefault();
      const token = $("token").value.trim();
      if (!token) return;
      state.token = token;
      sessionStorage.setItem(TOKEN_KEY, token);
      showError("");
      boot();
    });
    $("change-token").addEventListener("click", () => askToken(""));
    $("reroute-form").addEventListener("submit", dryRun);
    $("reroute-form").addEventListener("input", () => state.plannedBody && discardPlan());
    $("confirm").addEventListener("click", confirm);
    $("discard").addEventListener("click", discardPlan);
    setInterval(ticker, 100);
    state.token = sessionStorage.getItem(TOKEN_KEY);
    if (state.token) boot();
    else askToken("");
  }

  start();
})();
