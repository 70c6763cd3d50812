#!lua
-- heartbeat.lua: record that a worker is alive (or, on a clean stop, that it left), on
-- Redis's clock.  O(its topics) commands per call, one call per heartbeat interval.
-- KEYS[1] workers (ZSET id -> expiry ms)   KEYS[2] info (HASH id -> "started,seen,JSON")
-- KEYS[3] schedules (HASH topic LF fingerprint -> "seen interval description", ms)
-- KEYS[4] clock (STRING, see _envelope.lua)   KEYS[5..] the worker's topics' consumer ZSETs
-- ARGV[1] 'beat' or 'leave'   ARGV[2] worker id   ARGV[3] interval ms   ARGV[4] info JSON
-- ARGV[5] when it started, ms (what its first beat returned; 0 on the first beat)
-- ARGV[6..] pairs: a schedule field (topic LF fingerprint), its description
-- Returns: {now ms, started ms}
-- An entry expires 3 intervals after its last beat; every beat drops up to 100 expired
-- entries of others (a killed worker's), and every key's TTL is kept beyond the latest
-- expiry, so a registry nobody beats any more deletes itself.
--@include _envelope
local workers, info, schedules, clock = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local mode, id, interval = ARGV[1], ARGV[2], tonumber(ARGV[3])
local bad = READ_CLOCK and load_clock(clock)
if bad then
  return bad
end
local now = now_ms()

if mode == 'leave' then
  redis.call('ZREM', workers, id)
  redis.call('HDEL', info, id)
  for i = 5, #KEYS do
    redis.call('ZREM', KEYS[i], id)
  end
  return { now, 0 }
end

local expiry = now + 3 * interval
local ttl = 3 * interval + 1000
-- 1. Drop entries that expired (a worker killed or frozen), a bounded number per beat.
local expired = redis.call('ZRANGE', workers, '-inf', '(' .. now, 'BYSCORE', 'LIMIT', 0, 100)
for _, gone in ipairs(expired) do
  redis.call('ZREM', workers, gone)
  redis.call('HDEL', info, gone)
end
-- 2. This worker's entry; started is kept from its first beat, even across a trim.
local old = redis.call('HGET', info, id)
local started = old and string.match(old, '^(%d+),')
if not started then
  started = tonumber(ARGV[5]) > 0 and ARGV[5] or string.format('%d', now)
end
redis.call('ZADD', workers, expiry, id)
redis.call('HSET', info, id, started .. ',' .. string.format('%d', now) .. ',' .. ARGV[4])
-- 3. Its topics, and the periodic schedules it runs.
for i = 5, #KEYS do
  redis.call('ZADD', KEYS[i], expiry, id)
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', '(' .. now)
end
for i = 6, #ARGV, 2 do
  redis.call('HSET', schedules, ARGV[i],
    string.format('%d %d ', now, interval) .. ARGV[i + 1])
end
-- 4. Keep every key alive past the latest expiry (never shorten another worker's TTL).
for _, key in ipairs(KEYS) do
  if key ~= clock and redis.call('PTTL', key) < ttl then
    redis.call('PEXPIRE', key, ttl)
  end
end
return { now, tonumber(started) }
