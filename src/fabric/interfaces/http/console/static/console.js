// The fabric console: a hash-routed page over the service's API (the contract is
// /work/console-contract.md; routes below). No framework. Every value from the API reaches
// the page as text (timeline.js's h()); the only HTML is index.html.
//
// Authentication: the API answers 401 → the login view; POST /console/login sets an HttpOnly
// cookie and returns a CSRF token, kept in memory only (a reload gets it again from
// GET /console/session) and sent as X-Fabric-CSRF on every POST.
//
// Routes: #/runs[?status=&pack=&q=]  #/runs/<run_id>  #/new[?pack=]  #/packs  #/models
// <main id="view"> carries data-view (the route's name) and data-state ("loading", "ready",
// "error") for whoever drives the page (the browser tests).

import {
  h, put, link, Timeline, KINDS, runRoute, asText, fmtInt, fmtSeconds, fmtCost,
  errorBlock, policyTable, lazyDetails, textBlock,
} from "./timeline.js";

const LIVE = new Set(["running", "queued", "awaiting_approval"]);
const STATUSES = [
  "running", "queued", "awaiting_approval", "completed", "completed_unconfirmed",
  "completed_from_text", "unverified", "invalid_output", "max_steps", "budget_exceeded",
  "cancelled", "failed",
  "interrupted",
];
const enc = encodeURIComponent;

const state = { csrf: null, view: null };

// ---------------------------------------------------------------- the API

export class ApiError extends Error {
  constructor(status, body) {
    const error = body && typeof body === "object" && body.error ? body.error : {};
    super(asText(error.message || `the service answered ${status}`));
    this.status = status;
    this.code = error.code || null;
    this.hint = (error.details && error.details.hint) || error.hint || null;
  }
}

class LoginNeeded extends Error {}

async function readJson(response) {
  try {
    return await response.json();
  } catch {
    return null;
  }
}

/** A JSON call to the API: 401 shows the login view; a POST carries the CSRF token (and
 * gets a fresh one once, should the server have refused it). */
