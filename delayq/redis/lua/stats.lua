#!lua flags=no-writes
-- stats.lua: count a topic's tasks by state.
-- KEYS[1] prefix of the schedule slots and the meta hash (see _layout.lua)
-- KEYS[2] wheel (ZSET)   KEYS[3] reserved (ZSET)   KEYS[4] dead (ZSET)
-- KEYS[5] controls (HASH, see _controls.lua)
-- Returns: {delayed, ready, reserved, dead, {paused, rate_limit, max_running}, now_ms,
--   oldest_ready_ms}: the controls as stored (false where not set), and the due time of the
--   earliest ready task (-1 when none is ready), read from the heads of the schedule and
--   the priority index (O(log n))
-- The scheduled total (delayed + ready) is the count the scripts keep in <prefix>meta;
-- reserved and dead are sizes of sorted sets.  Which scheduled tasks are ready depends on
-- the clock (a task turns ready with no script running), so that split is counted here,
-- exactly, on the shorter side of now: the slots whose bound has passed (ZCOUNT each) or
-- the slots after them (ZCARD each).  One side is a few slots on a topic whose tasks are
-- mostly delayed or mostly ready; only a topic holding many of both walks more (one call
-- per 128 tasks of the smaller side).  A topic scheduled before delayq kept the count has
-- none yet (the next script that changes its schedule recounts it): it is counted here.
-- Tasks with a priority wait outside the schedule, in <prio> (by due time): two ZCOUNTs.
-- Grouped tasks wait in their groups' queues, all of them indexed by due time in <grp:all>
-- (_groups.lua): two ZCOUNTs more (an EXISTS for an ungrouped topic).
--@include _envelope
--@include _layout
local prefix, wheel, reserved, dead, controls = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local prio = prio_keys(prefix).index
local bad = READ_CLOCK and load_clock(prefix .. 'clock')
if bad then
  return bad
end
local now = now_ms()
local scheduled = tonumber(redis.call('HGET', meta_key(prefix), 'scheduled'))
    or count_schedule(prefix, wheel)
local passed = redis.call('ZCOUNT', wheel, '-inf', now)  -- slots whose bound has passed
local ready = 0
if passed <= redis.call('ZCARD', wheel) - passed then
  for _, n in ipairs(redis.call('ZRANGE', wheel, '-inf', now, 'BYSCORE')) do
    ready = ready + redis.call('ZCOUNT', slot_key(prefix, n), '-inf', now)
  end
else
  -- Slots with a bound after now hold only delayed tasks; walking back from there, a slot
  -- whose bound has passed holds delayed ones only as long as the slot after it held
  -- nothing else (slots are in due order), so the walk stops at the first without any.
  local delayed = 0
  for _, n in ipairs(redis.call('ZRANGE', wheel, '+inf', '(' .. now, 'BYSCORE', 'REV')) do
    delayed = delayed + redis.call('ZCARD', slot_key(prefix, n))
  end
  for _, n in ipairs(redis.call('ZRANGE', wheel, now, '-inf', 'BYSCORE', 'REV')) do
    local later = redis.call('ZCOUNT', slot_key(prefix, n), '(' .. now, '+inf')
    if later == 0 then
      break
    end
    delayed = delayed + later
  end
  ready = scheduled - delayed
end
local prio_ready, prio_delayed = 0, 0
if redis.call('EXISTS', prio) == 1 then
  prio_ready = redis.call('ZCOUNT', prio, '-inf', now)
  prio_delayed = redis.call('ZCOUNT', prio, '(' .. int_text(now), '+inf')
end
local oldest = -1
local head = redis.call('ZRANGE', wheel, 0, 0)[1]
if head then
  local first = tonumber(redis.call('ZRANGE', slot_key(prefix, head), 0, 0, 'WITHSCORES')[2])
  if first and first <= now then
    oldest = first
  end
end
if prio_ready > 0 then
  local first = tonumber(redis.call('ZRANGE', prio, 0, 0, 'WITHSCORES')[2])
  if first and (oldest < 0 or first < oldest) then
    oldest = first
  end
end
local all = prefix .. 'grp:all'
local group_ready, group_delayed = 0, 0
if redis.call('EXISTS', all) == 1 then
  group_ready = redis.call('ZCOUNT', all, '-inf', now)
  group_delayed = redis.call('ZCOUNT', all, '(' .. int_text(now), '+inf')
end
if group_ready > 0 then
  local first = tonumber(redis.call('ZRANGE', all, 0, 0, 'WITHSCORES')[2])
  if first and (oldest < 0 or first < oldest) then
    oldest = first
  end
end
return { scheduled - ready + prio_delayed + group_delayed,
  ready + prio_ready + group_ready, lease_count(reserved),
  redis.call('ZCARD', dead),
  redis.call('HMGET', controls, 'paused', 'rate_limit', 'max_running'), now, oldest }
