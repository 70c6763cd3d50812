#!lua
-- tick.lua: schedule a periodic topic's next tick, at most once per tick time, ever.
-- A periodic topic's chain is its state hash: fp (the schedule's fingerprint), last (the
-- latest tick ever scheduled, Unix ms) and id (that tick's task id).  A tick is stored
-- only when it is later than `last`, so however many workers try at once, and after the
-- tick ran and was acked, no tick time is scheduled twice.  The tick is a task like any
-- other (body ARGV[5], due at its tick time even when that has passed, topic defaults).
-- KEYS[1] prefix of the task buckets and schedule slots (see _layout.lua)
-- KEYS[2] wheel (ZSET)   KEYS[3] dead (ZSET)   KEYS[4] errors (HASH)
-- KEYS[5] periodic (HASH fp, last, id, judged, missed: see tick_look.lua)
-- ARGV[1] 'advance' (refuse if the chain has another fingerprint) or 'claim' (replace it)
-- ARGV[2] fingerprint   ARGV[3] tick ms   ARGV[4] the tick's task id   ARGV[5] body JSON
-- ARGV[6] wake channel   ARGV[7] '1': first drop the chain's last tick if tick_look.lua
-- judged it missed and it still waits (catch_up skips it), else ''
-- Returns: {status, now_ms, last_ms or -1 when none}
--   1 scheduled (or already live under that id) | 0 refused: not later than the last tick
--   scheduled | -1 refused: the chain belongs to another schedule (advance)
-- claim: a chain of another fingerprint is replaced: its waiting tick is deleted (one
-- already running is left to finish), its `last` forgotten, then the tick is scheduled.
-- A tick stored when its time has already come (a missed one caught up) is judged at once,
-- on time: it is late on purpose.  Also counts the schedule's changes in <prefix>meta
-- (see _layout.lua).
--@include _envelope
--@include _layout
local prefix, wheel, dead, errors, periodic = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local mode, fingerprint, tick, id = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local body, channel, drop = ARGV[5], ARGV[6], ARGV[7] == '1'

-- Delete task `waiting` (the chain's last tick) if it still waits in the schedule: one
-- already running is left to finish.
local function drop_waiting(waiting)
  local raw = read_header(prefix, waiting)
  local e = raw and parse_header(raw)
  if e and schedule_remove(prefix, wheel, waiting, e.due) then
    schedule_changed(prefix, wheel, -1)
    delete_task(prefix, waiting)
    redis.call('HDEL', errors, waiting)
  end
end

local bad = check_types({ [wheel] = 'zset', [dead] = 'zset', [errors] = 'hash',
  [periodic] = 'hash', [slot_counter(prefix)] = 'string', [meta_key(prefix)] = 'hash' })
  or load_buckets(prefix)
if bad then
  return bad
end
local now = now_ms()
local state = redis.call('HMGET', periodic, 'fp', 'last', 'id', 'judged', 'missed')
local owner, last, last_id = state[1], tonumber(state[2]), state[3]
local missed = last and tonumber(state[4]) == last and state[5] == '1'

if owner and owner ~= fingerprint then
  if mode ~= 'claim' then
    return { -1, now, last or -1 }
  end
  -- A changed schedule: the old chain's waiting tick goes, so the chains are not doubled.
  if last_id then
    drop_waiting(last_id)
  end
  last, missed = nil, false
end
if last and tick <= last then
  return { 0, now, last }
end
if drop and missed and last_id then
  drop_waiting(last_id)
end

local header = read_header(prefix, id)
local live = header and not redis.call('ZSCORE', dead, id)
if not live then
  -- As in send.lua: a new task, or one replacing a dead letter of the same id.
  local split = not header and bucket_full(prefix, id, body)
  if split then
    check_splits(prefix, 1)
  end
  wake_if_earliest(schedule_add(prefix, wheel, { tick, id }), channel, tick)
  schedule_changed(prefix, wheel, 1)
  if split then
    split_bucket(prefix)
  end
  if header then
    redis.call('HDEL', errors, id)
    redis.call('ZREM', dead, id)
  end
  redis.call('HSET', bucket_of(prefix, id), id,
    new_header('0', '0', int_text(now), int_text(tick)), body_field(id), body)
end
redis.call('HSET', periodic, 'fp', fingerprint, 'last', int_text(tick), 'id', id)
if tick <= now then
  redis.call('HSET', periodic, 'judged', int_text(tick), 'missed', '0')
end
return { 1, now, tick }