export async function api(path, { method = "GET", body, retried = false } = {}) {
  const headers = { Accept: "application/json" };
  const init = { method, headers, credentials: "same-origin", cache: "no-store" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  if (method !== "GET" && method !== "HEAD" && state.csrf) headers["X-Fabric-CSRF"] = state.csrf;
  const response = await fetch(path, init);
  if (response.status === 401) {
    showLogin();
    throw new LoginNeeded("log in first");
  }
  const data = await readJson(response);
  if (response.status === 403 && data?.error?.code === "csrf_failed" && !retried) {
    await session();
    return api(path, { method, body, retried: true });
  }
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}

async function session() {
  const data = await api("/console/session");
  state.csrf = data && data.csrf ? String(data.csrf) : null;
  return data;
}

// ---------------------------------------------------------------- the frame and the router

const ROUTES = [
  [/^\/runs\/?$/, "runs", runsView],
  [/^\/runs\/([^/]+)$/, "run", runView],
  [/^\/new$/, "new", newTaskView],
  [/^\/packs$/, "packs", packsView],
  [/^\/models$/, "models", modelsView],
];

function parseHash() {
  const raw = location.hash.replace(/^#/, "") || "/runs";
  const at = raw.indexOf("?");
  const path = at < 0 ? raw : raw.slice(0, at);
  return { path, params: new URLSearchParams(at < 0 ? "" : raw.slice(at + 1)) };
}

/** A view's life: what to close when the page moves on (event streams, observers). */
class View {
  constructor(name) {
    this.name = name;
    this.alive = true;
    this.cleanups = [];
    this.main = h("main", { id: "view", "data-view": name, "data-state": "loading" });
    document.getElementById("view").replaceWith(this.main);
  }

  onEnd(fn) {
    if (this.alive) this.cleanups.push(fn);
    else fn();
  }

  end() {
    this.alive = false;
    for (const fn of this.cleanups.splice(0)) {
      try {
        fn();
      } catch (err) {
        console.warn("cleanup failed", err);
      }
    }
  }
}

function startView(name) {
  if (state.view) state.view.end();
  state.view = new View(name);
  for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("current", a.dataset.view === name);
  return state.view;
}

async function route() {
  const { path, params } = parseHash();
  const found = ROUTES.find(([re]) => re.test(path));
  if (!found) {
    location.hash = "#/runs";
    return;
  }
  const [re, name, render] = found;
  const view = startView(name);
  document.getElementById("nav").hidden = false;
  document.getElementById("logout").hidden = false;
  try {
    const args = path.match(re).slice(1).map((part) => decodeURIComponent(part));
    await render(view, args, params);
    if (view.alive) view.main.dataset.state = "ready";
  } catch (err) {
    if (err instanceof LoginNeeded || !view.alive) return;
    view.main.dataset.state = "error";
    put(view.main, failure(err));
  }
}

/** An error as the user reads it: the message, and what to do when the server says. */
export function failure(err) {
  if (err instanceof ApiError) {
    return errorBlock({ code: err.code || `HTTP ${err.status}`, message: err.message, hint: err.hint }, "error flash-error");
  }
  return errorBlock({ message: err && err.message ? err.message : String(err) }, "error flash-error");
}

// ---------------------------------------------------------------- login

function showLogin() {
  if (state.view && state.view.name === "login") return;
  state.csrf = null;
  const view = startView("login");
  document.getElementById("nav").hidden = true;
  document.getElementById("logout").hidden = true;
  const input = h("input", { type: "password", id: "token", name: "token", autocomplete: "off", required: true });
  const message = h("div", { id: "login-message", role: "alert" });
  const button = h("button", { type: "submit", class: "primary" }, "Log in");
  const form = h("form", { id: "login-form", class: "login panel" },
    h("h1", null, "fabric console"),
    h("label", { for: "token" }, "Service token"), input,
    h("p", { class: "muted" }, "The token of this fabric serve (its environment variable or token file, as "
      + "fabric serve said when it started). It is sent once; the browser then keeps a session cookie."),
    button, message);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    button.disabled = true;
    message.replaceChildren();
    try {
      const response = await fetch("/console/login", {
        method: "POST",
        headers: { "Content-Type": "application/json", Accept: "application/json" },
        body: JSON.stringify({ token: input.value }),
        credentials: "same-origin",
        cache: "no-store",
      });
      const data = await readJson(response);
      if (response.status === 401) {
        put(message, errorBlock({ message: "That is not this service's token.", hint: "check for a typo or a token of another service" }));
        return;
      }
      if (!response.ok) throw new ApiError(response.status, data);
      state.csrf = data && data.csrf ? String(data.csrf) : null;
      input.value = "";
      if (!location.hash || location.hash === "#") history.replaceState(null, "", "#/runs");
      await route();
    } catch (err) {
      put(message, failure(err));
    } finally {
      button.disabled = false;
    }
  });
  put(view.main, form);
  view.main.dataset.state = "ready";
  input.focus();
}

async function logout() {
  try {
    await api("/console/logout", { method: "POST", body: {} });
  } catch (err) {
    if (err instanceof LoginNeeded) return;
  }
  showLogin();
}

// ---------------------------------------------------------------- small pieces

function statusBadge(status, id) {
  const text = asText(status || "unknown");
  return h("span", { id, class: `status status-${text.replace(/[^a-z_]/g, "")}` }, text);
}

function kv(pairs) {
  return h("dl", { class: "kv" }, pairs.filter(([, v]) => v !== undefined && v !== null && v !== "")
    .map(([k, v]) => [h("dt", null, k), h("dd", null, v instanceof Node ? v : asText(v))]));
}

