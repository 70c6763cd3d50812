#!lua flags=no-writes
-- get.lua: look a task up by id.
-- KEYS[1] schedule (ZSET)  KEYS[2] reserved (ZSET)  KEYS[3] dead (ZSET)  KEYS[4] tasks (HASH)  KEYS[5] errors (HASH)
-- ARGV[1] id
-- Returns: nil when unknown | {state, envelope, last_error or false, now_ms, score}
--   state is 'delayed', 'ready', 'reserved' or 'dead'; score is the due time, lease deadline
--   or time of death, matching the state.
--@include _envelope
local schedule, reserved, dead, tasks, errors = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local id = ARGV[1]
local raw = redis.call('HGET', tasks, id)
if not raw then
  return nil
end
local now = now_ms()
local state, score
score = redis.call('ZSCORE', schedule, id)
if score then
  state = tonumber(score) <= now and 'ready' or 'delayed'
else
  score = redis.call('ZSCORE', reserved, id)
  if score then
    state = 'reserved'
  else
    score = redis.call('ZSCORE', dead, id)
    if not score then
      return nil
    end
    state = 'dead'
  end
end
return { state, raw, redis.call('HGET', errors, id), now, score }
