#!lua flags=no-writes
-- tick_state.lua: where a periodic topic's chain stands (see tick.lua), on Redis's clock.
-- KEYS[1] periodic (HASH fp, last, id)   KEYS[2] clock (STRING, see _envelope.lua)
-- Returns: {now_ms, fingerprint or false, last tick ms or -1}
--@include _envelope
local periodic = KEYS[1]
local bad = READ_CLOCK and load_clock(KEYS[2])
if bad then
  return bad
end
local state = redis.call('HMGET', periodic, 'fp', 'last')
return { now_ms(), state[1], tonumber(state[2]) or -1 }