function when(iso, short = false) {
  if (!iso) return "";
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return asText(iso);
  return short
    ? date.toLocaleString(undefined, { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" })
    : date.toLocaleString();
}

function flash(into, text, cls = "flash") {
  into.replaceChildren(h("div", { class: cls, role: "status" }, text));
}

function select(id, options, value) {
  const el = h("select", { id, name: id });
  for (const [v, label] of options) {
    const option = h("option", { value: v }, label);
    if (v === value) option.selected = true;
    el.appendChild(option);
  }
  return el;
}

// ---------------------------------------------------------------- #/runs

function runsQuery(filters, before) {
  const q = new URLSearchParams();
  for (const key of ["status", "pack", "q"]) if (filters[key]) q.set(key, filters[key]);
  q.set("limit", "50");
  if (before) q.set("before", before);
  return q.toString();
}

/** Whether a summary belongs in the list the filters describe (as GET /runs filters). */
export function matches(summary, filters) {
  if (filters.status && summary.status !== filters.status) return false;
  if (filters.pack && summary.pack !== filters.pack) return false;
  if (filters.q && !asText(summary.task).toLowerCase().includes(filters.q.toLowerCase())) return false;
  return true;
}

function runRow(s) {
  const tokens = s.tokens && typeof s.tokens === "object" ? s.tokens.total : null;
  const row = h("tr", { "data-run-id": asText(s.run_id), class: "run" },
    h("td", null, statusBadge(s.status)),
    h("td", { class: "mono" }, link(runRoute(s.run_id), asText(s.run_id), "run-link"),
      s.replay_of ? h("div", { class: "muted" }, "replay") : null,
      s.resumed ? h("div", { class: "muted" }, "resumed") : null),
    h("td", { class: "pack-name" }, asText(s.pack ?? "")),
    h("td", null, asText(s.model ?? "")),
    h("td", { class: "task", title: asText(s.task ?? "") }, asText(s.task ?? "")),
    h("td", { class: "num" }, fmtInt(s.steps)),
    h("td", { class: "num" }, fmtInt(tokens)),
    h("td", { class: "num" }, fmtCost(s.cost_usd)),
    h("td", { class: "num" }, fmtSeconds(s.duration_s)),
    h("td", { class: "started" }, when(s.started_at, true)));
  if (s.error && typeof s.error === "object") row.title = asText(s.error.message ?? "");
  return row;
}

async function runsView(view, _args, params) {
  const filters = { status: params.get("status") || "", pack: params.get("pack") || "", q: params.get("q") || "" };
  const status = select("filter-status", [["", "any status"], ...STATUSES.map((s) => [s, s])], filters.status);
  const pack = select("filter-pack", [["", "any pack"]], filters.pack);
  if (filters.pack) pack.appendChild(h("option", { value: filters.pack, selected: true }, filters.pack));
  const search = h("input", { type: "search", id: "filter-q", placeholder: "search the task text", value: filters.q });
  const live = h("span", { id: "runs-live", class: "live-dot" }, "○ not live");
  const body = h("tbody");
  const more = h("button", { type: "button", id: "runs-more", hidden: true }, "older runs");
  const empty = h("p", { id: "runs-empty", class: "muted", hidden: true }, "No runs match.");
  const problem = h("div", { id: "runs-problem" });
  put(view.main,
    h("div", { class: "run-head" }, h("h1", null, "Runs"), live, link("#/new", "new task", "new-link")),
    h("div", { class: "filters" }, status, pack, search),
    problem,
    h("div", { class: "table-wrap" }, h("table", { class: "runs" }, h("thead", null, h("tr", null,
      ["status", "run", "pack", "model", "task", "steps", "tokens", "cost", "duration", "started"]
        .map((t, i) => h("th", { class: i >= 5 && i <= 8 ? "num" : null }, t)))), body)),
    empty, more);

  let next = null;
  let generation = 0;
  const rows = new Map();

  async function load(before) {
    const mine = before ? generation : ++generation;
    if (!before) {
      body.replaceChildren();
      rows.clear();
    }
    const data = await api(`/runs?${runsQuery(filters, before)}`);
    if (mine !== generation || !view.alive) return;
    for (const summary of data.runs || []) {
      if (rows.has(summary.run_id)) continue;
      const row = runRow(summary);
      rows.set(summary.run_id, row);
      body.appendChild(row);
    }
    next = data.next || null;
    more.hidden = !next;
    empty.hidden = rows.size > 0;
  }

  function upsert(summary) {
    if (!summary || typeof summary !== "object" || !summary.run_id) return;
    const old = rows.get(summary.run_id);
    if (!matches(summary, filters)) {
      if (old) {
        old.remove();
        rows.delete(summary.run_id);
      }
      empty.hidden = rows.size > 0;
      return;
    }
    const row = runRow(summary);
    row.classList.add("fresh");
    if (old) {
      old.replaceWith(row);
    } else {  // newest first as GET /runs has it: by run id, which begins with the time the
      // run was asked for (a task that waited in the queue may start after newer ones)
      const key = asText(summary.run_id);
      const later = [...body.rows].find((r) => (r.dataset.runId || "") < key);
      if (later) later.before(row);
      else if (next) return;  // older than what is shown: it comes with "older runs"
      else body.appendChild(row);
    }
    rows.set(summary.run_id, row);
    empty.hidden = true;
  }

  const refilter = () => {
    filters.status = status.value;
    filters.pack = pack.value;
    filters.q = search.value.trim();
    const query = new URLSearchParams();
    for (const key of ["status", "pack", "q"]) if (filters[key]) query.set(key, filters[key]);
    history.replaceState(null, "", "#/runs" + (query.toString() ? `?${query}` : ""));
    load().catch((err) => problem.replaceChildren(failure(err)));
  };
  let typing = null;
  status.addEventListener("change", refilter);
  pack.addEventListener("change", refilter);
  search.addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(refilter, 250);
  });
  view.onEnd(() => clearTimeout(typing));
  more.addEventListener("click", () => load(next).catch((err) => problem.replaceChildren(failure(err))));

  api("/packs").then((data) => {
    for (const p of (data && data.packs) || []) {
      if (p.name !== filters.pack) pack.appendChild(h("option", { value: asText(p.name) }, asText(p.name)));
    }
  }).catch(() => {});

  await load();
  if (!view.alive) return;
  const stream = new EventSource("/runs/stream");
  view.onEnd(() => stream.close());
  stream.addEventListener("open", () => {
    live.textContent = "● live";
    live.classList.add("on");
  });
  stream.addEventListener("run", (event) => {
    try {
      upsert(JSON.parse(event.data));
    } catch (err) {
      console.warn("bad run message", err);
    }
  });
  stream.addEventListener("error", () => {
    live.textContent = "○ reconnecting";
    live.classList.remove("on");
    checkSession();
  });
}

