#!lua
-- tick_look.lua: a keeper's look at its periodic topic's chain (see tick.lua), on Redis's
-- clock.  The first look by a keeper of the chain's own schedule that finds the chain's
-- last tick due records whether that tick was *missed*: keepers of live workers look when
-- the tick falls due, so a first look more than ARGV[2] ms after it means no worker of the
-- schedule was there when it fell due.  The verdict is kept (fields judged, missed) until
-- the chain moves on, so that later looks, by any keeper, read the same one.
-- KEYS[1] periodic (HASH fp, last, id, judged, missed)   KEYS[2] clock (STRING, see _envelope.lua)
-- ARGV[1] the looking keeper's schedule fingerprint   ARGV[2] on-time slack ms
-- Returns: {now_ms, fingerprint or false, last tick ms or -1, 1 if that tick was missed else 0}
--@include _envelope
local periodic, clock = KEYS[1], KEYS[2]
local fingerprint, slack = ARGV[1], tonumber(ARGV[2])
local bad = READ_CLOCK and load_clock(clock)
if bad then
  return bad
end
local now = now_ms()
local state = redis.call('HMGET', periodic, 'fp', 'last', 'judged', 'missed')
local owner, last, judged, missed = state[1], tonumber(state[2]), tonumber(state[3]), state[4]

if owner ~= fingerprint or not last or last > now then
  return { now, owner, last or -1, 0 }
end
if judged ~= last then
  -- 1. The first look since this tick fell due: was it on time?
  missed = (now - last > slack) and '1' or '0'
  redis.call('HSET', periodic, 'judged', int_text(last), 'missed', missed)
end
return { now, owner, last, missed == '1' and 1 or 0 }
