#!lua flags=allow-oom
-- control.lua: set or clear fields of a topic's fleet-wide controls (see _controls.lua), and
-- wake the topic's workers when anything changed, so that a resume or a relaxed limit takes
-- effect at once rather than at their next look.
-- KEYS[1] controls (HASH)
-- ARGV[1] wake channel
-- ARGV[2..] field, value pairs; an empty value deletes the field
-- Returns: the number of fields whose value changed.
-- allow-oom: pausing a topic or lifting a limit must work on a full Redis too.
--@include _envelope
local controls, channel = KEYS[1], ARGV[1]
local bad = check_types({ [controls] = 'hash' })
if bad then
  return bad
end
local fields = {}
for i = 2, #ARGV, 2 do
  fields[#fields + 1] = ARGV[i]
end
local before = redis.call('HMGET', controls, unpack(fields))
local changed = 0
for k, field in ipairs(fields) do
  local value = ARGV[2 * k + 1]
  if value == '' then
    changed = changed + redis.call('HDEL', controls, field)
  elseif before[k] ~= value then
    redis.call('HSET', controls, field, value)
    changed = changed + 1
  end
end
if changed > 0 then
  publish(channel, 0)
end
return changed