/** An event stream that fails may have lost its session: ask, and log in again if so. */
function checkSession() {
  session().catch(() => {});
}

// ---------------------------------------------------------------- #/runs/<id>

function button(id, label, onClick, cls = "") {
  const el = h("button", { type: "button", id, class: cls || null }, label);
  el.addEventListener("click", () => onClick(el));
  return el;
}

function replayResult(result) {
  const r = result && typeof result === "object" ? result : {};
  const replay = link(runRoute(r.run_id), `the replay: run ${asText(r.run_id)}`, "replay-link");
  if (r.identical) {
    return h("div", { class: "replay-result identical" },
      `identical: the replay made the same ${fmtInt(r.steps)} step(s) · `, replay);
  }
  const d = r.divergence && typeof r.divergence === "object" ? r.divergence : {};
  return h("div", { class: "replay-result diverged" },
    h("div", null, `diverged at step ${asText(d.step)}, in `, h("code", { class: "divergence-field" }, asText(d.field)), " · ", replay),
    h("h4", null, "recorded"), textBlock(d.recorded, "json recorded"),
    h("h4", null, "now"), textBlock(d.now, "json now"));
}

async function runView(view, [runId]) {
  const base = `/runs/${enc(runId)}`;
  const info = await api(base);
  if (!view.alive) return;
  let summary = (info && info.summary) || {};
  const taskId = summary.task_id || (info.task && info.task.id) || null;
  const statusHolder = h("span", { class: "run-status-holder" });
  const facts = h("p", { class: "muted run-facts" });
  const approvals = h("div", { id: "approvals" });
  const actions = h("div", { id: "run-actions", class: "actions" });
  const notice = h("div", { id: "run-notice" });
  const replayOut = h("div", { id: "replay-result" });
  const timeline = new Timeline();
  view.onEnd(() => timeline.destroy());
  put(view.main,
    h("div", { class: "run-head" }, h("h1", null, "Run ", h("span", { class: "mono", id: "run-id" }, runId)), statusHolder),
    facts, approvals, actions, notice, replayOut, timeline.element);

  const status = () => {
    if (timeline.finished) return asText(timeline.finished.status);
    if (taskId && timeline.pendingApprovals().length) return "awaiting_approval";
    return asText(summary.status || "unknown");
  };

  let pendingKey = null;
  const approvalBox = (ask) => {
    const out = h("div", { class: "approval-out" });
    const box = h("div", { class: "approval-box", "data-call-id": asText(ask.call_id) },
      h("div", null, h("strong", null, `step ${asText(ask.step)}: ${asText(ask.tool)}`), " waits for approval"),
      h("div", { class: "rule-line" }, "asked by the rule ", h("code", { class: "rule" }, asText(ask.rule))),
      textBlock(ask.arguments, "json approval-args"),
      ask.timeout_s ? h("div", { class: "muted" }, `refused by itself after ${fmtSeconds(ask.timeout_s)} without an answer`) : null);
    if (!taskId) {
      put(box, h("p", { class: "muted" }, "This run was started from the command line: answer it there."));
    } else {
      const answers = [["approve", "Approve", true, "once"], ["approve-run", "Approve for the rest of the run", true, "run"], ["deny", "Deny", false, "once"]];
      put(box, h("div", { class: "buttons" }, answers.map(([cls, label, approve, scope]) => {
        const el = h("button", { type: "button", class: `${cls} ${approve ? "primary" : "danger"}` }, label);
        el.addEventListener("click", async () => {
          const all = [...box.querySelectorAll("button")];
          all.forEach((b) => { b.disabled = true; });
          try {
            await api(`/tasks/${enc(taskId)}/approvals/${enc(ask.call_id)}`, { method: "POST", body: { approve, scope } });
            flash(out, approve ? "approved: the call runs" : "denied: the model is told");
          } catch (err) {
            if (err instanceof LoginNeeded) return;
            out.replaceChildren(failure(err));
            all.forEach((b) => { b.disabled = false; });
          }
        });
        return el;
      })));
    }
    return put(box, out);
  };

  let actionsKey = null;
  let resumeSteps = null;
  const suggestSteps = () => {  // for a run stopped at max_steps: the steps done and its limit
    const limit = timeline.started && timeline.started.limits ? timeline.started.limits.max_steps : null;
    if (resumeSteps && !resumeSteps.value && !resumeSteps.dataset.edited && status() === "max_steps" && typeof limit === "number") {
      resumeSteps.value = String((Number(summary.steps) || 0) + limit);
    }
  };
  const renderActions = (now) => {
    if (now === actionsKey) return;
    actionsKey = now;
    resumeSteps = null;
    const items = [];
    if (taskId && LIVE.has(now)) {
      items.push(button("cancel", "Cancel", async (el) => {
        el.disabled = true;
        try {
          await api(`/tasks/${enc(taskId)}/cancel`, { method: "POST" });
          flash(notice, "cancel asked: the run stops at its next step");
        } catch (err) {
          if (!(err instanceof LoginNeeded)) notice.replaceChildren(failure(err));
          el.disabled = false;
        }
      }, "danger"));
    }
    if (now === "interrupted" || now === "max_steps") {
      if (taskId) {
        const steps = h("input", { type: "number", id: "resume-steps", min: 1, title: "model calls allowed in all" });
        steps.addEventListener("input", () => { steps.dataset.edited = "yes"; });
        resumeSteps = steps;
        items.push(h("label", { for: "resume-steps" }, "steps in all "), steps, button("resume", "Resume", async (el) => {
          el.disabled = true;
          const n = parseInt(steps.value, 10);
          try {
            await api(`/tasks/${enc(taskId)}/resume`, { method: "POST", body: Number.isFinite(n) ? { max_steps: n } : {} });
            summary = { ...summary, status: "queued" };
            flash(notice, "resumed: the run goes on below");
            openStream();
            refresh();
          } catch (err) {
            if (!(err instanceof LoginNeeded)) notice.replaceChildren(failure(err));
            el.disabled = false;
          }
        }));
      } else {
        items.push(h("span", { class: "muted" }, "Started from the command line; resume it there: ", h("code", null, `fabric resume ${runId}`)));
      }
    }
    if (!LIVE.has(now)) {
      items.push(button("replay", "Replay", async (el) => {
        el.disabled = true;
        replayOut.replaceChildren(h("p", { class: "muted" }, "replaying…"));
        try {
          replayOut.replaceChildren(replayResult(await api(`${base}/replay`, { method: "POST", body: { live_tools: false } })));
        } catch (err) {
          if (!(err instanceof LoginNeeded)) replayOut.replaceChildren(failure(err));
        } finally {
          el.disabled = false;
        }
      }));
    }
    items.push(h("a", { id: "download-html", href: `${base}/html`, download: true }, "download the share file"),
      h("a", { id: "download-runlog", href: `${base}/runlog`, download: true }, "runlog"));
    actions.replaceChildren(...items);
  };

  function refresh() {
    const now = status();
    statusHolder.replaceChildren(statusBadge(now, "run-status"));
    timeline.setLiveStatus(now);
    facts.textContent = [summary.pack, summary.model, summary.task_id ? "service task" : null, when(summary.started_at)]
      .filter(Boolean).map(asText).join(" · ");
    const pending = timeline.pendingApprovals();
    const key = pending.map((p) => `${p.step}:${p.call_id}`).join(",");
    if (key !== pendingKey) {
      pendingKey = key;
      approvals.replaceChildren(...pending.map(approvalBox));
    }
    renderActions(now);
    suggestSteps();
  }

  let stream = null;
  const queued = [];
  const flush = () => {
    if (view.alive && queued.length) timeline.add(queued.splice(0));
  };
  function openStream() {
    if (stream) stream.close();
    const es = new EventSource(`${base}/events`);
    stream = es;
    view.onEnd(() => es.close());
    const onEvent = (message) => {
      let event;
      try {
        event = JSON.parse(message.data);
      } catch {
        return;
      }
      if (event.kind === "run_resumed") summary = { ...summary, status: "running" };
      if (event.kind === "run_started" && summary.status === "queued") summary = { ...summary, status: "running" };
      if (event.kind === "run_finished") summary = { ...summary, status: asText(event.status), steps: event.steps };
      queued.push(event);
      if (queued.length === 1) setTimeout(flush, 30);  // a burst (a finished run's 10,000) at once
    };
    for (const kind of KINDS) es.addEventListener(kind, onEvent);
    es.addEventListener("message", onEvent);
    es.addEventListener("delta", (message) => {
      try {
        const d = JSON.parse(message.data);
        flush();
        timeline.delta(d.step, d.text);
      } catch {
        /* not a delta */
      }
    });
    es.addEventListener("error", async () => {
      if (es.readyState === EventSource.CLOSED || stream !== es) return;
      try {  // the stream ended (the run is over, or nothing runs it) or the line broke
        const fresh = await api(base);
        summary = (fresh && fresh.summary) || summary;
      } catch (err) {
        if (err instanceof LoginNeeded) es.close();
        return;
      }
      if (!LIVE.has(asText(summary.status))) es.close();
      refresh();
    });
  }

  timeline.onChange = refresh;
  refresh();
  openStream();
}

