#!lua
-- clock.lua: read, or set, how far a test clock (delayq.testing.run_due) has moved a topic's
-- time on.  The scripts of a process with a test clock add this offset to Redis's TIME
-- (_envelope.lua); production's neither read nor write it.
-- KEYS[1] clock (STRING ms, see _envelope.lua)
-- ARGV[1] the offset to set, ms (0 deletes the key); absent: only read it
-- ARGV[2] the topic's wake channel, published when the offset changes: a worker asleep
--   until a due time that has now come wakes (it slept by the time before the move)
-- Returns: {now_ms, offset_ms}, the topic's time and offset after the call
--@include _envelope
local key, wanted, channel = KEYS[1], ARGV[1], ARGV[2]
local bad = load_clock(key)
if bad then
  return bad
end
if wanted then
  local offset = tonumber(wanted)
  if not offset or offset ~= math.floor(offset) or offset < 0 then
    return redis.error_reply('ERR clock offset must be a whole number of ms >= 0, got ' .. wanted)
  end
  if offset == 0 then
    redis.call('DEL', key)
  else
    redis.call('SET', key, wanted)
  end
  if offset ~= clock_offset and channel then
    publish(channel, 'clock')
  end
  clock_offset = offset
end
return { now_ms(), clock_offset }
