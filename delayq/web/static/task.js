// A task's page: its state, times, headers and body; replay, reschedule, run now, cancel, abort.
// A task that finished is shown from its topic's history, an unknown one as not found.
import { act, api, can, el, enc, fill, seconds, topicHref, when } from "./core.js";

export function taskPage(main, topic, id) {
  const details = el("div", { class: "card", id: "task" });
  const actions = el("div", { class: "toolbar", id: "actions" });
  const path = `topics/${enc(topic)}/tasks/${enc(id)}`;
  // Built once, so that a refresh does not wipe what the operator is typing.
  const delay = el("input", { id: "reschedule-delay", type: "number", min: "0", step: "any",
    placeholder: "seconds from now", "aria-label": "delay in seconds" });
  const at = el("input", { id: "reschedule-at", type: "datetime-local", step: "1", "aria-label": "due at" });
  const move = el("form", { class: "toolbar", id: "reschedule-form", hidden: true },
    el("span", { class: "muted", text: "Reschedule:" }), delay, el("span", { class: "muted", text: "or at" }), at,
    el("button", { type: "submit", class: "plain", id: "reschedule", text: "Reschedule" }));
  move.addEventListener("submit", (event) => {
    event.preventDefault();
    let request, what;
    if (at.value) {
      const due = new Date(at.value);
      request = { at: due.toISOString() };
      what = `Rescheduled to ${due.toLocaleString()}.`;
    } else if (delay.value !== "") {
      request = { delay: Number(delay.value) };
      what = `Rescheduled to ${seconds(Number(delay.value))} from now.`;
    } else {
      return;
    }
    act(event.submitter || move.querySelector("button"), async () => {
      await api("POST", `${path}/reschedule`, request);
      delay.value = "";
      at.value = "";
    }, what);
  });
  main.append(
    el("div", { class: "crumbs" }, el("a", { href: "#/", text: "Topics" }), " / ",
      el("a", { href: topicHref(topic), text: topic }), " / "),
    el("h1", { text: id }), actions, move, details);
  return async () => {
    let task;
    try {
      task = await api("GET", path);
    } catch (error) {
      if (error.status !== 404) throw error;
      actions.replaceChildren();
      move.hidden = true;
      details.replaceChildren(notFound(topic, id));
      return;
    }
    if (task.state === "finished") {
      actions.replaceChildren();
      move.hidden = true;
      details.replaceChildren(finishedView(task.history));
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
    const waiting = task.state === "delayed" || task.state === "ready";
    move.hidden = !(waiting && can("produce"));
    fill(actions,
      task.state === "dead" && can("admin") ? el("button", { id: "replay", text: "Replay",
        onclick: (e) => act(e.target, () => api("POST", `topics/${enc(topic)}/dead/${enc(id)}/replay`), "Replayed.") }) : null,
      task.state === "delayed" && can("produce") ? el("button", { id: "run-now", text: "Run now",
        onclick: (e) => act(e.target, () => api("POST", `${path}/reschedule`, { delay: 0 }), "Due now: the next free worker runs it.") }) : null,
      task.state !== "reserved" && can("produce") ? el("button", { id: "cancel", class: "danger", text: "Cancel",
        onclick: (e) => act(e.target, () => api("DELETE", path), "Cancelled.",
          `Cancel task ${id} of ${topic}? It is deleted for good.`) }) : null,
      task.state === "reserved" && can("produce") ? el("button", { id: "abort", class: "danger", text: "Abort",
        onclick: (e) => act(e.target, () => api("DELETE", `${path}?running=true`), "Aborted: its worker cancels the handler.",
          `Abort task ${id} of ${topic}? Its running handler is cancelled and the task is deleted for good; it never runs again.`) }) : null);
  };
}

function notFound(topic, id) {
  return el("dl", {},
    el("dt", { text: "state" }), el("dd", { class: "state missing", id: "state", text: "not found" }),
    el("dt", { text: "" }), el("dd", { class: "muted", id: "not-found",
      text: `No task ${id} in ${topic}: the id is unknown, or the task finished (acked or cancelled) `
        + "and its topic keeps no record of it (a topic keeps records when registered with history=N)." }));
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