// ---------------------------------------------------------------- #/new

function formRow(id, label, control, help) {
  return h("div", { class: "form-row", id: `${id}-row` }, h("label", { for: id }, label), control,
    help ? h("div", { class: "help" }, help) : null);
}

/** What POST /tasks accepts for a pack, from its `inputs` (tolerant of what is missing). */
export function packInputs(pack) {
  const inputs = pack && typeof pack.inputs === "object" && pack.inputs ? pack.inputs : {};
  let verify = inputs.verify;
  if (verify && typeof verify === "object" && !Array.isArray(verify)) verify = verify.programs ?? verify.allowed;
  const steps = inputs.max_steps;
  const max = typeof steps === "number" ? steps : steps && typeof steps === "object" ? steps.max : null;
  return {
    workspace: inputs.workspace !== false,
    verify: Array.isArray(verify) ? verify.map(asText) : null,
    maxSteps: typeof max === "number" ? max : null,
    defaultSteps: pack && pack.limits && typeof pack.limits.max_steps === "number" ? pack.limits.max_steps : null,
  };
}

async function newTaskView(view, _args, params) {
  const data = await api("/packs");
  const packs = ((data && data.packs) || []).filter((p) => p && p.name);
  put(view.main, h("h1", null, "New task"));
  if (!packs.length) {
    put(view.main, h("p", null, "This service has no packs."));
    return;
  }
  const byName = new Map(packs.map((p) => [asText(p.name), p]));
  const wanted = params.get("pack");
  const packSelect = select("new-pack", [...byName.keys()].map((n) => [n, n]), byName.has(wanted) ? wanted : asText(packs[0].name));
  const about = h("div", { id: "pack-about", class: "panel" });
  const task = h("textarea", { id: "new-task", name: "task", required: true, placeholder: "What should the pack do?" });
  const workspace = h("input", { type: "text", id: "new-workspace", name: "workspace", class: "mono", placeholder: "the service's first workspace root" });
  const maxSteps = h("input", { type: "number", id: "new-max-steps", name: "max_steps", min: 1 });
  const verify = h("input", { type: "text", id: "new-verify", name: "verify", class: "mono" });
  const model = h("input", { type: "text", id: "new-model", name: "model", class: "mono", placeholder: "the pack's model" });
  const verifyHelp = h("span");
  const rows = {
    workspace: formRow("new-workspace", "Workspace", workspace, "a folder under the service's workspace roots (relative: from the first root)"),
    maxSteps: formRow("new-max-steps", "Steps at most", maxSteps, "model calls allowed (default: the pack's limit)"),
    verify: formRow("new-verify", "Check the work with", verify, verifyHelp),
    model: formRow("new-model", "Model", model, "a model key or name (optional)"),
  };
  const problem = h("div", { id: "new-problem" });
  const submit = h("button", { type: "submit", class: "primary", id: "new-submit" }, "Start the task");
  const form = h("form", { id: "new-task-form" },
    formRow("new-pack", "Pack", packSelect), about,
    formRow("new-task", "Task", task), rows.workspace, rows.maxSteps, rows.verify, rows.model,
    problem, submit);

  const showPack = () => {
    const pack = byName.get(packSelect.value) || {};
    const inputs = packInputs(pack);
    const use = pack.will_use && typeof pack.will_use === "object" ? pack.will_use : {};
    about.replaceChildren(
      h("p", { class: "pack-description" }, asText(pack.description ?? "")),
      kv([["tools", Array.isArray(pack.tools) ? pack.tools.map(asText).join(", ") : ""],
        ["model", use.model ? `${asText(use.model)} on ${asText(use.backend)}` : use.error ? asText(use.error.message) : asText(pack.asks ?? "")]]),
      link(`#/packs`, "the pack's tools, policy and limits", "pack-link"));
    rows.workspace.hidden = !inputs.workspace;
    rows.verify.hidden = Array.isArray(inputs.verify) && !inputs.verify.length;
    verifyHelp.textContent = inputs.verify
      ? `a command starting with one of: ${inputs.verify.join(", ")}; or "off"; empty: the pack's own check`
      : `a command run in the workspace, or "off"; empty: the pack's own check`;
    maxSteps.max = inputs.maxSteps === null ? "" : String(inputs.maxSteps);
    maxSteps.placeholder = inputs.defaultSteps === null ? "" : String(inputs.defaultSteps);
  };
  packSelect.addEventListener("change", showPack);
  showPack();

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    problem.replaceChildren();
    const body = { pack: packSelect.value, task: task.value };
    if (!rows.workspace.hidden && workspace.value.trim()) body.workspace = workspace.value.trim();
    if (maxSteps.value) body.max_steps = parseInt(maxSteps.value, 10);
    if (!rows.verify.hidden && verify.value.trim()) body.verify = verify.value.trim();
    if (model.value.trim()) body.model = model.value.trim();
    submit.disabled = true;
    try {
      const doc = await api("/tasks", { method: "POST", body });
      location.hash = runRoute(doc.id);
    } catch (err) {
      if (!(err instanceof LoginNeeded)) problem.replaceChildren(failure(err));
    } finally {
      submit.disabled = false;
    }
  });
  put(view.main, form);
}

