#!lua flags=allow-oom
-- nack.lua: end a lease without success: retry later, dead-letter, or release untouched.
-- KEYS[1] prefix of the task buckets and schedule slots (see _layout.lua)
-- KEYS[2] wheel (ZSET)  KEYS[3] reserved (ZSET)  KEYS[4] dead (ZSET)  KEYS[5] errors (HASH)
-- KEYS[6] controls (HASH, see _controls.lua: a worker waiting under max_running is woken)
-- ARGV[1] id   ARGV[2] lease token
-- ARGV[3] mode: 'retry' (failed attempt; dead once attempts reach the limit), 'dead' (no more
--         attempts, e.g. a body that no longer validates) or 'release' (the attempt never ran:
--         due now and not counted, as on a graceful shutdown)
-- ARGV[4] retry delay ms   ARGV[5] error text ('' for none)   ARGV[6] topic default max attempts
-- ARGV[7] wake channel   ARGV[8] history: records the topic keeps (0: none; -1: the setting
-- its workers recorded in <prefix>meta; _history.lua)
-- ARGV[9] "<handler started ms>,<handler ended ms>" (',' when it did not run), for history
-- ARGV[10] results: ms the topic keeps a dead-lettered task's result (0 or absent: none;
-- -1: the setting its workers recorded in <prefix>meta; _results.lua)
-- Returns: {0} lease lost | {1, due_ms} rescheduled | {2, now_ms} dead-lettered
-- allow-oom: finishing, retrying or moving tasks frees or keeps memory, and a full Redis
-- must still be drainable; only sends are refused when Redis is at maxmemory.
--@include _envelope
--@include _layout
--@include _controls
--@include _priority
--@include _groups
--@include _history
--@include _results
local prefix, wheel, reserved, dead, errors = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local controls = KEYS[6]
local pk = prio_keys(prefix)  -- where tasks with a priority wait (_priority.lua)
local id, token, mode = ARGV[1], ARGV[2], ARGV[3]
local delay, err, default_max, channel = tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6]), ARGV[7]
local cap, times, ttl = tonumber(ARGV[8]) or 0, ARGV[9] or ',', tonumber(ARGV[10]) or 0
if cap < 0 then
  cap = tonumber(redis.call('HGET', meta_key(prefix), 'history')) or 0
end

local bad = check_types(history_kinds(prefix, cap, { [wheel] = 'zset', [reserved] = 'zset',
  [dead] = 'zset', [errors] = 'hash', [slot_counter(prefix)] = 'string',
  [meta_key(prefix)] = 'hash', [controls] = 'hash', [pk.index] = 'zset', [pk.ready] = 'zset',
  [pk.mark] = 'string' })) or load_buckets(prefix)
if bad then
  return bad
end
local raw = read_header(prefix, id)
local e = raw and parse_header(raw)
if not e or e.token ~= token or not redis.call('ZSCORE', reserved, id) then
  return { 0 }
end
local gk = nil  -- a grouped task's keys (_groups.lua): its lease frees a place in its group
if e.group then
  gk = grp().keys(prefix)
  bad = check_types(grp().kinds(gk, { [grp().queue(gk, e.group)] = 'zset' }))
  if bad then
    return bad
  end
end
-- Wake the workers when the group waited for this place.
local function group_freed()
  if gk and grp().release(gk, e.group) then
    publish(channel, 0)
  end
end
local now = now_ms()
local limit = e.max_attempts > 0 and e.max_attempts or default_max
if mode == 'dead' or (mode == 'retry' and e.attempts >= limit) then
  redis.call('ZREM', reserved, id)
  if err ~= '' then
    redis.call('HSET', errors, id, err)
  end
  redis.call('ZADD', dead, now, id)
  if cap > 0 then
    local _, body = read_task(prefix, id)
    history_add(prefix, cap, { id, history_record('dead', raw, times, err, body) })
  end
  if ttl ~= 0 then
    store_result(prefix, results_ttl(prefix, ttl), results_channel(prefix, channel), id, 'dead',
      e.attempts, err, '')
  end
  place_freed(controls, channel)
  group_freed()
  return { 2, now }
end

local due = now + delay
if mode == 'release' then
  e.attempts = math.max(e.attempts - 1, 0)
  due = now
end
if gk then
  group_freed()
  wake_if_earliest(grp().add(gk, e.group, { due, grp().member(id, e.priority) }), channel, due)
elseif e.priority == 0 then
  wake_if_earliest(schedule_add(prefix, wheel, { due, id }), channel, due)
  schedule_changed(prefix, wheel, 1)
else
  wake_if_earliest(prio().add(pk, id, due, e.priority), channel, due)
end
redis.call('ZREM', reserved, id)
place_freed(controls, channel)
if err ~= '' then
  redis.call('HSET', errors, id, err)
end
e.due = due
redis.call('HSET', bucket_of(prefix, id), id, format_header(e))
return { 1, due }
