#!lua flags=no-writes
-- result.lua: what a caller waiting for a task's result finds (_results.lua).
-- KEYS[1] prefix of the task buckets (see _layout.lua)   KEYS[2] dead (ZSET)
-- ARGV[1] id   ARGV[2] -1 when the caller does not know whether the topic keeps results
-- (the setting its workers recorded in <prefix>meta then decides)
-- Returns: {0} unknown, or no result kept | {1} still to finish (delayed, ready or
-- reserved) | {2, result} finished, its stored result.  A task still stored wins over a
-- result of the same id (an id sent again after its result was stored), unless it is dead:
-- a dead letter counts as finished until it is replayed.
--@include _envelope
--@include _layout
local prefix, dead, id = KEYS[1], KEYS[2], ARGV[1]
local bad = load_buckets(prefix)
if bad then
  return bad
end
if ARGV[2] == '-1' and not redis.call('HGET', meta_key(prefix), 'results') then
  return { 0 }
end
if read_header(prefix, id) and not redis.call('ZSCORE', dead, id) then
  return { 1 }
end
local result = redis.call('GET', result_key(prefix, id))
if result then
  return { 2, result }
end
return { 0 }
