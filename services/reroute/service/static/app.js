// The operator's page of `reroute serve`: plain JavaScript modules, SVG drawn by hand, no
// library. Everything it shows comes from the API with the operator's token (kept in
// sessionStorage, for this tab only); it can do exactly what the token's role allows.
// Modules: dom (helpers), api (calls, the event stream), drawing (the SVG), timeline
// (a reroute's phases, the history), this one (state, panels, the form, wiring).

import { ApiError, call, openEvents, randomKey, readEvents } from "./api.js";
import { $, clock, el } from "./dom.js";
import { drawTopology, flowsOn, highlightPath, pathColor, pathNodes } from "./drawing.js";
import { renderHistory, renderTimeline, stageOf } from "./timeline.js";

const TOKEN_KEY = "reroute.token";

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

const api = (path, options) => call(state.token, path, options);

function showError(message) {
  const box = $("error");
  box.textContent = message;
  box.hidden = !message;
}

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
  refreshHealth();
}

async function refreshAll() {
  // what the devices hold is read from them: an unreachable one still leaves the drawing
  const devices = (what, path) =>
    api(path).catch((err) => {
      showError(`Reading ${what} from the devices failed: ${err.message}`);
      return null;
    });
  const [topo, flows, optics, history] = await Promise.all([
    api("/v1/topology"),
    devices("the flows", "/v1/flows"),
    devices("the optical cross-connects", "/v1/optics"),
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
      draw();
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
  showHistory();
}

// ---------------------------------------------------------------- devices

const HEALTH_MS = 3000; // how often the devices are asked (GET /v1/health asks each once)

async function refreshHealth() {
  if (!state.token || $("main").hidden) return;
  let health;
  try {
    health = await api("/v1/health");
  } catch (err) {
    $("devices-state").textContent = "unknown";
    $("devices-state").dataset.state = "failed";
    return;
  }
  const down = health.devices.filter((d) => !d.up);
  $("devices-state").textContent = down.length ? `${down.length} not up` : "all up";
  $("devices-state").dataset.state = down.length ? "failed" : "done";
  $("devices").replaceChildren(
    ...health.devices.map((d) => {
      // up / down / hung / no_pipeline / out_of_sync, since when, the last error
      const state = (d.state || (d.up ? "up" : "down")).replace("_", " ");
      const since = d.since ? ` since ${clock(d.since)}` : "";
      const text = d.up ? `${d.detail}${since ? ` (up${since})` : ""}`
        : `${state.toUpperCase()}${since}: ${d.error || d.detail}`;
      // its master among the replicas (etcd device ownership), when it has one
      const owner = d.owner ? el("span", { class: "hint", "data-owner": d.owner,
        text: ` master ${d.owner}` }) : "";
      return el("li", { "data-up": String(d.up), "data-device": d.name, "data-state": d.state },
        el("b", { text: d.name }), ` ${d.kind} `, el("span", { class: "hint", text }), owner);
    }),
  );
}

// ---------------------------------------------------------------- event stream

function setConn(name, text) {
  const badge = $("conn");
  badge.dataset.state = name;
  badge.dataset.connects = String(state.connects);
  badge.textContent = text;
}

async function listen() {
  // the event stream, reconnected (with everything read again) whenever it ends
  if (state.stream) state.stream.abort();
  const control = new AbortController();
  state.stream = control;
  let delay = 500;
  while (!control.signal.aborted) {
    try {
      const answer = await openEvents(state.token, control.signal);
      state.connects += 1;
      setConn("live", "live");
      delay = 500;
      if (state.connects > 1) {
        showError("");
        await refreshAll(); // what happened while the stream was down
      }
      await readEvents(answer.body, control.signal, onEvent);
    } catch (err) {
      if (control.signal.aborted) return;
      if (err instanceof ApiError && err.status === 401) {
        askToken("The service no longer accepts this token (401). Enter another.");
        return;
      }
    }
    setConn("reconnecting", "reconnecting…");
    await new Promise((resolve) => setTimeout(resolve, delay));
    delay = Math.min(delay * 2, 4000);
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
    // answers and events may cross: keep what the page already knew of its steps
    const known = state.live?.id === id ? state.live.steps : [];
    for (const step of [...known, ...mine.events]) applyStep(view, step);
    state.live = view;
    // steps that finished before this answer (read in it, or their events held meanwhile)
    // moved the devices too
    if (view.steps.some(movedDevices)) refreshDevicesSoon();
  } finally {
    if (fetching === mine) fetching = null;
  }
  showTimeline();
}

function movedDevices(step) {
  // a step that ended after changing rules or circuits: the drawing reads the devices again
  return RANK[step.state] >= RANK.done && /^(shift|circuits|remove|install)/.test(step.description);
}

function onStepEvent(data) {
  const live = state.live;
  if (!live || live.id !== data.reroute_id || !live.steps[data.index - 1]) {
    // its first sign (the page opened mid-reroute, or the "running" event is being read),
    // or the page holds it from before it was planned (pending: no steps yet)
    const known = fetching && fetching.id === data.reroute_id;
    if (!known) showLive(data.reroute_id, true).catch((err) => showError(err.message));
    fetching.events.push(data);
    return;
  }
  const step = applyStep(live, data);
  showTimeline();
  if (step && data.state !== "started" && movedDevices(step)) refreshDevicesSoon();
}

function applyStep(view, data) {
  // data: a step event, or a step as read before; a step's state only ever moves forward
  const step = view.steps[data.index - 1];
  if (!step || RANK[data.state] < RANK[step.state]) return step;
  if (data.state === "started" && step.state !== "started") {
    state.started[data.index] = performance.now();
  }
  step.state = data.state;
  if (data.ms !== null && data.ms !== undefined) step.ms = data.ms;
  if (data.error) step.error = data.error;
  return step;
}

// ---------------------------------------------------------------- panels

function renderAll() {
  draw();
  renderLegend();
  renderPaths();
  showTimeline();
  showHistory();
}

function draw() {
  drawTopology($("topo"), state);
}

function showTimeline() {
  renderTimeline($("timeline"), $("live-state"), state.live, state.started);
}

function showHistory() {
  renderHistory($("history"), state.history, (view) => {
    state.live = view;
    showTimeline();
  });
}

function renderLegend() {
  $("legend").replaceChildren(
    el("span", { class: "key host" }, "host"),
    el("span", { class: "key ovs" }, "packet switch"),
    el("span", { class: "key optical" }, "optical switch (cross-connects read from it)"),
    el("span", { class: "key longhaul" }, "long-haul"),
    el("span", { class: "key flowpath" }, "path carrying flows"),
  );
}

function renderPaths() {
  const table = $("paths");
  table.replaceChildren(el("tr", {}, el("th", {}, "path"), el("th", {}, "hops"), el("th", {}, "flows")));
  for (const path of state.topo.paths) {
    const flows = flowsOn(state.flows, path.name);
    const row = el(
      "tr",
      { "data-path": path.name, class: flows.length ? "carrying" : "" },
      el("td", {}, el("span", { class: "swatch", style: `background:${pathColor(state.topo, path.name)}` }), path.name),
      el("td", { class: "hops" }, pathNodes(state.topo, path).join(" › ")),
      el("td", { class: "flowlist" }, flows.length ? flows.join("\n") : "–"),
    );
    row.addEventListener("mouseenter", () => highlightPath($("topo"), state, path.name));
    row.addEventListener("mouseleave", () => highlightPath($("topo"), state, null));
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
  };
  // optical moves only (a move with no optical step refuses it); empty: the default 3000 ms
  if ($("lock-timeout-ms").value !== "") body.lock_timeout_ms = Number($("lock-timeout-ms").value);
  if ($("drain-ms").value !== "") body.drain_ms = Number($("drain-ms").value); // else derived
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
      el("li", { "data-phase": s.phase }, el("span", { class: "phase-name" }, stageOf(s)), ` ${s.description}`),
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
    if (state.live?.id !== view.id) {
      state.live = view; // unless its events were quicker than this answer
      showTimeline();
    }
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
  if (state.live && state.live.steps.some((s) => s.state === "started")) showTimeline();
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
  setInterval(refreshHealth, HEALTH_MS);
  state.token = sessionStorage.getItem(TOKEN_KEY);
  if (state.token) boot();
  else askToken("");
}

start();
