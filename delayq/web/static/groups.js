// The Groups section of a grouped topic's page: the groups with the most ready tasks
// (GET topics/{topic}/groups), each with its delayed and running tasks and whether its cap
// or rate limit holds it back now.  Hidden while the topic has no groups.
import { api, el, enc, fill } from "./core.js";

const GROUPS_SHOWN = 20;

export function groupsSection(topic) {
  const body = el("tbody", { id: "groups" });
  const info = el("span", { class: "muted", id: "groups-info" });
  const section = el("section", { id: "groups-section", hidden: true },
    el("h2", {}, "Groups ", info),
    el("div", { class: "table-wrap" }, el("table", {}, el("thead", {}, el("tr", {},
      el("th", { text: "Group" }), el("th", { class: "num", text: "Ready" }),
      el("th", { class: "num", text: "Delayed" }), el("th", { class: "num", text: "Running" }),
      el("th", { text: "Limited" }))), body)));
  const refresh = async () => {
    const page = await api("GET", `topics/${enc(topic)}/groups?limit=${GROUPS_SHOWN}`);
    section.hidden = page.groups.length === 0;
    fill(body, page.groups.map((g) => el("tr", { "data-group": g.group },
      el("td", { text: g.group }),
      el("td", { class: "num", "data-count": "ready", text: g.ready }),
      el("td", { class: "num", "data-count": "delayed", text: g.delayed }),
      el("td", { class: "num", "data-count": "running", text: g.running }),
      el("td", { "data-limited": g.limited ? "yes" : "no" },
        g.limited ? el("span", { class: "badge limited", text: "limited",
          title: "at its max_running_per_group cap or its rate_limit_per_group now" }) : "no"))));
    info.textContent = page.groups.length === GROUPS_SHOWN ? `(the ${GROUPS_SHOWN} with the most ready tasks)` : "";
  };
  return { section, refresh };
}
