#!lua flags=allow-oom
-- forget.lua: delete every key of a topic (one shard of it) that holds no task.
-- KEYS[1] prefix (see _layout.lua)   KEYS[2] wheel (ZSET)   KEYS[3] reserved (ZSET)
-- KEYS[4] dead (ZSET)   KEYS[5] controls (HASH)   KEYS[6] meta (HASH)   KEYS[7] seq (STRING)
-- KEYS[8...] the rest of the topic's keys, deleted with the ones above
-- ARGV[1] "now" | "idle"   ARGV[2] (idle) ms the topic must have been seen idle
-- Returns: 1 forgotten | 0 kept: it holds tasks, or (idle) it has controls or was not yet
--   seen idle for ARGV[2] ms
-- "idle" is a sweep's call: it keeps in meta's field `idle` when it first saw the topic
-- empty and its activity then (the lease counter and the history's record number); a send,
-- lease or finished task since starts the wait again.
--@include _envelope
--@include _layout
local prefix, wheel, reserved, dead, controls, meta, seq = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local mode, idle_ms = ARGV[1], tonumber(ARGV[2]) or 0
local bad = check_types({ [wheel] = 'zset', [reserved] = 'zset', [dead] = 'zset',
  [controls] = 'hash', [meta] = 'hash', [prio_keys(prefix).index] = 'zset' }) or load_buckets(prefix)
if bad then
  return bad
end
local scheduled = tonumber(redis.call('HGET', meta, 'scheduled')) or redis.call('ZCARD', wheel)
local holds = scheduled > 0 or lease_count(reserved) > 0 or redis.call('ZCARD', dead) > 0
  or redis.call('EXISTS', prio_keys(prefix).index) == 1
  or redis.call('EXISTS', prefix .. 'grp:all', prefix .. 'grp:run', prefix .. 'grp:ring',
    prefix .. 'grp:wait', prefix .. 'grp:full') > 0
if holds or (mode == 'idle' and redis.call('EXISTS', controls) == 1) then
  redis.call('HDEL', meta, 'idle')
  return 0
end
if mode == 'idle' then
  local now = now_ms()
  local mark = (redis.call('GET', seq) or '0') .. ',' .. (redis.call('HGET', meta, 'history_seq') or '0')
  local seen = redis.call('HGET', meta, 'idle')
  local since, was = nil, nil
  if seen then
    since, was = string.match(seen, '^(%d+),(.*)$')
  end
  if not since or was ~= mark then
    redis.call('HSET', meta, 'idle', int_text(now) .. ',' .. mark)
    return 0
  end
  if now - tonumber(since) < idle_ms then
    return 0
  end
end
redis.call('DEL', unpack(KEYS, 2))
-- A grouped topic's keys (_groups.lua; its queues, once empty, are gone, and its rate
-- windows expire).
redis.call('DEL', prefix .. 'grp:turn')
return 1
