// A topic's page: counts and controls, when its tasks fall due, the last hour's activity,
// the next tasks, dead letters and history.
import { SPANS, drawActivity, drawTimeline } from "./charts.js";
import { groupsSection } from "./groups.js";
import { act, ago, api, can, el, enc, fill, noConsumer, refreshNow, seconds, svg, taskHref, when } from "./core.js";

const HISTORY_PAGE = 20;
const RUNNING_PAGE = 20;

// The Running section: leased tasks, soonest lease deadline first; a lease past its
// deadline (on Redis's clock) is flagged until the topic's next lease reclaims the task.
function runningSection(topic) {
  const body = el("tbody", { id: "running" });
  const info = el("span", { class: "muted", id: "running-info" });
  const section = el("section", { id: "running-section" },
    el("h2", {}, "Running ", info),
    el("div", { class: "table-wrap" }, el("table", {}, el("thead", {}, el("tr", {},
      el("th", { text: "Task" }), el("th", { class: "num", text: "Attempt" }),
      el("th", { text: "Lease ends" }), el("th", { class: "hide-narrow", text: "Due" }))), body)));
  const refresh = async () => {
    const page = await api("GET", `topics/${enc(topic)}/running?limit=${RUNNING_PAGE}`);
    fill(body, page.tasks.map((t) => el("tr", { "data-running": t.id },
      el("td", {}, el("a", { href: taskHref(topic, t.id), text: t.id })),
      el("td", { class: "num", text: t.attempts }),
      el("td", { title: when(t.lease_deadline) },
        t.lease_expired ? el("span", { class: "badge expired", text: "lease expired" }) : null,
        t.lease_expired ? " " : null, ago(t.lease_deadline)),
      el("td", { class: "hide-narrow", text: ago(t.due_at), title: t.due_at }))));
    if (!page.tasks.length) body.append(el("tr", {}, el("td", { colspan: 4, class: "muted", text: "Nothing running." })));
    info.textContent = page.total > page.tasks.length ? `(${page.tasks.length} of ${page.total}, soonest deadline first)` : "";
  };
  return { section, refresh };
}

// The History section: the topic's last finished tasks, newest first, by outcome, paged
// back through record numbers (`before`).
function historySection(topic) {
  const body = el("tbody", { id: "history" });
  const info = el("span", { class: "muted", id: "history-info" });
  const outcome = el("select", { id: "history-outcome", "aria-label": "outcome" },
    el("option", { value: "", text: "every outcome" }),
    ...["acked", "dead", "cancelled"].map((o) => el("option", { value: o, text: o })));
  let pages = [null];  // the `before` of each page seen so far; the last is shown
  let next = null;
  const prev = el("button", { class: "plain", id: "history-prev", text: "‹ Newer",
    onclick: () => { pages.pop(); refreshNow(); } });
  const older = el("button", { class: "plain", id: "history-next", text: "Older ›",
    onclick: () => { pages.push(next); refreshNow(); } });
  outcome.addEventListener("change", () => { pages = [null]; refreshNow(); });
  const section = el("section", { id: "history-section" },
    el("h2", { text: "History" }),
    el("div", { class: "toolbar" }, outcome, el("span", { class: "grow" }), info, prev, older),
    el("div", { class: "table-wrap" }, el("table", {}, el("thead", {}, el("tr", {},
      el("th", { text: "Task" }), el("th", { text: "Outcome" }), el("th", { class: "num", text: "Attempts" }),
      el("th", { class: "num", text: "Lateness" }), el("th", { text: "Finished" }))), body)));
  const refresh = async () => {
    const before = pages[pages.length - 1];
    const query = [`limit=${HISTORY_PAGE}`, before ? `before=${before}` : null,
      outcome.value ? `outcome=${outcome.value}` : null].filter(Boolean).join("&");
    const page = await api("GET", `topics/${enc(topic)}/history?${query}`);
    fill(body, page.records.map((r) => el("tr", { "data-history": r.id },
      el("td", {}, el("a", { href: taskHref(topic, r.id), text: r.id })),
      el("td", { class: `outcome ${r.outcome}`, text: r.outcome }),
      el("td", { class: "num", text: r.attempts }),
      el("td", { class: "num", text: r.lateness === null ? "—" : seconds(Number(r.lateness.toFixed(3))) }),
      el("td", { text: ago(r.finished_at), title: when(r.finished_at) }))));
    if (!page.records.length) {
      body.append(el("tr", {}, el("td", { colspan: 5, class: "muted",
        text: pages.length > 1 ? "No older records." : "No finished tasks recorded (a topic keeps them when registered with history=N)." })));
    }
    next = page.next_before;
    info.textContent = pages.length > 1 ? `page ${pages.length}` : "";
    prev.disabled = pages.length === 1;
    older.disabled = next === null;
  };
  return { section, refresh };
}

export function topicPage(main, topic) {
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
  const deadActions = el("span", { class: "toolbar inline", id: "dead-actions" });
  const history = historySection(topic);
  const running = runningSection(topic);
  const groups = groupsSection(topic);
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
    groups.section,
    running.section,
    el("h2", {}, "Dead letters ", deadInfo, " ", deadPrev, deadNext, " ", deadActions),
    el("div", { class: "table-wrap" }, el("table", {}, el("thead", {}, el("tr", {},
      el("th", { text: "Task" }), el("th", { class: "num", text: "Attempts" }),
      el("th", { class: "hide-narrow", text: "Died" }), el("th", { text: "Last error" }),
      el("th", { text: "" }))), dead)),
    history.section,
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
      history.refresh(),
      running.refresh(),
      groups.refresh(),
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
      noConsumer(row),
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
          onclick: (e) => act(e.target, () => api("DELETE", `topics/${t}/tasks/${enc(task.id)}`), `Cancelled ${task.id}.`,
            `Cancel dead letter ${task.id}? It is deleted for good.`) }) : null))));
    if (!letters.tasks.length) dead.append(el("tr", {}, el("td", { colspan: 5, class: "muted", text: "No dead letters." })));
    deadInfo.textContent = letters.total ? `(${deadOffset + 1}–${deadOffset + letters.tasks.length} of ${letters.total})` : "";
    deadPrev.disabled = deadOffset === 0;
    deadNext.disabled = deadOffset + letters.tasks.length >= letters.total;
    fill(deadActions, can("admin") && letters.total ? [
      el("button", { class: "plain", id: "replay-all", text: "Replay all",
        onclick: (e) => act(e.target, () => api("POST", `topics/${t}/dead/replay`),
          (r) => `Replayed ${r.count} dead letters.`,
          `Replay all ${letters.total} dead letters of ${topic}? Each is due now, its attempts reset.`) }),
      el("button", { class: "danger", id: "delete-all", text: "Delete all",
        onclick: (e) => act(e.target, () => api("DELETE", `topics/${t}/dead`),
          (r) => `Deleted ${r.count} dead letters.`,
          `Delete all ${letters.total} dead letters of ${topic}? They are gone for good.`) }),
    ] : null);
  };
}
