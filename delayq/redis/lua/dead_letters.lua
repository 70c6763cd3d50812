#!lua flags=no-writes
-- dead_letters.lua: page through a topic's dead letters, oldest first.
-- KEYS[1] prefix of the task buckets (see _layout.lua)   KEYS[2] dead (ZSET id -> died ms)
-- KEYS[3] errors (HASH)
-- ARGV[1] offset   ARGV[2] limit
-- Returns: {now_ms, id1, envelope1, error1, died_ms1, ...} (envelope/error false when missing)
--@include _envelope
--@include _layout
local prefix, dead, errors = KEYS[1], KEYS[2], KEYS[3]
local offset, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
local bad = load_buckets(prefix)
if bad then
  return bad
end
local out = { now_ms() }
local page = redis.call('ZRANGE', dead, offset, offset + limit - 1, 'WITHSCORES')
for i = 1, #page, 2 do
  local id = page[i]
  local header, body = read_task(prefix, id)
  out[#out + 1] = id
  out[#out + 1] = header and joined(header, body)
  out[#out + 1] = redis.call('HGET', errors, id)
  out[#out + 1] = page[i + 1]
end
return out
