// A delayq consumer in Node.js (18 or later: fetch is built in), over the HTTP API.
//
//   DELAYQ_URL=http://127.0.0.1:8080 DELAYQ_TOKEN=... node examples/http_consumer.mjs emails
//
// It long-polls for up to 10 tasks at a time, runs each, and acks it; a task that throws
// is nacked (retried after the topic's backoff, dead after its last attempt).  A 409 means
// the lease was lost (it expired and the task went to another consumer): nothing to undo.
// DELAYQ_MAX_TASKS=n stops after n tasks (the test suite runs it that way).

const base = process.env.DELAYQ_URL ?? "http://127.0.0.1:8080";
const headers = {
  Authorization: `Bearer ${process.env.DELAYQ_TOKEN}`,
  "Content-Type": "application/json",
};
const topic = process.argv[2] ?? "emails";
const maxTasks = Number(process.env.DELAYQ_MAX_TASKS ?? Infinity);

async function call(method, path, body) {
  const response = await fetch(base + path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (response.status === 204) return null;
  const data = await response.json();
  if (!response.ok) {
    throw Object.assign(new Error(`${response.status} ${data.message}`), { status: response.status });
  }
  return data;
}

// The work: here, print the task; a body with "fail" set throws.
async function handle(task) {
  if (task.body?.fail) throw new Error(`cannot handle ${task.id}`);
  console.log(JSON.stringify({ done: task.id, attempt: task.attempt, body: task.body }));
}

let handled = 0;
while (handled < maxTasks) {
  const { tasks } = await call("POST", `/api/topics/${encodeURIComponent(topic)}/reserve`, {
    max: 10,
    wait: 20,
  });
  for (const task of tasks) {
    const lease = `/api/leases/${task.lease_token}`;
    try {
      await handle(task);
      await call("POST", `${lease}/ack`);
    } catch (error) {
      if (error.status === 409) continue; // the lease was lost: another consumer has it
      await call("POST", `${lease}/nack`, { error: String(error) }).catch((e) => {
        if (e.status !== 409) throw e;
      });
      console.log(JSON.stringify({ failed: task.id, attempt: task.attempt }));
    }
    handled += 1;
  }
}
