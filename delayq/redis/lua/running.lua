#!lua flags=no-writes
-- running.lua: page through a topic's reserved (leased) tasks, soonest lease deadline first.
-- KEYS[1] prefix of the task buckets (see _layout.lua)
-- KEYS[2] reserved (ZSET id -> lease deadline ms, plus the pin member at +inf)
-- KEYS[3] errors (HASH)
-- ARGV[1] offset   ARGV[2] limit
-- Returns: {now_ms, total, id1, envelope1, error1, deadline_ms1, ...} (envelope/error false
--   when missing); a deadline before now_ms is a lease that expired and is not yet reclaimed
--@include _envelope
--@include _layout
local prefix, reserved, errors = KEYS[1], KEYS[2], KEYS[3]
local offset, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
local bad = load_buckets(prefix)
if bad then
  return bad
end
local out = { now_ms(), lease_count(reserved) }
local page = redis.call('ZRANGE', reserved, '-inf', '(inf', 'BYSCORE', 'LIMIT', offset, limit, 'WITHSCORES')
for i = 1, #page, 2 do
  local id = page[i]
  local header, body = read_task(prefix, id)
  out[#out + 1] = id
  out[#out + 1] = header and joined(header, body)
  out[#out + 1] = redis.call('HGET', errors, id)
  out[#out + 1] = page[i + 1]
end
return out
