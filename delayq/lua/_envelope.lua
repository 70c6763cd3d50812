-- _envelope.lua: helpers inlined by the loader into every script that reads a task.
-- A stored task (field of the `tasks` hash) is one string:
--   "<attempts>,<token>,<max_attempts>,<ttr_ms>,<enqueued_ms>,<due_ms>,<body JSON>"
-- max_attempts and ttr_ms are 0 when the task uses its topic's defaults; the caller then
-- passes the consuming worker's defaults in ARGV.  Keeping the header numeric and in
-- front means a script rewrites attempts/token/due without ever decoding the body.

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Returns a table of the header fields, or nil for an unreadable string.
local function parse_envelope(raw)
  local attempts, token, max_attempts, ttr, enqueued, due, body_at =
    string.match(raw, '^(%d+),(%d+),(%d+),(%d+),(%d+),(%d+),()')
  if not attempts then
    return nil
  end
  return {
    attempts = tonumber(attempts), token = token, max_attempts = tonumber(max_attempts),
    ttr = tonumber(ttr), enqueued = enqueued, due = due, body_at = body_at,
  }
end

local function format_envelope(e, raw)
  return table.concat({ e.attempts, e.token, e.max_attempts, e.ttr, e.enqueued,
    string.format('%d', e.due), string.sub(raw, e.body_at) }, ',')
end

-- Publish a wake-up only when `due` becomes the earliest moment a worker must act on, so a
-- busy topic costs no PUBLISH per task.  `head` is the schedule's first entry before the write.
local function wake_if_earliest(channel, head, due)
  if head[2] == nil or due < tonumber(head[2]) then
    redis.call('PUBLISH', channel, due)
  end
end
