#!lua flags=no-writes
-- get.lua: look a task up by id.
-- KEYS[1] prefix of the task buckets and schedule slots (see _layout.lua)
-- KEYS[2] wheel (ZSET)  KEYS[3] reserved (ZSET)  KEYS[4] dead (ZSET)  KEYS[5] errors (HASH)
-- KEYS[6] controls (HASH)
-- ARGV[1] id
-- Returns: nil when unknown | {state, envelope, last_error or false, now_ms, score, paused}
--   state is 'delayed', 'ready', 'reserved' or 'dead'; score is the due time, lease deadline
--   or time of death, matching the state; paused is 1 when the topic is paused, else 0.
--@include _envelope
--@include _layout
--@include _groups
local prefix, wheel, reserved, dead, errors = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local controls, prio = KEYS[6], prio_keys(KEYS[1]).index
local id = ARGV[1]
local bad = load_buckets(prefix)
if bad then
  return bad
end
local raw, body = read_task(prefix, id)
if not raw then
  return nil
end
local now = now_ms()
local e = parse_header(raw)
local state, score
local waiting = e and (e.group and grp().due(grp().keys(prefix), e.group, id, e.priority)
  or not e.group and (e.priority == 0 and slot_of(prefix, wheel, id, e.due)
  or e.priority ~= 0 and redis.call('ZSCORE', prio, id)))
if waiting then
  score = e.due
  state = score <= now and 'ready' or 'delayed'
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
return { state, joined(raw, body), redis.call('HGET', errors, id), now, score,
  redis.call('HEXISTS', controls, 'paused') }
