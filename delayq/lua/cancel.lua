#!lua flags=allow-oom
-- cancel.lua: delete a task that is delayed, ready or dead.  A reserved task is running
-- somewhere and cannot be recalled, so it is left alone.
-- KEYS[1] schedule (ZSET)  KEYS[2] tasks (HASH)  KEYS[3] dead (ZSET)  KEYS[4] errors (HASH)
-- ARGV[1] id
-- Returns: 1 removed | 0 unknown or reserved
--@include _envelope
local schedule, tasks, dead, errors = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local id = ARGV[1]
local bad = check_types({ [schedule] = 'zset', [tasks] = 'hash', [dead] = 'zset', [errors] = 'hash' })
if bad then
  return bad
end
if redis.call('ZREM', schedule, id) == 0 and redis.call('ZREM', dead, id) == 0 then
  return 0
end
redis.call('HDEL', tasks, id)
redis.call('HDEL', errors, id)
return 1
