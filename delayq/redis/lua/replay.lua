#!lua flags=allow-oom
-- replay.lua: move a dead-lettered task back to the schedule, due now, attempts reset.
-- KEYS[1] prefix of the task buckets and schedule slots (see _layout.lua)
-- KEYS[2] wheel (ZSET)  KEYS[3] dead (ZSET)  KEYS[4] errors (HASH)
-- ARGV[1] id   ARGV[2] wake channel
-- Returns: 1 replayed | 0 not dead
--@include _envelope
--@include _layout
--@include _priority
--@include _groups
local prefix, wheel, dead, errors = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local pk = prio_keys(prefix)  -- where tasks with a priority wait (_priority.lua)
local id, channel = ARGV[1], ARGV[2]
local bad = check_types({ [wheel] = 'zset', [dead] = 'zset', [errors] = 'hash',
  [slot_counter(prefix)] = 'string', [meta_key(prefix)] = 'hash', [pk.index] = 'zset', [pk.ready] = 'zset', [pk.mark] = 'string' })
  or load_buckets(prefix)
if bad then
  return bad
end
local raw, body = read_task(prefix, id)
if not redis.call('ZSCORE', dead, id) then
  return 0
end
local e = raw and parse_header(raw)
if not e or not body then
  -- Nothing runnable to replay: a corrupt letter is dropped rather than re-buried forever.
  redis.call('ZREM', dead, id)
  delete_task(prefix, id)
  redis.call('HDEL', errors, id)
  return 0
end
local now = now_ms()
if e.group then
  local gk = grp().keys(prefix)
  bad = check_types(grp().kinds(gk, { [grp().queue(gk, e.group)] = 'zset' }))
  if bad then
    return bad
  end
  wake_if_earliest(grp().add(gk, e.group, { now, grp().member(id, e.priority) }), channel, now)
elseif e.priority == 0 then
  wake_if_earliest(schedule_add(prefix, wheel, { now, id }), channel, now)
  schedule_changed(prefix, wheel, 1)
else
  wake_if_earliest(prio().add(pk, id, now, e.priority), channel, now)
end
redis.call('ZREM', dead, id)
e.attempts = 0
e.due = now
redis.call('HSET', bucket_of(prefix, id), id, format_header(e))
redis.call('HDEL', errors, id)
return 1