// ---------------------------------------------------------------- #/packs

function toolsTable(pack) {
  const detail = Array.isArray(pack.tools_detail) ? pack.tools_detail : null;
  if (!detail) return h("p", { class: "tools" }, Array.isArray(pack.tools) ? pack.tools.map(asText).join(", ") : "");
  return h("table", { class: "tools" },
    h("thead", null, h("tr", null, h("th", null, "tool"), h("th", null, "what it does"), h("th", null, "parameters"))),
    h("tbody", null, detail.map((tool) => {
      const params = tool && tool.parameters && typeof tool.parameters === "object" ? tool.parameters : {};
      const names = params.properties && typeof params.properties === "object" ? Object.keys(params.properties) : [];
      const required = new Set(Array.isArray(params.required) ? params.required : []);
      return h("tr", { class: "tool-row" },
        h("td", { class: "tool mono" }, asText(tool && tool.name)),
        h("td", null, asText(tool && tool.description)),
        h("td", null, names.map((n) => h("div", { class: "mono" }, n, required.has(n) ? " (required)" : "")),
          lazyDetails("schema", () => h("pre", { class: "json" }, asText(params)))));
    })));
}

async function packsView(view) {
  const data = await api("/packs");
  put(view.main, h("h1", null, "Packs"));
  for (const pack of (data && data.packs) || []) {
    const use = pack.will_use && typeof pack.will_use === "object" ? pack.will_use : {};
    const schema = pack.finish_schema;
    const required = schema && Array.isArray(schema.required) ? schema.required.map(asText) : [];
    put(view.main, h("section", { class: "pack panel", "data-pack": asText(pack.name) },
      h("h2", { class: "pack-name" }, asText(pack.name)),
      h("p", { class: "pack-description" }, asText(pack.description ?? "")),
      kv([["asks for", pack.asks], ["a run would use", use.model ? `${asText(use.model)} on ${asText(use.backend)}` : null],
        ["why", use.reason], ["no model", use.error ? asText(use.error.message) : null]]),
      link(`#/new?pack=${enc(asText(pack.name))}`, "new task with this pack", "new-with-pack"),
      h("h3", null, "tools"), toolsTable(pack),
      pack.policy ? [h("h3", null, "policy"), policyTable(pack.policy)] : null,
      pack.limits ? [h("h3", null, "limits"), kv(Object.entries(pack.limits).map(([k, v]) => [k, asText(v)]))] : null,
      schema ? [h("h3", null, "finish schema"),
        h("p", { class: "muted" }, required.length ? `required: ${required.join(", ")}` : "nothing required"),
        h("pre", { class: "json finish-schema" }, asText(schema))] : null));
  }
}

