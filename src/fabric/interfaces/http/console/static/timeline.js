// The timeline of one run: runlog events in, DOM out. The console's run page feeds it live
// events; the share file (fabric show RUN --html) inlines this file and feeds it the events
// embedded in the page. Every value from a runlog reaches the page as text (textContent,
// createTextNode, attribute setters); links are built here, from ids, never taken as given.
//
// A run of 10,000 events stays usable: events are folded into items (a model reply, a tool
// call with its verdict and result, a note), and only the first pages of items become DOM;
// the next page is built when the end of the list scrolls into view (IntersectionObserver)
// or on the "show more" button. Heavy parts (what the model was sent, long outputs, long
// diffs) are built when their <details> is opened.

export const PAGE_SIZE = 150;
export const BIG_OUTPUT = 2048;
const PREVIEW_CHARS = 600;
const DIFF_OPEN_LINES = 80;

export const KINDS = [
  "run_started", "llm_request", "llm_response", "llm_retry", "llm_fallback", "tool_call",
  "policy_decision", "approval_requested", "approval", "tool_result", "brief", "nudge",
  "context_compacted", "verification", "plan", "memory", "run_resumed", "run_finished",
];

// ---------------------------------------------------------------- DOM helpers

/** An element with properties and children; strings become text nodes. Refuses anything
 * that could turn data into markup or script (event handlers, innerHTML, style, srcdoc). */
