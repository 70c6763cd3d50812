#!lua flags=allow-oom
-- cancel.lua: delete a task that is delayed, ready or dead.  A reserved task is running
-- somewhere and cannot be recalled, so it is left alone.
-- KEYS[1] prefix of the task buckets and schedule slots (see _layout.lua)
-- KEYS[2] wheel (ZSET)   KEYS[3] dead (ZSET)   KEYS[4] errors (HASH)
-- ARGV[1] id   ARGV[2] records of history the caller's registration of the topic keeps
-- (absent or 0: the setting its workers record in <prefix>meta)
-- Returns: 1 removed | 0 unknown or reserved
-- A topic that keeps history records the cancelled task (_history.lua).
--@include _envelope
--@include _layout
--@include _priority
--@include _groups
--@include _history
local prefix, wheel, dead, errors = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local pk = prio_keys(prefix)  -- where tasks with a priority wait (_priority.lua)
local id = ARGV[1]
local bad = check_types({ [wheel] = 'zset', [dead] = 'zset', [errors] = 'hash', [pk.index] = 'zset', [pk.ready] = 'zset', [pk.mark] = 'string',
  [meta_key(prefix)] = 'hash' }) or load_buckets(prefix)
if bad then
  return bad
end
local cap = tonumber(ARGV[2]) or 0
if cap <= 0 then
  cap = tonumber(redis.call('HGET', meta_key(prefix), 'history')) or 0
end
bad = check_types(history_kinds(prefix, cap, {}))
if bad then
  return bad
end
local raw, body = read_task(prefix, id)
local e = raw and parse_header(raw)
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
elseif gk then
  if redis.call('ZREM', dead, id) == 0 then
    return 0
  end
elseif e and e.priority ~= 0 and prio().remove(pk, id, e.due, e.priority) then
  -- (a priority task waits outside the schedule, and its count)
elseif e and e.priority == 0 and schedule_remove(prefix, wheel, id, e.due) then
  schedule_changed(prefix, wheel, -1)
elseif redis.call('ZREM', dead, id) == 0 then
  return 0
end
delete_task(prefix, id)
redis.call('HDEL', errors, id)
history_add(prefix, cap, { id, history_record('cancelled', raw, ',', '', body) })
return 1
