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
local changed, cap_changed = 0, false
for k, field in ipairs(fields) do
  local value = ARGV[2 * k + 1]
  local was = changed
  if value == '' then
    changed = changed + redis.call('HDEL', controls, field)
  elseif before[k] ~= value then
    redis.call('HSET', controls, field, value)
    changed = changed + 1
  end
  cap_changed = cap_changed or (field == 'group_max_running' and changed > was)
end
-- A changed max_running_per_group: the groups waiting at their cap (_groups.lua) are
-- looked at again by the next reserve (a raised cap lets them lease at once).
if cap_changed then
  local full = string.sub(controls, 1, -9) .. 'grp:full'  -- <prefix>controls -> <prefix>grp:full
  local groups = redis.call('ZRANGE', full, 0, -1)
  for i = 1, #groups, 1000 do
    local adds = {}
    for k = i, math.min(i + 999, #groups) do
      adds[#adds + 1] = 0
      adds[#adds + 1] = groups[k]
    end
    redis.call('ZADD', string.sub(controls, 1, -9) .. 'grp:wait', unpack(adds))
  end
  redis.call('DEL', full)
end
if changed > 0 then
  publish(channel, 0)
end
return changed
