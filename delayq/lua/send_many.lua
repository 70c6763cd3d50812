#!lua
-- send_many.lua: send.lua for a batch of tasks in one call (one round trip, one atomic step).
-- KEYS[1] prefix of the task buckets and schedule slots   KEYS[2] wheel (ZSET)
-- KEYS[3] dead (ZSET)   KEYS[4] errors (HASH)
-- ARGV[1] tolerance ms for absolute times in the past   ARGV[2] wake channel
-- ARGV[3..] six fields per task: id, 'd'|'a', delay-or-time ms, max attempts, ttr ms, body
-- Returns: {status1, status2, ...}: 1 stored, 0 id already live (or repeated earlier in the
--   batch; nothing written), -1 time too far past
--@include _envelope
--@include _layout
local prefix, wheel, dead, errors = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local tolerance, channel = tonumber(ARGV[1]), ARGV[2]
local bad = check_types({ [wheel] = 'zset', [dead] = 'zset', [errors] = 'hash',
  [slot_counter(prefix)] = 'string' }) or load_buckets(prefix)
if bad then
  return bad
end
local now = now_ms()
local now_text, due_text = int_text(now), text_of_last()

local ids, existing = {}, {}
for i = 3, #ARGV, 6 do
  local id = ARGV[i]
  ids[#ids + 1] = id
  existing[#ids] = redis.call('HEXISTS', bucket_of(prefix, id), id) == 1
end
local was_dead = redis.call('ZMSCORE', dead, unpack(ids))
local scheduled, stored, revived, out, seen = {}, {}, {}, {}, {}
local earliest, latest = nil, nil
for n, id in ipairs(ids) do
  local i = 3 + (n - 1) * 6
  local mode, value = ARGV[i + 1], tonumber(ARGV[i + 2])
  local due = due_time(now, mode, value, tolerance)
  local status = due and 1 or -1
  if status == 1 and (seen[id] or (existing[n] and not was_dead[n])) then
    status = 0
  end
  if status == 1 then
    seen[id] = true
    if existing[n] then
      revived[#revived + 1] = id
    end
    scheduled[#scheduled + 1] = due
    scheduled[#scheduled + 1] = id
    stored[#stored + 1] = { id,
      new_header(ARGV[i + 3], ARGV[i + 4], now_text, due_text(due)),
      ARGV[i + 5], existing[n] }
    earliest = math.min(earliest or due, due)
    latest = math.max(latest or due, due)
  end
  out[n] = status
end
if not earliest then
  return out
end
bad = check_slots(prefix, wheel, earliest, latest)
if bad then
  return bad
end
-- Each new task that lands in a full bucket splits one bucket, under the rules of
-- bucket_full in send.lua; the splits come before the stores, which then go to the
-- buckets of the new count.
local splits, fill, listpack = 0, {}, {}
for _, task in ipairs(stored) do
  if not task[4] and #task[3] <= LISTPACK_VALUE_MAX then
    local bucket = bucket_of(prefix, task[1])
    fill[bucket] = (fill[bucket] or redis.call('HLEN', bucket)) + 2
    if fill[bucket] > BUCKET_SPLIT_FIELDS then
      if listpack[bucket] == nil then
        listpack[bucket] = still_listpack(bucket)
      end
      if listpack[bucket] then
        splits = splits + 1
      end
    end
  end
end
splits = math.min(splits, SPLITS_PER_CALL_MAX)
check_splits(prefix, splits)
for _ = 1, splits do
  split_bucket(prefix)
end
for _, task in ipairs(stored) do
  redis.call('HSET', bucket_of(prefix, task[1]), task[1], task[2], body_field(task[1]), task[3])
end
if #revived > 0 then
  -- A dead task's id is free again: the new send replaces the dead letter.
  redis.call('HDEL', errors, unpack(revived))
  redis.call('ZREM', dead, unpack(revived))
end
wake_if_earliest(schedule_add(prefix, wheel, scheduled), channel, earliest)
return out
