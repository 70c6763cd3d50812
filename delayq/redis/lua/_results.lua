-- _results.lua: the outcome of a finished task, kept when its topic keeps results
-- (@queue.topic(..., results=<duration>)), and the notice that wakes whoever waits for it.
-- Stored in <prefix>result:<id> (STRING, result_key in _layout.lua), expiring after the
-- topic's duration:
--   "<outcome>,<attempts>,<finished ms>,<n>,<error><value>"
-- outcome 'acked', 'dead' or 'cancelled'; n the error's length in bytes; value the return
-- value's JSON ('' for none).  A task id holds no control character, so the notice on the
-- topic's results channel (<prefix>results) is the finished ids joined by '\n'.
-- A topic without results passes 0 and pays one comparison.

-- The topic's result lifetime in ms: `given` (0: keeps none), or for -1 (a caller that did
-- not register the topic) what its workers recorded in <prefix>meta's field `results`.
local function results_ttl(prefix, given)
  if given < 0 then
    return tonumber(redis.call('HGET', meta_key(prefix), 'results')) or 0
  end
  return given
end

-- The channel a script notifies on: sharded (SPUBLISH, '!' first, as publish() reads it)
-- when `wake`, the topic's wake channel as the caller passed it, is.
local function results_channel(prefix, wake)
  return (string.byte(wake, 1) == 33 and '!' or '') .. prefix .. 'results'
end

-- Write the result of `id` (no notice: see results_notify).  `attempts` a number or its
-- text, `err` and `value` strings ('' for none).  The time is read once a call (a batch
-- of acks finishes at one moment; TIME per task cost ~1 us each).
local results_finished
local function write_result(prefix, ttl, id, outcome, attempts, err, value)
  results_finished = results_finished or int_text(now_ms())
  local text = outcome .. ',' .. attempts .. ',' .. results_finished .. ',' .. #err .. ','
    .. err .. value
  redis.call('SET', result_key(prefix, id), text, 'PX', ttl)
end

-- Wake the waiters of `ids` (a list), in one message.
local function results_notify(channel, ids)
  if #ids > 0 then
    publish(channel, table.concat(ids, '\n'))
  end
end

-- Keep the result of finished task `id` for `ttl` ms and wake its waiters; nothing when
-- ttl <= 0.  The one call every script that finishes a task of a results topic makes.
local function store_result(prefix, ttl, channel, id, outcome, attempts, err, value)
  if ttl > 0 then
    write_result(prefix, ttl, id, outcome, attempts, err, value)
    publish(channel, id)
  end
end
