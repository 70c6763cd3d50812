#!lua flags=no-writes
-- stats.lua: count a topic's tasks by state.
-- KEYS[1] prefix of the schedule slots (see _layout.lua)   KEYS[2] wheel (ZSET)
-- KEYS[3] reserved (ZSET)   KEYS[4] dead (ZSET)   KEYS[5] controls (HASH, see _controls.lua)
-- Returns: {delayed, ready, reserved, dead, {paused, rate_limit, max_running}}, the controls
--   as stored (false where not set)
-- O(slots): one ZCARD per slot of up to 128 tasks (a million tasks: ~8,000 calls, ~10 ms),
-- one more per slot whose bound has passed.
--@include _envelope
--@include _layout
local prefix, wheel, reserved, dead, controls = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local now = now_ms()
local delayed, ready = 0, 0
local slots = redis.call('ZRANGE', wheel, 0, -1, 'WITHSCORES')
for i = 1, #slots, 2 do
  local key = slot_key(prefix, slots[i])
  local count = redis.call('ZCARD', key)
  -- Only a slot whose bound has passed can hold due tasks; of those only the one that
  -- straddles now is partly due, and it holds at most 128.
  local due = 0
  if tonumber(slots[i + 1]) <= now then
    local last = tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2])
    due = (last and last <= now) and count or #redis.call('ZRANGE', key, '-inf', now, 'BYSCORE')
  end
  ready = ready + due
  delayed = delayed + count - due
end
return { delayed, ready, lease_count(reserved), redis.call('ZCARD', dead),
  redis.call('HMGET', controls, 'paused', 'rate_limit', 'max_running') }
