// The overview: every topic of the queue, paged, with its counts and controls.
import { api, el, enc, noConsumer, rate, refreshNow, topicHref } from "./core.js";

const PAGE = 50;

export function overview(main) {
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
        noConsumer(t),
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