export function h(tag, props, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (/^on|^(innerhtml|outerhtml|style|srcdoc)$/i.test(key)) {
      throw new Error(`h(): refusing to set ${key}`);
    }
    if (key === "class") el.className = String(value);
    else if (key === "href") {
      const href = safeHref(value);
      if (href !== null) el.setAttribute("href", href);
    } else if (key === "dataset") Object.assign(el.dataset, value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  put(el, children);
  return el;
}

/** Append children: nodes as they are, anything else as a text node (lists flattened). */
export function put(el, ...children) {
  for (const child of [children].flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

/** Only in-page routes (#/...) and same-origin paths (/...), without spaces or backslashes;
 * null for anything else (javascript:, data:, //host, ...). */
export function safeHref(url) {
  const text = String(url);
  if (/[\s\\]/.test(text)) return null;
  if (text.startsWith("#/")) return text;
  if (text.startsWith("/") && !text.startsWith("//")) return text;
  return null;
}

/** A link when href is safe, else the text alone. */
export function link(href, text, cls) {
  const safe = href === null || href === undefined ? null : safeHref(href);
  return safe === null ? h("span", { class: cls }, text) : h("a", { class: cls, href: safe }, text);
}

/** The console's route of a run. */
export function runRoute(runId) {
  return "#/runs/" + encodeURIComponent(String(runId));
}

/** Where the console serves a run's artifact ("artifacts/x.txt" as tool_result names it). */
export function artifactRoute(runId, artifact) {
  const parts = String(artifact).split("/").filter((p) => p && p !== "." && p !== "..");
  return "/runs/" + encodeURIComponent(String(runId)) + "/" + parts.map(encodeURIComponent).join("/");
}

/** A <details> whose body is built the first time it is opened. */
export function lazyDetails(summary, build, { cls = "", key = "" } = {}) {
  const details = h("details", { class: ("lazy " + cls).trim(), dataset: key ? { key } : undefined },
    h("summary", null, summary));
  let built = false;
  details.addEventListener("toggle", () => {
    if (details.open && !built) {
      built = true;
      put(details, build());
    }
  });
  return details;
}

// ---------------------------------------------------------------- formatting

const numberFormat = new Intl.NumberFormat("en-US");

export function fmtInt(n) {
  return typeof n === "number" && Number.isFinite(n) ? numberFormat.format(n) : "–";
}

export function fmtMs(ms) {
  if (typeof ms !== "number" || !Number.isFinite(ms)) return "";
  if (ms < 10) return `${ms.toFixed(1)} ms`;
  if (ms < 1000) return `${Math.round(ms)} ms`;
  return fmtSeconds(ms / 1000);
}

export function fmtSeconds(s) {
  if (typeof s !== "number" || !Number.isFinite(s)) return "–";
  if (s < 60) return `${s.toFixed(1)} s`;
  const minutes = Math.floor(s / 60);
  const rest = Math.round(s - minutes * 60);
  return rest ? `${minutes} min ${rest} s` : `${minutes} min`;
}

export function fmtCost(usd) {
  return typeof usd === "number" && Number.isFinite(usd) ? `$${usd.toFixed(4)}` : "–";
}

export function fmtUsage(usage) {
  if (!usage || typeof usage !== "object") return "";
  const total = usage.total_tokens ?? usage.total;
  const prompt = usage.prompt_tokens ?? usage.prompt;
  const completion = usage.completion_tokens ?? usage.completion;
  return `${fmtInt(total)} tokens (${fmtInt(prompt)} in, ${fmtInt(completion)} out)`;
}

export function asText(value) {
  if (typeof value === "string") return value;
  if (value === undefined) return "";
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}

function ofType(value) {
  if (Array.isArray(value)) return "array";
  if (value === null) return "null";
  return typeof value;
}

/** A long text: a preview and the whole in a <details> built on opening; short: a <pre>. */
export function textBlock(text, cls, { artifact = null } = {}) {
  const body = asText(text);
  if (body.length <= BIG_OUTPUT) return h("pre", { class: cls }, body);
  const box = h("div", { class: `big ${cls}` },
    h("pre", { class: cls + " preview" }, body.slice(0, PREVIEW_CHARS) + "…"),
    lazyDetails(`show all ${fmtInt(body.length)} characters`, () => h("pre", { class: cls }, body),
      { cls: "all" }));
  if (artifact) put(box, artifact);
  return box;
}

// ---------------------------------------------------------------- diffs

/** A unified diff as a <pre> of one span per line, coloured by its first character. */
export function diffBlock(diff) {
  const lines = String(diff).split("\n");
  if (lines.length && lines[lines.length - 1] === "") lines.pop();
  const build = () => h("pre", { class: "diff" }, lines.map((line) => h("span", { class: diffClass(line) }, line + "\n")));
  if (lines.length <= DIFF_OPEN_LINES) return build();
  return lazyDetails(`diff: ${fmtInt(lines.length)} lines`, build, { cls: "diff-long" });
}

export function diffClass(line) {
  if (line.startsWith("+++") || line.startsWith("---")) return "d-file";
  if (line.startsWith("@@")) return "d-hunk";
  if (line.startsWith("+")) return "d-add";
  if (line.startsWith("-")) return "d-del";
  if (line.startsWith("\\") || line.startsWith("[")) return "d-note";
  return "d-ctx";
}

// ---------------------------------------------------------------- the plan

const PLAN_MARKS = { done: "[x]", in_progress: "[>]", pending: "[ ]" };

/** A plan event's checklist (ADR 0029): "1/3 done", then one line a step with its mark. */
export function planBlock(event) {
  const items = Array.isArray(event.items) ? event.items : [];
  const done = items.filter((i) => i && i.status === "done").length;
  return h("div", { class: "plan" },
    h("div", { class: "plan-head" }, `plan: ${fmtInt(done)}/${fmtInt(items.length)} done`),
    h("ol", { class: "plan-items" }, items.map((item) => {
      const it = item && typeof item === "object" ? item : {};
      const status = Object.prototype.hasOwnProperty.call(PLAN_MARKS, it.status) ? it.status : "unknown";
      return h("li", { class: `plan-item plan-${status}`, title: status },
        h("span", { class: "plan-mark" }, PLAN_MARKS[status] || "[?]"), " ",
        h("span", { class: "plan-step" }, asText(it.step)));
    })),
    event.explanation ? h("div", { class: "plan-why" }, "why: ", h("span", { class: "plan-why-text" }, asText(event.explanation))) : null);
}

function changesBlock(changes) {
  if (!Array.isArray(changes) || !changes.length) return null;
  return h("div", { class: "changes" }, changes.map((change) => {
    const c = change && typeof change === "object" ? change : {};
    const what = c.created ? "created" : c.deleted ? "deleted" : "changed";
    return h("div", { class: "change" },
      h("div", { class: "change-head" }, h("span", { class: "change-path" }, asText(c.path)), " ",
        h("span", { class: `change-what ${what}` }, what)),
      typeof c.diff === "string" && c.diff ? diffBlock(c.diff) : null);
  }));
}

// ---------------------------------------------------------------- payload vs schema

/** Rows of the final payload against the finish schema: every property the schema names
 * (required ones marked present or missing), then the payload's keys it does not name. */
export function payloadRows(payload, schema) {
  const props = schema && typeof schema === "object" && schema.properties && typeof schema.properties === "object"
    ? schema.properties : {};
  const required = new Set(Array.isArray(schema?.required) ? schema.required.map(String) : []);
  const given = payload && typeof payload === "object" && !Array.isArray(payload) ? payload : {};
  const rows = [];
  const has = (key) => Object.prototype.hasOwnProperty.call(given, key);
  for (const [name, spec] of Object.entries(props)) {
    const type = spec && typeof spec === "object" ? asText(spec.type ?? "") : "";
    rows.push({ name, type, required: required.has(name), present: has(name), value: given[name], known: true });
  }
  for (const name of required) {
    if (!(name in props)) rows.push({ name, type: "", required: true, present: has(name), value: given[name], known: true });
  }
  for (const name of Object.keys(given)) {
    if (!(name in props) && !required.has(name)) {
      rows.push({ name, type: ofType(given[name]), required: false, present: true, value: given[name], known: false });
    }
  }
  return rows;
}

export function payloadTable(payload, schema) {
  const rows = payloadRows(payload, schema);
  const table = h("table", { class: "payload" },
    h("thead", null, h("tr", null, ["field", "type", "", "value"].map((t) => h("th", null, t)))));
  const body = h("tbody");
  for (const row of rows) {
    let mark = row.present ? "present" : "absent";
    if (row.required) mark = row.present ? "required, present" : "required, missing";
    if (!row.known) mark = "not in the schema";
    const cls = row.required && !row.present ? "missing" : row.present ? "present" : "absent";
    body.appendChild(h("tr", { class: cls },
      h("td", { class: "field" }, row.name), h("td", { class: "type" }, row.type),
      h("td", { class: "mark" }, mark),
      h("td", { class: "value" }, row.present ? textBlock(row.value, "json") : "")));
  }
  table.appendChild(body);
  return table;
}

// ---------------------------------------------------------------- errors

export function errorBlock(error, cls = "error") {
  if (!error || typeof error !== "object") return null;
  return h("div", { class: cls },
    error.code ? [h("span", { class: "error-code" }, asText(error.code)), " "] : null,
    h("span", { class: "error-message" }, asText(error.message ?? "")),
    error.hint ? h("div", { class: "hint" }, "hint: ", h("span", { class: "hint-text" }, asText(error.hint))) : null);
}

// ---------------------------------------------------------------- the timeline

const LIVE_END = "no end yet";

/** The run timeline. `element` holds a summary (the run, its outcome, the payload against
 * the finish schema) and the paged list of items. Options:
 *   runHref(id)              the link of another run (default: the console's #/runs/<id>;
 *                            null: no links, e.g. in a share file)
 *   artifactHref(run, name)  the link of an artifact (default: /runs/<run>/<name>; null: none)
 *   pageSize                 items built per page (PAGE_SIZE)
 *   onChange(timeline)       after each batch of events (the console updates its actions) */
export class Timeline {
  constructor(options = {}) {
    this.runHref = options.runHref === undefined ? runRoute : options.runHref;
    this.artifactHref = options.artifactHref === undefined ? artifactRoute : options.artifactHref;
    this.pageSize = options.pageSize || PAGE_SIZE;
    this.onChange = options.onChange || null;
    this.events = [];
    this.items = [];
    this.calls = new Map();
    this.steps = new Map();
    this.segment = 0;
    this.lastSeq = -1;
    this.started = null;
    this.finished = null;
    this.resumes = [];
    this.plan = null;
    this.liveStatus = null;
    this.shown = 0;
    this.limit = this.pageSize;
    this.summary = h("section", { class: "tl-summary" });
    this.list = h("ol", { class: "tl-list" });
    this.moreButton = h("button", { type: "button", class: "tl-more-button" }, "show more");
    this.moreText = h("span", { class: "tl-more-text" });
    this.more = h("div", { class: "tl-more" }, this.moreText, " ", this.moreButton);
    this.element = h("div", { class: "timeline" }, this.summary, this.list, this.more);
    this.moreButton.addEventListener("click", () => this.showMore());
    this.observer = typeof IntersectionObserver === "function"
      ? new IntersectionObserver((entries) => {
        if (entries.some((e) => e.isIntersecting) && this.shown < this.items.length) this.showMore();
      }, { rootMargin: "400px 0px" })
      : null;
    if (this.observer) this.observer.observe(this.more);
    this.render();
  }

  get runId() {
    return this.started?.run_id ?? this.events[0]?.run_id ?? null;
  }

  get status() {
    return this.finished ? asText(this.finished.status) : this.liveStatus || LIVE_END;
  }

  /** What to call a run without an end (the console knows: running, queued, interrupted…). */
  setLiveStatus(status) {
    if (status === this.liveStatus) return;
    this.liveStatus = status;
    this.renderSummary();
  }

  /** Take events (one or a list) in runlog order; a seq seen before is skipped, except a
   * run_resumed that takes the place of the run_finished it resumed from (ADR 0010). */
  add(events) {
    const list = Array.isArray(events) ? events : [events];
    const dirty = new Set();
    for (const event of list) {
      if (event && typeof event === "object") this.fold(event, dirty);
    }
    this.render(dirty);
  }

  /** Model text as it streams (the service's `delta` messages): shown on its step. */
  delta(step, text) {
    const item = this.stepItem(step, null);
    item.streaming = (item.streaming || "") + String(text ?? "");
    this.render(new Set([item]));
  }

  /** Calls that asked for approval and have no answer (nor result) yet, while the run goes. */
  pendingApprovals() {
    if (this.finished) return [];
    const out = [];
    for (const item of this.calls.values()) {
      if (item.asked && !item.answer && !item.result && item.segment === this.segment) out.push(item.asked);
    }
    return out;
  }

  showMore() {
    this.limit = Math.max(this.limit, this.shown) + this.pageSize;
    this.render();
  }

  destroy() {
    if (this.observer) this.observer.disconnect();
  }

  // ------------------------------------------------------------ folding events into items

  fold(event, dirty) {
    const seq = typeof event.seq === "number" ? event.seq : null;
    if (seq !== null && seq <= this.lastSeq) {
      const replacesEnd = event.kind === "run_resumed" && this.finished && this.finished.seq === seq;
      if (!replacesEnd) return;
      const end = this.items.find((it) => it.event === this.finished);
      if (end) {
        end.type = "gone";
        dirty.add(end);
      }
      this.finished = null;
    }
    if (seq !== null) this.lastSeq = Math.max(this.lastSeq, seq);
    this.events.push(event);
    const kind = String(event.kind);
    let owner = null;  // the item this event belongs to
    const at = (item) => {
      dirty.add(item);
      owner = item;
      return item;
    };
    switch (kind) {
      case "run_started":
        this.started = event;
        at(this.newItem("started", event));
        break;
      case "llm_request":
        if (event.tools_changed && typeof event.tools_changed === "object") at(this.newItem("tools", event));
        at(this.stepItem(event.step, event)).request = event;
        break;
      case "llm_response": {
        const item = at(this.stepItem(event.step, event));
        item.response = event;
        item.streaming = "";
        break;
      }
      case "tool_call":
        at(this.callItem(event)).call = event;
        break;
      case "policy_decision":
        at(this.callItem(event)).policy = event;
        break;
      case "approval_requested":
        at(this.callItem(event)).asked = event;
        break;
      case "approval":
        at(this.callItem(event)).answer = event;
        break;
      case "verification":
        at(this.callItem(event)).checks.push(event);
        break;
      case "tool_result":
        at(this.callItem(event)).result = event;
        break;
      case "plan":
        this.plan = event;
        at(this.callItem(event)).plan = event;
        break;
      case "run_resumed":
        this.segment += 1;
        this.resumes.push(event);
        this.finished = null;
        at(this.newItem("resumed", event));
        break;
      case "run_finished":
        this.finished = event;
        at(this.newItem("finished", event));
        break;
      default:
        at(this.newItem(kind === "llm_retry" || kind === "llm_fallback" || kind === "nudge" || kind === "brief" ? kind : "other", event));
    }
    if (owner && event.child_run_id !== undefined && event.child_run_id !== null) {
      if (!owner.children.includes(event.child_run_id)) owner.children.push(event.child_run_id);
    }
  }

  newItem(type, event) {
    const item = { type, event, node: null, children: [], checks: [], segment: this.segment, index: this.items.length };
    this.items.push(item);
    return item;
  }

  stepItem(step, event) {
    const key = `${this.segment}:${step}`;
    let item = this.steps.get(key);
    if (!item) {
      item = this.newItem("step", event);
      item.step = step;
      this.steps.set(key, item);
    }
    return item;
  }

  callItem(event) {
    const key = `${this.segment}:${event.step}:${event.call_id}`;
    let item = this.calls.get(key);
    if (!item) {
      item = this.newItem("call", event);
      item.step = event.step;
      this.calls.set(key, item);
    }
    return item;
  }

  // ------------------------------------------------------------ rendering

  render(dirty = new Set()) {
    for (const item of dirty) {
      if (item && item.node) {
        const fresh = this.renderItem(item);
        keepOpen(item.node, fresh);
        item.node.replaceWith(fresh);
        item.node = fresh;
      }
    }
    const until = Math.min(this.items.length, this.limit);
    if (this.shown < until) {
      const batch = document.createDocumentFragment();
      for (; this.shown < until; this.shown += 1) {
        const item = this.items[this.shown];
        item.node = this.renderItem(item);
        batch.appendChild(item.node);
      }
      this.list.appendChild(batch);
    }
    const left = this.items.length - this.shown;
    this.more.hidden = left <= 0;
    this.moreText.textContent = left > 0 ? `${fmtInt(left)} more item(s) below` : "";
    if (this.observer && left > 0) {  // observed again: a callback even if it stays in view
      this.observer.unobserve(this.more);
      this.observer.observe(this.more);
    }
    this.renderSummary();
    if (this.onChange) this.onChange(this);
  }

  renderItem(item) {
    const node = renderers[item.type](item, this);
    if (item.children.length) {
      put(node, h("div", { class: "subruns" }, "sub-run: ",
        item.children.map((id) => this.runLink(id, "child-link"))));
    }
    if (item.event && typeof item.event.seq === "number") node.dataset.seq = String(item.event.seq);
    return node;
  }

  runLink(id, cls) {
    const text = asText(id);
    if (!this.runHref) return h("span", { class: cls }, text);
    return link(this.runHref(text), text, cls);
  }

  artifactLink(artifact) {
    if (!artifact) return null;
    const runId = this.runId;
    const href = this.artifactHref && runId !== null ? this.artifactHref(runId, artifact) : null;
    return h("div", { class: "artifact" }, "full output: ", link(href, asText(artifact), "artifact-link"));
  }

  renderSummary() {
    const s = this.started || {};
    const end = this.finished;
    const status = this.status;
    const box = h("div", { class: "summary-body" },
      h("div", { class: "summary-head" },
        h("span", { class: `status status-${status.replace(/[^a-z_]/g, "")}` }, status),
        " ", h("span", { class: "run-id" }, asText(this.runId ?? "")),
        end ? h("span", { class: "outcome" }, ` · ${fmtInt(end.steps)} step(s) · ${fmtUsage(end.usage)} · ${fmtSeconds(end.duration_s)}` +
          (end.cost && typeof end.cost.usd === "number" ? ` · ${fmtCost(end.cost.usd)}` : "")) : null),
      h("dl", { class: "facts" },
        fact("pack", s.pack), fact("model", s.model ?? "(none)"), fact("task", s.task, "task"),
        fact("workspace", s.workspace),
        s.parent_run_id ? h("div", null, h("dt", null, "parent run"), h("dd", null, this.runLink(s.parent_run_id, "parent-link"))) : null,
        s.replay_of ? h("div", null, h("dt", null, "replay of"), h("dd", null, this.runLink(s.replay_of, "replay-of-link"))) : null,
        this.resumes.length ? fact("resumed", `${this.resumes.length} time(s)`) : null),
      this.plan ? h("div", { class: "current-plan" }, planBlock(this.plan)) : null,
      end ? errorBlock(end.error, "error run-error") : null);
    if (end && end.payload !== null && end.payload !== undefined) {
      put(box, h("div", { class: "final" },
        h("h3", null, "final payload"),
        payloadTable(end.payload, s.finish_schema),
        lazyDetails("finish schema", () => h("pre", { class: "json" }, asText(s.finish_schema)), { cls: "schema" })));
    } else if (end) {
      put(box, h("p", { class: "no-payload" }, "no final payload"));
    }
    this.summary.replaceChildren(box);
  }
}

function fact(name, value, cls) {
  if (value === undefined || value === null || value === "") return null;
  return h("div", { class: cls }, h("dt", null, name), h("dd", null, asText(value)));
}

function keepOpen(old, fresh) {
  const open = new Set([...old.querySelectorAll("details[open][data-key]")].map((d) => d.dataset.key));
  if (!open.size) return;
  for (const details of fresh.querySelectorAll("details[data-key]")) {
    if (open.has(details.dataset.key)) details.open = true;
  }
}

function stepLabel(step) {
  return typeof step === "number" ? `step ${step}` : "";
}

function head(...children) {
  return h("div", { class: "item-head" }, children);
}

function badge(text, cls) {
  return h("span", { class: `badge ${cls}` }, text);
}

function argumentsBlock(args) {
  if (args && typeof args === "object" && !Array.isArray(args)) {
    const keys = Object.keys(args);
    if (!keys.length) return h("div", { class: "args empty" }, "no arguments");
    return h("dl", { class: "args" }, keys.map((key) => h("div", { class: "arg" },
      h("dt", null, key), h("dd", null, textBlock(args[key], "arg-value")))));
  }
  return h("div", { class: "args raw" }, h("span", { class: "note" }, "arguments (not a JSON object): "),
    textBlock(asText(args), "arg-value"));
}

const renderers = {
  started(item, tl) {
    const e = item.event;
    const policy = e.sandbox && e.sandbox.policy;
    return h("li", { class: "item started" },
      head(badge("started", "kind"), " ", h("span", { class: "ts" }, asText(e.ts)), " · pack ",
        h("span", { class: "pack" }, asText(e.pack)), " · model ", h("span", { class: "model" }, asText(e.model ?? "(none)")),
        e.backend && e.backend.name ? ` on ${asText(e.backend.name)}` : ""),
      h("div", { class: "task-text" }, asText(e.task)),
      e.parent_run_id ? h("div", { class: "parent" }, "sub-run of ", tl.runLink(e.parent_run_id, "parent-link")) : null,
      lazyDetails("system prompt, limits, policy", () => [
        h("h4", null, "system prompt"), textBlock(e.system_prompt, "prompt"),
        h("h4", null, "limits"), h("pre", { class: "json" }, asText(e.limits)),
        policy ? [h("h4", null, "policy"), policyTable(policy)] : null,
        e.verify ? [h("h4", null, "verify"), h("pre", { class: "json" }, asText(e.verify))] : null,
      ], { key: "setup" }));
  },

  step(item) {
    const r = item.response;
    const message = r && r.message && typeof r.message === "object" ? r.message : {};
    const node = h("li", { class: "item step" },
      head(badge(stepLabel(item.step), "step-no"), " model",
        r ? [" ", h("span", { class: "model" }, asText(r.model ?? "")), " · ",
          h("span", { class: "usage" }, fmtUsage(r.usage)), " · ",
          h("span", { class: "duration" }, fmtMs(r.duration_ms)),
          r.finish_reason ? ` · ${asText(r.finish_reason)}` : ""] : h("span", { class: "waiting" }, " waiting for the model…")));
    if (typeof message.content === "string" && message.content.trim()) {
      put(node, h("div", { class: "model-text" }, message.content));
    }
    if (!r && item.streaming) put(node, h("div", { class: "model-text streaming" }, item.streaming));
    if (r && r.tool_calls_from_text) put(node, h("div", { class: "note" }, "tool calls read from the model's text"));
    if (r && Array.isArray(r.warnings)) {
      for (const w of r.warnings) put(node, h("div", { class: "warning" }, "warning: ", asText(w)));
    }
    const request = item.request;
    if (request && Array.isArray(request.messages) && request.messages.length) {
      put(node, lazyDetails(`sent to the model: ${request.messages.length} message(s)`, () =>
        request.messages.map((m) => h("div", { class: "message" },
          h("div", { class: "role" }, asText(m && m.role), m && m.tool_call_id ? ` (${asText(m.tool_call_id)})` : ""),
          textBlock(m && m.content, "message-text"))), { key: "request" }));
    }
    return node;
  },

  call(item, tl) {
    const call = item.call || item.event;
    const result = item.result;
    const verdict = item.policy ? asText(item.policy.verdict) : null;
    let state = "running";
    if (result) state = result.ok ? "ok" : "failed";
    else if (item.asked && !item.answer) state = "waiting";
    const node = h("li", { class: `item call call-${state}` },
      head(badge(stepLabel(item.step), "step-no"), " ", h("span", { class: "tool" }, asText(call.name ?? call.tool)),
        verdict ? [" ", badge(verdict, `verdict verdict-${verdict.replace(/[^a-z]/g, "")}`)] : null,
        " ", badge(state === "waiting" ? "waiting for approval" : state, `state state-${state}`),
        result ? [" ", h("span", { class: "duration" }, fmtMs(result.duration_ms))] : null),
      item.plan ? planBlock(item.plan) : item.call ? argumentsBlock(item.call.arguments) : null);
    if (item.policy && (item.policy.rule || verdict !== "allow")) {
      put(node, h("div", { class: "policy" }, "policy: ", asText(item.policy.reason ?? ""),
        item.policy.rule ? [" — rule ", h("code", { class: "rule" }, asText(item.policy.rule))] : null));
    }
    if (item.asked) {
      const a = item.answer;
      put(node, h("div", { class: a ? "approval" : "approval pending" },
        a ? `${a.approved ? "approved" : "refused"} by ${asText(a.by)} (${asText(a.scope)})`
          : ["waiting for approval (rule ", h("code", { class: "rule" }, asText(item.asked.rule)), `; times out after ${fmtSeconds(item.asked.timeout_s)})`]));
    }
    for (const check of item.checks) {
      put(node, h("div", { class: `check ${check.ok ? "check-ok" : "check-failed"}` },
        check.skipped ? "check skipped: " : check.ok ? (check.confirms === false ? "checked: " : "verified: ") : "NOT verified: ",
        asText(check.summary ?? check.check),
        !check.ok && check.evidence ? textBlock(check.evidence, "evidence") : null));
    }
    if (result) {
      const err = result.ok ? null : errorBlock(result.error);
      if (err) put(node, err);
      if (item.plan && result.ok) put(node, lazyDetails("what the model was told", () => textBlock(result.output, "output"), { key: "told" }));
      else if (result.ok || !err) put(node, textBlock(result.output, "output", { artifact: tl.artifactLink(result.artifact) }));
      if (result.artifact && asText(result.output).length <= BIG_OUTPUT) put(node, tl.artifactLink(result.artifact));
      put(node, changesBlock(result.changes));
    }
    return node;
  },

  llm_retry(item) {
    const e = item.event;
    return h("li", { class: "item note retry" }, head(badge("retry", "kind"),
      ` ${asText(e.attempt)}/${asText(e.of)} after ${fmtSeconds(e.wait_s)}`), errorBlock(e.error));
  },

  llm_fallback(item) {
    const e = item.event;
    const from = e.from || {};
    const to = e.to || {};
    return h("li", { class: "item note fallback" }, head(badge("fallback", "kind"),
      ` from ${asText(from.model)} on ${asText(from.backend)} to ${asText(to.model)} on ${asText(to.backend)} (${asText(e.reason)})`),
    h("div", { class: "note-text" }, asText(e.message)));
  },

  tools(item) {
    const e = item.event;
    const changed = e.tools_changed;
    const names = (list, pick) => (Array.isArray(list) ? list.map(pick).map(asText).join(", ") : "");
    const parts = [];
    const added = names(changed.added, (a) => (a && typeof a === "object" ? a.name : a));
    if (added) parts.push(`added ${added}`);
    const removed = names(changed.removed, (n) => n);
    if (removed) parts.push(`removed ${removed}`);
    const altered = names(changed.changed, (n) => n);
    if (altered) parts.push(`changed ${altered}`);
    const why = changed.resumed === true ? " (the run was resumed)" : "";
    return h("li", { class: "item note tools" }, head(badge(stepLabel(e.step), "step-no"),
      ` the tools offered changed${why}: ${parts.join("; ") || "the same names"}`));
  },

  nudge(item) {
    const e = item.event;
    return h("li", { class: "item note nudge" }, head(badge(stepLabel(e.step), "step-no"),
      " no tool called: the model was asked to go on"), lazyDetails("what it was told", () => textBlock(e.message, "note-text")));
  },

  brief(item) {
    const e = item.event;
    const lines = asText(e.text).split("\n").length;
    return h("li", { class: "item note brief" }, head(badge("brief", "kind"),
      ` looked at the workspace first (${fmtInt(lines)} lines for the model, ${fmtMs(e.duration_ms)})`),
    lazyDetails("what the model was shown", () => textBlock(e.text, "note-text")));
  },

  resumed(item) {
    const e = item.event;
    let why = `after ${asText(e.reason)}`;
    if (e.ended && typeof e.ended === "object") {
      why = `it had ended: ${asText(e.ended.status)} after ${fmtInt(e.ended.steps)} step(s)`;
    } else if (e.reason === "interrupted") why = "it had been interrupted";
    else if (e.reason === "recovered") why = "a durable run recovered: its process had died";
    return h("li", { class: "item resumed" }, `resumed at step ${asText(e.from_step)} (${why})`);
  },

  finished(item) {
    const e = item.event;
    return h("li", { class: `item finished status-${asText(e.status).replace(/[^a-z_]/g, "")}` },
      head(badge("finished", "kind"), " ", h("span", { class: "status" }, asText(e.status)),
        ` after ${fmtInt(e.steps)} step(s) · ${fmtUsage(e.usage)} · ${fmtSeconds(e.duration_s)}`),
      errorBlock(e.error));
  },

  gone() {
    return h("li", { class: "item gone", hidden: true });
  },

  other(item) {
    const e = item.event;
    return h("li", { class: "item other" }, head(badge(asText(e.kind), "kind"), e.step ? ` ${stepLabel(e.step)}` : ""),
      lazyDetails("event", () => h("pre", { class: "json" }, asText(e))));
  },
};

function policyTable(policy) {
  const rules = Array.isArray(policy.rules) ? policy.rules : [];
  return h("div", { class: "policy-table" },
    h("div", null, `default: ${asText(policy.default)}`,
      policy.approval_timeout !== undefined ? ` · approval timeout ${fmtSeconds(policy.approval_timeout)}` : ""),
    rules.length ? h("table", { class: "rules" },
      h("thead", null, h("tr", null, ["#", "tool", "command", "path", "verdict"].map((t) => h("th", null, t)))),
      h("tbody", null, rules.map((r, i) => h("tr", null, h("td", null, String(i)),
        ["tool", "command", "path", "verdict"].map((k) => h("td", null, r && r[k] !== null && r[k] !== undefined ? asText(r[k]) : "")))))) : null);
}

export { policyTable };

/** Build the timeline of `events` (see Timeline for the options). */
export function renderTimeline(events, options = {}) {
  const timeline = new Timeline(options);
  timeline.add(events);
  return timeline;
}

/** The share file's start: the events embedded in #fabric-run, rendered into #timeline with
 * no links to other runs or artifacts (there is no server); performance marks for the bench. */
export function mountShare(doc = document) {
  performance.mark("fabric-timeline-start");
  const data = JSON.parse(doc.getElementById("fabric-run").textContent);
  doc.getElementById("share-title").textContent = asText(data.title);
  const timeline = renderTimeline(Array.isArray(data.events) ? data.events : [], { runHref: null, artifactHref: null });
  doc.getElementById("timeline").appendChild(timeline.element);
  performance.mark("fabric-timeline-built");
  requestAnimationFrame(() => setTimeout(() => performance.mark("fabric-timeline-painted"), 0));
  return timeline;
}
