#!lua flags=allow-oom
-- reschedule.lua: move a delayed or ready task to a new due time.
-- KEYS[1] prefix of the task buckets and schedule slots (see _layout.lua)
-- KEYS[2] wheel (ZSET)
-- ARGV[1] id   ARGV[2] 'd' delay ms | 'a' absolute Unix ms   ARGV[3] value
-- ARGV[4] tolerance ms for an absolute time in the past   ARGV[5] wake channel
-- Returns: {1, due_ms} moved | {0} not delayed/ready | {-1, now_ms} time too far in the past
--@include _envelope
--@include _layout
--@include _priority
--@include _groups
local prefix, wheel = KEYS[1], KEYS[2]
local pk = prio_keys(prefix)  -- where tasks with a priority wait (_priority.lua)
local id, mode, value = ARGV[1], ARGV[2], tonumber(ARGV[3])
local tolerance, channel = tonumber(ARGV[4]), ARGV[5]
local bad = check_types({ [wheel] = 'zset', [slot_counter(prefix)] = 'string', [pk.index] = 'zset', [pk.ready] = 'zset', [pk.mark] = 'string' })
  or load_buckets(prefix)
if bad then
  return bad
end
local raw = read_header(prefix, id)
local e = raw and parse_header(raw)
local gk = e and e.group and grp().keys(prefix)
local slot = e and not gk and e.priority == 0 and slot_of(prefix, wheel, id, e.due)
if gk then
  if not grp().due(gk, e.group, id, e.priority) then
    return { 0 }
  end
elseif not slot and not (e and e.priority ~= 0 and prio().due(pk, id)) then
  return { 0 }
end
local now = now_ms()
local due = due_time(now, mode, value, tolerance)
if not due then
  return { -1, now }
end
if gk then
  bad = check_types(grp().kinds(gk, {}))
  if bad then
    return bad
  end
  grp().remove(gk, e.group, id, e.priority)
elseif slot then
  bad = check_slots(prefix, wheel, due, due)
  if bad then
    return bad
  end
  redis.call('ZREM', slot_key(prefix, slot), id)
  forget_if_empty(prefix, wheel, slot)
else
  prio().remove(pk, id, e.due, e.priority)
end
e.due = due
redis.call('HSET', bucket_of(prefix, id), id, format_header(e))
if gk then
  wake_if_earliest(grp().add(gk, e.group, { due, grp().member(id, e.priority) }), channel, due)
elseif slot then
  wake_if_earliest(schedule_add(prefix, wheel, { due, id }), channel, due)
else
  wake_if_earliest(prio().add(pk, id, due, e.priority), channel, due)
end
return { 1, due }