// ---------------------------------------------------------------- #/models

async function modelsView(view) {
  const data = (await api("/models")) || {};
  const pick = data.pick && typeof data.pick === "object" ? data.pick : {};
  put(view.main, h("h1", null, "Models"),
    h("p", { id: "model-pick" }, pick.model
      ? [`A run of ${asText(data.pack)} would use `, h("strong", null, asText(pick.model)), ` on ${asText(pick.backend)}: ${asText(pick.reason ?? "")}`]
      : errorBlock(pick.error)));
  const measured = Array.isArray(data.measured) ? data.measured : [];
  put(view.main, h("h2", null, "Measured in the runs folder"), measured.length
    ? h("table", { class: "measured" },
      h("thead", null, h("tr", null, ["backend", "model", "runs", "completion tokens", "model time", "tokens/s"]
        .map((t, i) => h("th", { class: i >= 2 ? "num" : null }, t)))),
      h("tbody", null, measured.map((m) => h("tr", { class: "measured-row" },
        h("td", null, asText(m.backend)), h("td", { class: "mono" }, asText(m.model)),
        h("td", { class: "num" }, fmtInt(m.runs)), h("td", { class: "num" }, fmtInt(m.completion_tokens)),
        h("td", { class: "num" }, fmtSeconds(m.llm_seconds)),
        h("td", { class: "num tokens-per-s" }, typeof m.tokens_per_s === "number" ? m.tokens_per_s.toFixed(1) : "–")))))
    : h("p", { class: "muted" }, "No model replies in the runs folder yet."));
  for (const backend of Array.isArray(data.backends) ? data.backends : []) {
    const models = Array.isArray(backend.models) ? backend.models : [];
    put(view.main, h("section", { class: "backend panel", "data-backend": asText(backend.name) },
      h("h2", null, asText(backend.name), h("span", { class: "muted" }, ` · ${asText(backend.kind)} · ${asText(backend.url ?? "")}`)),
      errorBlock(backend.error),
      backend.pick && backend.pick.model ? h("p", null, "pick: ", h("strong", null, asText(backend.pick.model)), ` (${asText(backend.pick.reason ?? "")})`) : null,
      models.length ? h("table", { class: "models" },
        h("thead", null, h("tr", null, ["model", "tools", "context", "used", "size (B)", "family", "verdict"].map((t) => h("th", null, t)))),
        h("tbody", null, models.map((m) => h("tr", null,
          h("td", { class: "mono" }, asText(m.name)), h("td", null, m.tools === true ? "yes" : m.tools === false ? "no" : "?"),
          h("td", { class: "num" }, fmtInt(m.context_length)), h("td", { class: "num" }, fmtInt(m.context_used)),
          h("td", { class: "num" }, m.parameters_b ?? ""), h("td", null, asText(m.family ?? "")), h("td", null, asText(m.verdict ?? ""))))))
        : h("p", { class: "muted" }, "no models listed")));
  }
}

// ---------------------------------------------------------------- start

async function start() {
  document.getElementById("logout").addEventListener("click", logout);
  window.addEventListener("hashchange", () => route());
  try {
    await session();
  } catch (err) {
    if (err instanceof LoginNeeded) return;
    const view = startView("error");
    view.main.dataset.state = "error";
    put(view.main, failure(err));
    return;
  }
  await route();
}

start();
