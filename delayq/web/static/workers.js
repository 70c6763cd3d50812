// The Workers page: the queue's live workers and the processes serving HTTP consumers, as
// their latest heartbeats told them (GET api/workers), refreshed like every page.
import { ago, api, el, fill, topicHref, when } from "./core.js";

export function workersPage(main) {
  const body = el("tbody", { id: "workers" });
  const info = el("span", { class: "muted", id: "workers-info" });
  main.append(
    el("div", { class: "crumbs" }, el("a", { href: "#/", text: "Topics" }), " / "),
    el("h1", { text: "Workers" }),
    el("div", { class: "toolbar" }, info),
    el("div", { class: "table-wrap" }, el("table", {}, el("thead", {}, el("tr", {},
      el("th", { text: "Host" }), el("th", { class: "num", text: "PID" }), el("th", { text: "Kind" }),
      el("th", { text: "Topics" }), el("th", { class: "num", text: "Concurrency" }),
      el("th", { class: "num", text: "Running" }), el("th", { text: "Last seen" }))), body)));
  return async () => {
    const page = await api("GET", "workers");
    fill(body, page.workers.map((w) => el("tr", { "data-worker": w.id, "data-kind": w.kind },
      el("td", { text: w.host }),
      el("td", { class: "num", text: w.pid }),
      el("td", {}, el("span", { class: "badge", text: w.kind })),
      el("td", {}, w.topics.map((t, i) => [i ? ", " : null, el("a", { href: topicHref(t), text: t })])),
      el("td", { class: "num", text: w.concurrency }),
      el("td", { class: "num", "data-running": w.id, text: w.running }),
      el("td", { text: ago(w.last_seen),
        title: `last seen ${when(w.last_seen)}; started ${when(w.started_at)}; delayq ${w.version}` }))));
    if (!page.workers.length) {
      body.append(el("tr", {}, el("td", { colspan: 7, class: "muted", text: "No live process." })));
    }
    const workers = page.workers.filter((w) => w.kind === "worker").length;
    const servers = page.workers.length - workers;
    info.textContent = (workers ? `${workers} worker${workers === 1 ? "" : "s"}`
      : "No live worker: nothing runs this queue's tasks but HTTP consumers")
      + `, ${servers} HTTP server${servers === 1 ? "" : "s"} (delayq web).`;
  };
}
