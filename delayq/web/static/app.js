// delayq's dashboard: a client of the HTTP API (api/...), nothing else.  No framework, no
// build step, no asset from elsewhere: ES modules, one per page (overview.js, topic.js,
// task.js, workers.js) around core.js.  The token lives in this tab's sessionStorage and travels in the
// Authorization header: no cookie, so no CSRF.  This module routes and signs in.
import { PERIOD_MS, TOKEN_KEY, api, explain, notify, refreshNow, session, show, taskHref } from "./core.js";
import { overview } from "./overview.js";
import { taskPage } from "./task.js";
import { topicPage } from "./topic.js";
import { workersPage } from "./workers.js";

let currentTopic = null;  // the topic of the page shown, if any (the lookup's default)

function route() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").map((part) => decodeURIComponent(part));
  const main = document.getElementById("view");
  main.replaceChildren();
  if (parts[0] === "topic" && parts[1]) {
    currentTopic = parts[1];
    show(topicPage(main, parts[1]));
  } else if (parts[0] === "workers") {
    currentTopic = null;
    show(workersPage(main));
  } else if (parts[0] === "task" && parts[1] && parts[2] !== undefined) {
    currentTopic = parts[1];
    show(taskPage(main, parts[1], parts.slice(2).join("/")));
  } else {
    currentTopic = null;
    show(overview(main));
  }
  document.getElementById("lookup-topic").placeholder = currentTopic ? `topic (${currentTopic})` : "topic";
}

async function whoami() {
  try {
    Object.assign(session, await api("GET", "whoami"));
  } catch (error) {
    Object.assign(session, { scopes: [], anonymous: false });
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

// Find: a task id with its topic; on a topic's (or task's) page the topic may be left out.
document.getElementById("lookup").addEventListener("submit", (event) => {
  event.preventDefault();
  const topic = document.getElementById("lookup-topic").value.trim() || currentTopic;
  const id = document.getElementById("lookup-id").value.trim();
  if (!id) {
    notify("Find: give a task id.");
    return;
  }
  if (!topic) {
    notify("Find: give the task's topic too (a task id is unique within its topic), or open the topic first.");
    return;
  }
  notify("");
  location.hash = taskHref(topic, id);
});

window.addEventListener("hashchange", route);
document.addEventListener("visibilitychange", () => { if (!document.hidden) refreshNow(); });
document.getElementById("period").textContent = PERIOD_MS / 1000;
whoami().then(route);
