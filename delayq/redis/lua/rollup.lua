#!lua flags=allow-oom
-- rollup.lua: add a worker's counts of the last seconds to its topic's rolling activity.
-- KEYS[1] prefix of the topic's keys: the rollup HASH is <prefix>rollup
-- ARGV[1..]: field, count, field, count, ... (see delayq/worker/rollup.py for the fields)
-- Returns: the window the counts went to (Unix seconds / 10).
-- The hash is a ring of 360 windows of 10 s (an hour): field "<ring slot>:<field>", and
-- "<ring slot>:w" names the window the slot holds.  Counts for a window that found its slot
-- holding an older window clear that slot first, so the hash never holds more than an hour
-- and needs no expiry.  Windows are Redis's clock (TIME), never a worker's, and the real
-- one even under a test clock (_envelope.lua): the activity counted happened now.
local key = KEYS[1] .. 'rollup'
local window = math.floor(tonumber(redis.call('TIME')[1]) / 10)
local slot = window % 360
local kind = redis.call('TYPE', key)['ok']
if kind ~= 'none' and kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE delayq key ' .. key .. ' holds a ' .. kind .. ', not a hash')
end
-- Every field a window may hold (delayq/worker/rollup.py: FIELDS): a slot is cleared by name.
local FIELDS = { 'acked', 'retried', 'dead', 'late_n', 'late_ms' }
for b = 0, 15 do
  FIELDS[#FIELDS + 1] = 'l' .. b
end
local held = redis.call('HGET', key, slot .. ':w')
if held ~= tostring(window) then
  if held then
    local stale = {}
    for _, field in ipairs(FIELDS) do
      stale[#stale + 1] = slot .. ':' .. field
    end
    redis.call('HDEL', key, unpack(stale))
  end
  redis.call('HSET', key, slot .. ':w', window)
end
for i = 1, #ARGV, 2 do
  redis.call('HINCRBY', key, slot .. ':' .. ARGV[i], ARGV[i + 1])
end
return window
