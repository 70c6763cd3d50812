#!lua flags=allow-oom
-- cancel.lua: delete a task that is delayed, ready or dead, and, when asked to (abort), one
-- that is reserved (running): its lease ends here, so the attempt's ack, nack or extend is
-- refused like any lost lease's, and the worker holding it is told on the wake channel.
-- KEYS[1] prefix of the task buckets and schedule slots (see _layout.lua)
-- KEYS[2] wheel (ZSET)   KEYS[3] dead (ZSET)   KEYS[4] errors (HASH)
-- abort only: KEYS[5] reserved (ZSET)   KEYS[6] controls (HASH, see _controls.lua)
-- ARGV[1] id   ARGV[2] records of history the caller's registration of the topic keeps
-- (absent or 0: the setting its workers record in <prefix>meta)
-- ARGV[3] ms the topic keeps each task's result (absent or 0: the setting its workers
-- record in <prefix>meta; _results.lua)   ARGV[4] the topic's wake channel (absent: not
-- sharded), which tells how to notify a result's waiters; on an abort "abort:<token>:<id>"
-- is published on it, which tells the worker holding the lease to cancel its handler
-- (delayq/redis/wakeup.py)
-- Returns: 1 removed | 0 unknown, or reserved without KEYS[5] | 2 reserved, lease ended
-- Every removal ends at the one exit below: a topic that keeps history records the
-- cancelled task (_history.lua); one that keeps results stores the outcome 'cancelled'
-- (_results.lua).
--@include _envelope
--@include _layout
--@include _priority
--@include _groups
--@include _history
--@include _results
local prefix, wheel, dead, errors, reserved = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local pk = prio_keys(prefix)  -- where tasks with a priority wait (_priority.lua)
local id = ARGV[1]
local kinds = { [wheel] = 'zset', [dead] = 'zset', [errors] = 'hash', [pk.index] = 'zset', [pk.ready] = 'zset', [pk.mark] = 'string',
  [meta_key(prefix)] = 'hash' }
if reserved then
  kinds[reserved], kinds[KEYS[6]] = 'zset', 'hash'
end
local bad = check_types(kinds) or load_buckets(prefix)
if bad then
  return bad
end
local cap, ttl = tonumber(ARGV[2]) or 0, tonumber(ARGV[3]) or 0
if cap <= 0 or ttl <= 0 then
  local recorded = redis.call('HMGET', meta_key(prefix), 'history', 'results')
  cap = cap > 0 and cap or tonumber(recorded[1]) or 0
  ttl = ttl > 0 and ttl or tonumber(recorded[2]) or 0
end
bad = check_types(history_kinds(prefix, cap, {}))
if bad then
  return bad
end
local raw, body = read_task(prefix, id)
local e = raw and parse_header(raw)
local removed, err = 1, ''
-- The header says when the task is due, and so which slot may hold it (or its group).
local gk = e and e.group and grp().keys(prefix)
if gk then
  bad = check_types(grp().kinds(gk, { [grp().queue(gk, e.group)] = 'zset' }))
  if bad then
    return bad
  end
end
if gk and grp().remove(gk, e.group, id, e.priority) then
  -- (a grouped task waits in its group's queue, outside the schedule)
elseif not gk and e and e.priority ~= 0 and prio().remove(pk, id, e.due, e.priority) then
  -- (a priority task waits outside the schedule, and its count)
elseif not gk and e and e.priority == 0 and schedule_remove(prefix, wheel, id, e.due) then
  schedule_changed(prefix, wheel, -1)
elseif redis.call('ZREM', dead, id) == 1 then
  -- (a dead letter)
elseif raw and reserved and redis.call('ZREM', reserved, id) == 1 then
  -- Running: the lease is gone with the task, as if acked; its holder is told to stop.
  local channel = ARGV[4]
  publish(channel, 'abort:' .. (e and e.token or '') .. ':' .. id)
  -- A worker waits for a place under max_running (_controls.lua), or for one in the group.
  local freed = gk and grp().release(gk, e.group)
  if redis.call('HDEL', KEYS[6], 'full') == 1 or freed then
    publish(channel, 0)
  end
  removed, err = 2, 'Aborted: cancelled while running (attempt ' .. (e and e.attempts or '?') .. ')'
else
  return 0
end
delete_task(prefix, id)
redis.call('HDEL', errors, id)
history_add(prefix, cap, { id, history_record('cancelled', raw, ',', err, body) })
store_result(prefix, ttl, results_channel(prefix, ARGV[4] or ''), id, 'cancelled',
  e and e.attempts or (raw and string.match(raw, '^%d+')) or 0, err, '')
return removed
