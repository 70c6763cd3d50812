#!lua flags=no-writes
-- workers.lua: the live workers' entries, on Redis's clock.
-- KEYS[1] workers (ZSET id -> expiry ms)   KEYS[2] info (HASH id -> "started,seen,JSON")
-- KEYS[3] clock (STRING, see _envelope.lua)
-- Returns: {now_ms, entry, ...}, each entry "started,seen,JSON" of a worker whose entry
--   has not expired (one dropped in between is skipped)
--@include _envelope
local workers, info = KEYS[1], KEYS[2]
local bad = READ_CLOCK and load_clock(KEYS[3])
if bad then
  return bad
end
local now = now_ms()
local reply = { now }
local ids = redis.call('ZRANGE', workers, now, '+inf', 'BYSCORE')
for start = 1, #ids, 1000 do
  local chunk = redis.call('HMGET', info, unpack(ids, start, math.min(start + 999, #ids)))
  for _, entry in ipairs(chunk) do
    if entry then
      reply[#reply + 1] = entry
    end
  end
end
return reply
