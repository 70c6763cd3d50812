#!lua flags=allow-oom
-- extend.lua: push a lease's deadline to ARGV[3] ms from now (never shortens it).
-- KEYS[1] prefix of the task buckets (see _layout.lua)   KEYS[2] reserved (ZSET id -> deadline ms)
-- ARGV[1] id   ARGV[2] lease token   ARGV[3] ms from now
-- Returns: the new deadline in ms, or 0 when the lease was lost.
--@include _envelope
--@include _layout
local prefix, reserved = KEYS[1], KEYS[2]
local id, token, extra = ARGV[1], ARGV[2], tonumber(ARGV[3])
local bad = load_buckets(prefix)
if bad then
  return bad
end
local raw = read_header(prefix, id)
local e = raw and parse_header(raw)
local deadline = redis.call('ZSCORE', reserved, id)
if not e or e.token ~= token or not deadline then
  return 0
end
local wanted = now_ms() + extra
if wanted > tonumber(deadline) then
  redis.call('ZADD', reserved, wanted, id)
  return wanted
end
return tonumber(deadline)
