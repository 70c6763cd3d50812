#!lua flags=allow-oom
-- dead_bulk.lua: replay or delete up to ARGV[2] of a topic's dead letters, oldest first; the
-- caller repeats it until it answers 0, so that no one call holds Redis for long.
-- KEYS[1] prefix of the task buckets and schedule slots (see _layout.lua)
-- KEYS[2] wheel (ZSET)  KEYS[3] dead (ZSET)  KEYS[4] errors (HASH)
-- ARGV[1] "replay" | "delete"   ARGV[2] most letters this call   ARGV[3] wake channel
-- ARGV[4] records of history the caller's registration keeps (0: read <prefix>meta's)
-- Returns: letters replayed or deleted by this call (0: none left)
-- A replayed letter is due now with its attempts reset (as replay.lua); a deleted one is
-- recorded as cancelled when the topic keeps history (as cancel.lua).  A letter whose task
-- is missing or unreadable is dropped either way.
--@include _envelope
--@include _layout
--@include _priority
--@include _groups
--@include _history
local prefix, wheel, dead, errors = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local pk = prio_keys(prefix)  -- where tasks with a priority wait (_priority.lua)
local mode, most, channel = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local bad = check_types({ [wheel] = 'zset', [dead] = 'zset', [errors] = 'hash',
  [slot_counter(prefix)] = 'string', [meta_key(prefix)] = 'hash', [pk.index] = 'zset', [pk.ready] = 'zset', [pk.mark] = 'string' })
  or load_buckets(prefix)
if bad then
  return bad
end
local cap = tonumber(ARGV[4]) or 0
if cap <= 0 then
  cap = tonumber(redis.call('HGET', meta_key(prefix), 'history')) or 0
end
bad = check_types(history_kinds(prefix, cap, {}))
if bad then
  return bad
end
local ids = redis.call('ZRANGE', dead, 0, most - 1)
if #ids == 0 then
  return 0
end
local now = now_ms()
local plain, prioritized, headers, records, grouped = {}, {}, {}, {}, {}
for _, id in ipairs(ids) do
  local raw, body = read_task(prefix, id)
  local e = raw and parse_header(raw)
  if mode == 'replay' and e and body then
    e.attempts = 0
    e.due = now
    headers[#headers + 1] = { id, format_header(e) }
    if e.group then
      grouped[#grouped + 1] = { id, e.priority, e.group }
    elseif e.priority == 0 then
      plain[#plain + 1] = now
      plain[#plain + 1] = id
    else
      prioritized[#prioritized + 1] = { id, e.priority }
    end
  else
    if mode == 'delete' and raw then
      records[#records + 1] = id
      records[#records + 1] = history_record('cancelled', raw, ',', '', body)
    end
    delete_task(prefix, id)
  end
end
-- The schedule first: its first write fails the call on a key of the wrong type before
-- anything else changed (_layout.lua's schedule_add).
if #plain > 0 then
  wake_if_earliest(schedule_add(prefix, wheel, plain), channel, now)
  schedule_changed(prefix, wheel, #plain / 2)
end
if #grouped > 0 then
  local gk = grp().keys(prefix)
  local kinds = grp().kinds(gk, {})
  for _, g in ipairs(grouped) do
    kinds[grp().queue(gk, g[3])] = 'zset'
  end
  bad = check_types(kinds)
  if bad then
    return bad
  end
  for _, g in ipairs(grouped) do
    wake_if_earliest(grp().add(gk, g[3], { now, grp().member(g[1], g[2]) }), channel, now)
  end
end
for _, p in ipairs(prioritized) do
  wake_if_earliest(prio().add(pk, p[1], now, p[2]), channel, now)
end
for _, h in ipairs(headers) do
  redis.call('HSET', bucket_of(prefix, h[1]), h[1], h[2])
end
redis.call('ZREM', dead, unpack(ids))
redis.call('HDEL', errors, unpack(ids))
history_add(prefix, cap, records)
return #ids
