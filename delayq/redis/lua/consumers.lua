#!lua flags=no-writes
-- consumers.lua: how many live workers consume each topic, and when a live worker last
-- ran a periodic schedule, on Redis's clock.  O(log n) per topic.
-- KEYS[1] schedules (HASH, see heartbeat.lua)   KEYS[2] clock (STRING, see _envelope.lua)
-- KEYS[3..] consumer ZSETs (id -> expiry ms)
-- ARGV[1..] schedule fields (topic LF fingerprint)
-- Returns: {now_ms, {count per consumer ZSET},
--   {seen ms or -1, that worker's interval ms or -1, description or false, ...}}
--@include _envelope
local schedules = KEYS[1]
local bad = READ_CLOCK and load_clock(KEYS[2])
if bad then
  return bad
end
local now = now_ms()
local counts, seen = {}, {}
for i = 3, #KEYS do
  counts[#counts + 1] = redis.call('ZCOUNT', KEYS[i], now, '+inf')
end
for i = 1, #ARGV do
  local raw = redis.call('HGET', schedules, ARGV[i])
  local ms, interval, description = nil, nil, false
  if raw then
    ms, interval, description = string.match(raw, '^(%d+) (%d+) (.*)$')
  end
  seen[#seen + 1] = tonumber(ms) or -1
  seen[#seen + 1] = tonumber(interval) or -1
  seen[#seen + 1] = description or false
end
return { now, counts, seen }
