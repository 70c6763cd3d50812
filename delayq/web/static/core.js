// The dashboard's shared parts: the API client, DOM helpers, formatting, notices, and the
// refresh loop every page plugs into.  Every value from Redis is put into the page as text
// (textContent), never as HTML.
export const TOKEN_KEY = "delayq-token";
export const PERIOD_MS = 2000;
export const enc = encodeURIComponent;
export const session = { scopes: [], anonymous: false };

export async function api(method, path, body) {
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

export function el(tag, attrs = {}, ...children) {
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
export function fill(node, ...children) {
  node.replaceChildren(...children.flat().filter((child) => child !== null && child !== undefined));
}

export function svg(tag, attrs = {}) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
  return node;
}

export const can = (scope) => session.scopes.includes(scope);
export const topicHref = (topic) => `#/topic/${enc(topic)}`;
export const taskHref = (topic, id) => `#/task/${enc(topic)}/${enc(id)}`;

export function ago(iso) {
  if (!iso) return "";
  const seconds = (new Date(iso).getTime() - Date.now()) / 1000;
  const size = Math.abs(seconds);
  const text = size < 90 ? `${Math.round(size)} s` : size < 5400 ? `${Math.round(size / 60)} min`
    : size < 172800 ? `${Math.round(size / 3600)} h` : `${Math.round(size / 86400)} d`;
  return seconds >= 0 ? `in ${text}` : `${text} ago`;
}

export function when(iso) {
  return iso ? `${new Date(iso).toLocaleString()} (${ago(iso)})` : "—";
}

export function rate(perSecond) {
  if (!perSecond) return "0";
  return perSecond >= 100 ? perSecond.toFixed(0) : perSecond >= 1 ? perSecond.toFixed(1) : perSecond.toFixed(2);
}

export function seconds(value) {
  return value >= 1 ? `${value} s` : `${Math.round(value * 1000)} ms`;
}

// A topic with ready tasks and no live worker consuming it: nothing will run them.
export function noConsumer(row) {
  if (!(row.ready > 0 && row.consumers === 0)) return null;
  return el("span", { class: "badge warn", "data-no-consumer": row.name,
    title: "ready tasks, and no live worker consumes this topic", text: "no consumer" });
}

export function notify(message, isError = true) {
  const notice = document.getElementById("notice");
  notice.textContent = message || "";
  notice.hidden = !message;
  notice.classList.toggle("error", isError);
}

export function explain(error) {
  if (error.status === 401) return "Sign in: this dashboard needs a token with the read scope.";
  if (error.status === 403) return `Not allowed: ${error.message}`;
  if (error.status === 503) return `Redis is unavailable: ${error.message}`;
  return error.message || String(error);
}

// Run an action from a button, after the operator confirms `question` (when given); then
// refresh the view.  `done` is the notice, or a function of the action's answer giving it.
export async function act(button, work, done, question) {
  if (question && !window.confirm(question)) return;
  button.disabled = true;
  try {
    const answer = await work();
    notify(typeof done === "function" ? done(answer) : done, false);
  } catch (error) {
    notify(explain(error));
  } finally {
    button.disabled = false;
    refreshNow();
  }
}

// ---------------------------------------------------------------- the refresh loop

let refresh = async () => {};
let refreshTimer = null;
let viewSerial = 0;

// Make `view` (a page's refresh function) the one the loop runs, and run it now.
export function show(view) {
  viewSerial += 1;
  refresh = view;
  refreshNow();
}

export async function refreshNow() {
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
