// A reroute as a timeline of its phases (park, circuits, await-lock with elapsed/timeout,
// swap, clean; make, shift, clean for an electronic one), and the history table.

import { clock, el, ms } from "./dom.js";

const DEFAULT_LOCK_TIMEOUT_MS = 3000; // services/reroute/model/intent.py DEFAULT_LOCK_TIMEOUT_S
// the stage whose steps wait for the new circuit to lock (a Stage of the API's schema:
// services/reroute/planning/order.py; tests/unit/services/service/test_ui.py checks it)
const LOCK_STAGE = "await-lock";

export function stageOf(step) {
  // the API's stage of a step (park, circuits, staged, await-lock, swap, clean; make,
  // shift, clean for an electronic move: planning/order.py STAGE); "steps" for a record
  // whose plan names no phase
  return step.stage ?? "steps";
}

function groups(steps) {
  const out = [];
  for (const step of steps) {
    const name = stageOf(step);
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

function elapsed(step, started) {
  const t0 = started[step.index];
  if (step.state === "started" && t0 !== undefined) return performance.now() - t0;
  if (step.state === "started" && step.started) return Date.now() - step.started * 1000;
  return null;
}

export function renderTimeline(box, badge, live, started) {
  // live: a RerouteView; started: step index -> performance.now() at its start event
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
    const running = group.steps.map((s) => elapsed(s, started)).find((v) => v !== null);
    let time = done ? ms(done) : "";
    const lock = group.name === LOCK_STAGE && intent;
    if (running !== undefined) time = `${ms(running)} elapsed`;
    const timeout = intent?.lock_timeout_ms ?? DEFAULT_LOCK_TIMEOUT_MS; // null: the default
    if (lock) time = `${time || "–"} / timeout ${ms(timeout)}`;
    const bar = el("div", { class: "bar" });
    if (lock) {
      const fill = Math.min(1, (running ?? done) / (timeout || 1));
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

export function renderHistory(table, history, onPick) {
  // onPick(view): a row was clicked
  table.replaceChildren(
    el(
      "tr",
      {},
      ...["time", "id", "reroute", "state", "took", "phases", "error"].map((h) => el("th", {}, h)),
    ),
  );
  for (const r of history) {
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
    row.addEventListener("click", () => onPick(r));
    table.append(row);
  }
}
