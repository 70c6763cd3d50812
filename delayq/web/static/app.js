// delayq's dashboard: a client of the HTTP API (api/...), nothing else.  No framework, no
// build step, no asset from elsewhere.  The token lives in this tab's sessionStorage and
// travels in the Authorization header: no cookie, so no CSRF.  Every value from Redis is
// put into the page as text (textContent), never as HTML.
"use strict";

const TOKEN_KEY = "delayq-token";
const PERIOD_MS = 2000;
const PAGE = 50;
const enc = encodeURIComponent;
let session = { scopes: [], anonymous: false };
let refreshTimer = null;
let viewSerial = 0;

// ---------------------------------------------------------------- API and DOM helpers

async function api(method, path, body) {
  const headers = {};
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = `Bearer ${token}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(`api/${path}`, {
    method, headers, cache: "no-store",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (response.status === 204) return null;
  let data;
  try { data = await response.json(); } catch { data = { message: response.statusText }; }
  if (!response.ok) {
    throw Object.assign(new Error(data.message || response.statusText), { status: response.status });
  }
  return data;
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child !== null && child !== undefined) node.append(child);
  }
  return node;
}

// replaceChildren, skipping the null placeholders of conditional children.
function fill(node, ...children) {
  node.replaceChildren(...children.flat().filter((child) => child !== null && child !== undefined));
}

function svg(tag, attrs = {}) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
  return node;
}

const can = (scope) => session.scopes.includes(scope);
const topicHref = (topic) => `#/topic/${enc(topic)}`;
const taskHref = (topic, id) => `#/task/${enc(topic)}/${enc(id)}`;

function ago(iso) {
  if (!iso) return "";
  const seconds = (new Date(iso).getTime() - Date.now()) / 1000;
  const size = Math.abs(seconds);
  const text = size < 90 ? `${Math.round(size)} s` : size < 5400 ? `${Math.round(size / 60)} min`
    : size < 172800 ? `${Math.round(size / 3600)} h` : `${Math.round(size / 86400)} d`;
  return seconds >= 0 ? `in ${text}` : `${text} ago`;
}

function when(iso) {
  return iso ? `${new Date(iso).toLocaleString()} (${ago(iso)})` : "—";
}

function notify(message, isError = true) {
  const notice = document.getElementById("notice");
  notice.textContent = message || "";
  notice.hidden = !message;
  notice.classList.toggle("error", isError);
}

function explain(error) {
  if (error.status === 401) return "Sign in: this dashboard needs a token with the read scope.";
  if (error.status === 403) return `Not allowed: ${error.message}`;
  if (error.status === 503) return `Redis is unavailable: ${error.message}`;
  return error.message || String(error);
}

// Run an action from a button; refresh the view after it.
async function act(button, work, done) {
  button.disabled = true;
  try {
    await work();
    notify(done, false);
  } catch (error) {
    notify(explain(error));
  } finally {
    button.disabled = false;
    refreshNow();
  }
}

// ---------------------------------------------------------------- overview

function overview(main) {
  let offset = 0;
  const prefix = el("input", { id: "prefix", placeholder: "filter by prefix", "aria-label": "filter" });
  const info = el("span", { id: "page-info", class: "muted" });
  const prev = el("button", { class: "plain", text: "‹ Prev", onclick: () => { offset = Math.max(0, offset - PAGE); refreshNow(); } });
  const next = el("button", { class: "plain", text: "Next ›", onclick: () => { offset += PAGE; refreshNow(); } });
  prefix.addEventListener("input", () => { offset = 0; refreshNow(); });
  const body = el("tbody", { id: "topics" });
  main.append(
    el("h1", { text: "Topics" }),
    el("div", { class: "toolbar" }, prefix, el("span", { class: "grow" }), info, prev, next),
    el("div", { class: "table-wrap" }, el("table", {},
      el("thead", {}, el("tr", {},
        el("th", { text: "Topic" }), el("th", { class: "num", text: "Delayed" }),
        el("th", { class: "num", text: "Ready" }), el("th", { class: "num", text: "Reserved" }),
        el("th", { class: "num", text: "Dead" }),
        el("th", { class: "num hide-narrow", text: "Done /s", title: "attempts finished per second, last minute (topics with history)" }),
        el("th", { class: "hide-narrow", text: "Controls" }))),
      body)),
  );
  return async () => {
    const page = await api("GET", `stats?offset=${offset}&limit=${PAGE}&prefix=${enc(prefix.value)}`);
    body.replaceChildren(...page.topics.map((t) => el("tr", { "data-topic": t.name },
      el("td", {}, el("a", { href: topicHref(t.name), text: t.name })),
      el("td", { class: "num", text: t.delayed }), el("td", { class: "num", text: t.ready }),
      el("td", { class: "num", text: t.reserved }), el("td", { class: "num", text: t.dead }),
      el("td", { class: "num hide-narrow", "data-throughput": t.name, text: rate(t.throughput) }),
      el("td", { class: "hide-narrow" },
        t.paused ? el("span", { class: "badge paused", text: "paused" }) : null,
        t.rate_limit ? el("span", { class: "badge", text: `≤ ${t.rate_limit}` }) : null,
        t.max_running ? el("span", { class: "badge", text: `≤ ${t.max_running} running` }) : null),
    )));
    if (!page.topics.length) {
      body.append(el("tr", {}, el("td", { colspan: 7, class: "muted", text: "No topics yet." })));
    }
    const last = Math.min(offset + page.topics.length, page.total);
    info.textContent = page.total ? `${offset + 1}–${last} of ${page.total}` : "";
    prev.disabled = offset === 0;
    next.disabled = last >= page.total;
  };
}

function rate(perSecond) {
  if (!perSecond) return "0";
  return perSecond >= 100 ? perSecond.toFixed(0) : perSecond >= 1 ? perSecond.toFixed(1) : perSecond.toFixed(2);
}

function seconds(value) {
  return value >= 1 ? `${value} s` : `${Math.round(value * 1000)} ms`;
}

// The last hour as x from 0 to `width`: a window's start maps to its place.
const HOUR_MS = 3600 * 1000;

function drawActivity(latenessChart, throughputChart, activity) {
  const width = 600, height = 120, bottom = 14, top = 6;
  const end = Date.now(), start = end - HOUR_MS;
  const span = activity.window_seconds * 1000;
  const x = (iso) => ((new Date(iso).getTime() - start) / HOUR_MS) * width;
  const step = (span / HOUR_MS) * width;
  const windows = activity.windows.filter((w) => new Date(w.start).getTime() + span > start);
  const axis = (chart) => {
    for (const minutes of [60, 45, 30, 15, 0]) {
      const label = svg("text", { x: Math.min(width - 30, ((HOUR_MS - minutes * 60000) / HOUR_MS) * width + 2), y: height - 2 });
      label.textContent = minutes ? `-${minutes} min` : "now";
      chart.append(label);
    }
  };
  // Throughput: one bar per window.
  throughputChart.replaceChildren();
  throughputChart.setAttribute("viewBox", `0 0 ${width} ${height}`);
  const most = Math.max(0.1, ...windows.map((w) => w.throughput));
  for (const w of windows) {
    const h = (w.throughput / most) * (height - bottom - top);
    const rect = svg("rect", { x: x(w.start), y: height - bottom - h, width: Math.max(1, step - 0.5), height: h, class: "bar done" });
    const title = svg("title", {});
    title.textContent = `${new Date(w.start).toLocaleTimeString()}: ${rate(w.throughput)}/s (${w.acked} acked, ${w.retried} retried, ${w.dead} dead)`;
    rect.append(title);
    throughputChart.append(rect);
  }
  const peak = svg("text", { x: 2, y: top + 8 });
  peak.textContent = windows.length ? `${rate(most)}/s` : "";
  throughputChart.append(peak);
  axis(throughputChart);
  // Lateness p50 and p99 on a log scale from 1 ms, a line through consecutive windows.
  latenessChart.replaceChildren();
  latenessChart.setAttribute("viewBox", `0 0 ${width} ${height}`);
  const values = windows.flatMap((w) => [w.lateness_p50, w.lateness_p99]).filter((v) => v !== null);
  const ceiling = Math.max(0.01, ...values);
  const decades = Math.ceil(Math.log10(ceiling / 0.001));
  const y = (v) => height - bottom - (Math.log10(Math.max(v, 0.001) / 0.001) / decades) * (height - bottom - top);
  for (let d = 0; d <= decades; d += 1) {
    const v = 0.001 * 10 ** d;
    latenessChart.append(svg("line", { x1: 0, x2: width, y1: y(v), y2: y(v), class: "grid" }));
    const label = svg("text", { x: 2, y: y(v) - 2 < top + 4 ? y(v) + 10 : y(v) - 2 });
    label.textContent = seconds(Number(v.toPrecision(1)));
    latenessChart.append(label);
  }
  for (const key of ["lateness_p50", "lateness_p99"]) {
    let path = "", last = null;
    for (const w of windows) {
      if (w[key] === null) { last = null; continue; }
      const at = new Date(w.start).getTime();
      const px = x(w.start) + step / 2, py = y(w[key]);
      path += `${last !== null && at - last <= span ? "L" : "M"}${px.toFixed(1)} ${py.toFixed(1)} `;
      last = at;
      const dot = svg("circle", { cx: px, cy: py, r: 1.6, class: key.slice(9) });
      const title = svg("title", {});
      title.textContent = `${new Date(w.start).toLocaleTimeString()}: ${key.slice(9)} ≤ ${seconds(w[key])} (${w.started} starts)`;
      dot.append(title);
      latenessChart.append(dot);
    }
    if (path) latenessChart.append(svg("path", { d: path, class: `line ${key.slice(9)}` }));
  }
  axis(latenessChart);
}

// ---------------------------------------------------------------- topic page

const SPANS = { hour: { window: 60, windows: 60, unit: "min" }, day: { window: 3600, windows: 24, unit: "h" } };

function drawTimeline(chart, timeline, span) {
  const bars = [{ count: timeline.due, due: true, estimated: timeline.due_estimated, label: "now" }]
    .concat(timeline.windows.map((w, i) => ({ count: w.count, estimated: w.estimated, label: `${i + 1}` })));
  const width = 600, height = 150, gap = 1, bottom = 16;
  const most = Math.max(1, ...bars.map((b) => b.count));
  const step = width / bars.length;
  chart.replaceChildren();
  chart.setAttribute("viewBox", `0 0 ${width} ${height}`);
  bars.forEach((bar, i) => {
    const h = bar.count ? Math.max(1, (bar.count / most) * (height - bottom - 4)) : 0;
    const rect = svg("rect", {
      x: i * step + gap, y: height - bottom - h, width: Math.max(1, step - 2 * gap), height: h,
      class: `bar${bar.due ? " due" : ""}${bar.estimated ? " estimated" : ""}`,
    });
    const title = svg("title", {});
    title.textContent = bar.due ? `${bar.count} due now` : `${bar.count}${bar.estimated ? " (estimated)" : ""} due in ${span.unit} ${bar.label}`;
    rect.append(title);
    chart.append(rect);
    if (i === 0 || i % Math.ceil(bars.length / 6) === 0) {
      const label = svg("text", { x: i * step + 2, y: height - 3 });
      label.textContent = i === 0 ? "now" : `+${bar.label} ${span.unit}`;
      chart.append(label);
    }
  });
}

function topicPage(main, topic) {
  const counts = el("div", { class: "cards", id: "counts" });
  const controls = el("span", { id: "controls", class: "toolbar" });
  const chart = svg("svg", { class: "chart", id: "timeline", role: "img", "aria-label": "tasks due over time" });
  const spanSelect = el("select", { id: "span", "aria-label": "timeline span" },
    el("option", { value: "hour", text: "next hour, per minute" }),
    el("option", { value: "day", text: "next day, per hour" }));
  spanSelect.addEventListener("change", () => refreshNow());
  const timelineNote = el("span", { class: "muted", id: "timeline-note" });
  const lateness = svg("svg", { class: "chart", id: "lateness", role: "img", "aria-label": "lateness p50 and p99, last hour" });
  const throughput = svg("svg", { class: "chart", id: "throughput", role: "img", "aria-label": "throughput, last hour" });
  const activityNote = el("div", { class: "muted", id: "activity-note" });
  const upcoming = el("tbody", { id: "upcoming" });
  const dead = el("tbody", { id: "dead" });
  const deadInfo = el("span", { class: "muted", id: "dead-info" });
  let deadOffset = 0;
  const deadPrev = el("button", { class: "plain", text: "‹", onclick: () => { deadOffset = Math.max(0, deadOffset - 20); refreshNow(); } });
  const deadNext = el("button", { class: "plain", text: "›", onclick: () => { deadOffset += 20; refreshNow(); } });
  main.append(
    el("div", { class: "crumbs" }, el("a", { href: "#/", text: "Topics" }), " / "),
    el("h1", { text: topic }),
    el("div", { class: "toolbar" }, controls),
    counts,
    el("h2", { text: "When tasks fall due" }),
    el("div", { class: "card" }, el("div", { class: "toolbar" }, spanSelect, timelineNote), chart),
    el("div", { class: "grid2" },
      el("section", {}, el("h2", { text: "Next to fall due" }),
        el("div", { class: "table-wrap" }, el("table", {}, el("thead", {}, el("tr", {},
          el("th", { text: "Task" }), el("th", { text: "State" }), el("th", { text: "Due" }),
          el("th", { class: "num", text: "Attempts" }))), upcoming))),
      el("section", {}, el("h2", { text: "Lateness and throughput, last hour" }),
        el("div", { class: "card", id: "aggregates" },
          el("div", { class: "muted legend" }, el("span", { class: "key p50" }), "lateness p50 ",
            el("span", { class: "key p99" }), "p99 (log scale)"),
          lateness,
          el("div", { class: "muted legend" }, el("span", { class: "key done" }), "attempts finished /s"),
          throughput, activityNote))),
    el("h2", {}, "Dead letters ", deadInfo, " ", deadPrev, deadNext),
    el("div", { class: "table-wrap" }, el("table", {}, el("thead", {}, el("tr", {},
      el("th", { text: "Task" }), el("th", { class: "num", text: "Attempts" }),
      el("th", { class: "hide-narrow", text: "Died" }), el("th", { text: "Last error" }),
      el("th", { text: "" }))), dead)),
  );
  return async () => {
    const t = enc(topic);
    const span = SPANS[spanSelect.value];
    const [stats, timeline, page, letters, activity] = await Promise.all([
      api("GET", `stats?prefix=${t}&limit=1`),
      api("GET", `topics/${t}/timeline?window=${span.window}&windows=${span.windows}`),
      api("GET", `topics/${t}/upcoming?limit=20`),
      api("GET", `topics/${t}/dead?offset=${deadOffset}&limit=20`),
      api("GET", `topics/${t}/activity`),
    ]);
    drawActivity(lateness, throughput, activity);
    const finished = activity.windows.reduce((sum, w) => sum + w.acked + w.retried + w.dead, 0);
    activityNote.textContent = activity.windows.length
      ? `${finished} attempts finished in the last hour, in ${activity.windows.length} windows of ${activity.window_seconds} s`
      : "No activity in the last hour (counted by workers of topics registered with history=N).";
    const row = stats.topics.find((r) => r.name === topic) || { delayed: 0, ready: 0, reserved: 0, dead: 0 };
    counts.replaceChildren(...["delayed", "ready", "reserved", "dead"].map((k) => el("div", { class: "card" },
      el("div", { class: `count ${k}`, "data-count": k, text: row[k] }), el("div", { class: "muted", text: k }))));
    fill(controls,
      row.paused ? el("span", { class: "badge paused", text: "paused" }) : null,
      can("admin") ? el("button", {
        class: "plain", id: "pause", text: row.paused ? "Resume" : "Pause",
        onclick: (e) => act(e.target, () => api("POST", `topics/${t}/${row.paused ? "resume" : "pause"}`),
          row.paused ? "Resumed." : "Paused: no worker leases its tasks."),
      }) : null);
    drawTimeline(chart, timeline, span);
    const estimated = timeline.due_estimated || timeline.windows.some((w) => w.estimated);
    timelineNote.textContent = `${timeline.due} due now, ${timeline.windows.reduce((s, w) => s + w.count, 0)} in the ${spanSelect.value === "hour" ? "next hour" : "next day"}${estimated ? " (lighter bars estimated)" : ""}`;
    upcoming.replaceChildren(...page.tasks.map((task) => el("tr", { "data-task": task.id },
      el("td", {}, el("a", { href: taskHref(topic, task.id), text: task.id })),
      el("td", { class: `state ${task.state}`, text: task.state }),
      el("td", { text: ago(task.due_at), title: task.due_at }),
      el("td", { class: "num", text: task.attempts ?? "?" }))));
    if (!page.tasks.length) upcoming.append(el("tr", {}, el("td", { colspan: 4, class: "muted", text: "Nothing scheduled." })));
    dead.replaceChildren(...letters.tasks.map((task) => el("tr", { "data-dead": task.id },
      el("td", {}, el("a", { href: taskHref(topic, task.id), text: task.id })),
      el("td", { class: "num", text: task.attempts }),
      el("td", { class: "hide-narrow", text: ago(task.dead_at), title: task.dead_at }),
      el("td", { class: "error", text: task.last_error || "" }),
      el("td", {},
        can("admin") ? el("button", { class: "plain", text: "Replay", "data-replay": task.id,
          onclick: (e) => act(e.target, () => api("POST", `topics/${t}/dead/${enc(task.id)}/replay`), `Replayed ${task.id}.`) }) : null,
        " ",
        can("produce") ? el("button", { class: "danger", text: "Cancel", "data-cancel": task.id,
          onclick: (e) => act(e.target, () => api("DELETE", `topics/${t}/tasks/${enc(task.id)}`), `Cancelled ${task.id}.`) }) : null))));
    if (!letters.tasks.length) dead.append(el("tr", {}, el("td", { colspan: 5, class: "muted", text: "No dead letters." })));
    deadInfo.textContent = letters.total ? `(${deadOffset + 1}–${deadOffset + letters.tasks.length} of ${letters.total})` : "";
    deadPrev.disabled = deadOffset === 0;
    deadNext.disabled = deadOffset + letters.tasks.length >= letters.total;
  };
}

// ---------------------------------------------------------------- task page

function taskPage(main, topic, id) {
  const details = el("div", { class: "card", id: "task" });
  const actions = el("div", { class: "toolbar", id: "actions" });
  main.append(
    el("div", { class: "crumbs" }, el("a", { href: "#/", text: "Topics" }), " / ",
      el("a", { href: topicHref(topic), text: topic }), " / "),
    el("h1", { text: id }), actions, details);
  return async () => {
    let task;
    try {
      task = await api("GET", `topics/${enc(topic)}/tasks/${enc(id)}`);
      if (task.state === "finished") {
        actions.replaceChildren();
        details.replaceChildren(finishedView(task.history));
        return;
      }
    } catch (error) {
      if (error.status !== 404) throw error;
      actions.replaceChildren();
      details.replaceChildren(el("dl", {},
        el("dt", { text: "state" }), el("dd", { class: "state done", id: "state", text: "done" }),
        el("dt", { text: "" }), el("dd", { class: "muted", text: "No such task now: it finished (acked), was cancelled, or never existed; its topic keeps no history of it." })));
      return;
    }
    const field = (name, value) => [el("dt", { text: name }), el("dd", { text: value ?? "—" })];
    details.replaceChildren(el("dl", {},
      el("dt", { text: "state" }), el("dd", { class: `state ${task.state}`, id: "state", text: task.state }),
      field("due", when(task.due_at)), field("enqueued", when(task.enqueued_at)),
      field("attempts", `${task.attempts}${task.max_attempts ? ` of ${task.max_attempts}` : ""}`),
      task.lease_deadline ? field("lease ends", when(task.lease_deadline)) : null,
      task.dead_at ? field("dead since", when(task.dead_at)) : null,
      field("last error", task.last_error),
      el("dt", { text: "headers" }), el("dd", {}, headerList(task.headers)),
      el("dt", { text: "body" }), el("dd", {}, el("pre", { id: "body", text: JSON.stringify(task.body, null, 2) }))));
    fill(actions,
      task.state === "dead" && can("admin") ? el("button", { id: "replay", text: "Replay",
        onclick: (e) => act(e.target, () => api("POST", `topics/${enc(topic)}/dead/${enc(id)}/replay`), "Replayed.") }) : null,
      task.state !== "reserved" && can("produce") ? el("button", { id: "cancel", class: "danger", text: "Cancel",
        onclick: (e) => act(e.target, () => api("DELETE", `topics/${enc(topic)}/tasks/${enc(id)}`), "Cancelled.") }) : null);
  };
}

function headerList(headers) {
  const names = Object.keys(headers || {});
  if (!names.length) return el("span", { class: "muted", id: "headers", text: "none" });
  return el("table", { class: "headers", id: "headers" }, ...names.map((name) => el("tr", {},
    el("th", { text: name }), el("td", { text: headers[name] }))));
}

// A finished task, as its topic's history recorded it.
function finishedView(record) {
  const field = (name, value, attrs = {}) => [el("dt", { text: name }), el("dd", { ...attrs, text: value ?? "—" })];
  return el("dl", {},
    el("dt", { text: "state" }), el("dd", { class: "state done", id: "state", text: "done" }),
    field("outcome", record.outcome, { id: "outcome", class: `outcome ${record.outcome}` }),
    field("finished", when(record.finished_at)), field("due", when(record.due_at)),
    field("started", record.started_at ? when(record.started_at) : "no handler ran"),
    field("lateness", record.lateness === null ? null : seconds(Number(record.lateness.toFixed(3)))),
    field("enqueued", when(record.enqueued_at)), field("attempts", record.attempts),
    field("error", record.error), field("history record", `#${record.seq}`),
    el("dt", { text: "headers" }), el("dd", {}, headerList(record.headers)),
    el("dt", { text: "body" }), el("dd", {}, el("pre", { id: "body", text: JSON.stringify(record.body, null, 2) })));
}

// ---------------------------------------------------------------- routing, refresh, login

let refresh = async () => {};

async function refreshNow() {
  clearTimeout(refreshTimer);
  const serial = viewSerial;
  try {
    await refresh();
    if (serial === viewSerial) {
      document.getElementById("updated").textContent = `Updated ${new Date().toLocaleTimeString()}.`;
      if (document.getElementById("notice").classList.contains("error")) notify("");
    }
  } catch (error) {
    notify(explain(error));
  }
  if (serial === viewSerial) refreshTimer = setTimeout(tick, PERIOD_MS);
}

function tick() {
  if (document.hidden) refreshTimer = setTimeout(tick, PERIOD_MS);
  else refreshNow();
}

function route() {
  viewSerial += 1;
  const parts = location.hash.replace(/^#\/?/, "").split("/").map((part) => decodeURIComponent(part));
  const main = document.getElementById("view");
  main.replaceChildren();
  if (parts[0] === "topic" && parts[1]) refresh = topicPage(main, parts[1]);
  else if (parts[0] === "task" && parts[1] && parts[2] !== undefined) refresh = taskPage(main, parts[1], parts.slice(2).join("/"));
  else refresh = overview(main);
  refreshNow();
}

async function whoami() {
  try {
    session = await api("GET", "whoami");
  } catch (error) {
    session = { scopes: [], anonymous: false };
    if (error.status !== 401) notify(explain(error));
  }
  const signedIn = Boolean(sessionStorage.getItem(TOKEN_KEY));
  document.getElementById("who").textContent = session.anonymous ? "read-only, no token needed"
    : session.scopes.length ? `signed in: ${session.scopes.join(", ")}` : "";
  document.getElementById("token").hidden = signedIn || session.anonymous;
  document.getElementById("sign-in").hidden = signedIn || session.anonymous;
  document.getElementById("sign-out").hidden = !signedIn;
}

document.getElementById("login").addEventListener("submit", async (event) => {
  event.preventDefault();
  const input = document.getElementById("token");
  sessionStorage.setItem(TOKEN_KEY, input.value.trim());
  input.value = "";
  await whoami();
  if (!session.scopes.length) {
    sessionStorage.removeItem(TOKEN_KEY);
    await whoami();
    notify("Unknown token.");
    return;
  }
  notify("");
  route();
});

document.getElementById("sign-out").addEventListener("click", async () => {
  sessionStorage.removeItem(TOKEN_KEY);
  await whoami();
  route();
});

document.getElementById("lookup").addEventListener("submit", (event) => {
  event.preventDefault();
  const topic = document.getElementById("lookup-topic").value.trim();
  const id = document.getElementById("lookup-id").value.trim();
  location.hash = taskHref(topic, id);
});

window.addEventListener("hashchange", route);
document.addEventListener("visibilitychange", () => { if (!document.hidden) refreshNow(); });
document.getElementById("period").textContent = PERIOD_MS / 1000;
whoami().then(route);
