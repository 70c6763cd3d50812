#!lua
-- send_many.lua: send.lua for a batch of tasks in one call (one round trip, one atomic step).
-- KEYS[1] prefix of the task buckets and schedule slots   KEYS[2] wheel (ZSET)
-- KEYS[3] dead (ZSET)   KEYS[4] errors (HASH)
-- KEYS[5] reserved (ZSET id -> lease deadline ms): given only with on_conflict 'replace',
--         which its presence asks for (a plain batch carries nothing more than before)
-- ARGV[1] tolerance ms for absolute times in the past   ARGV[2] wake channel
-- ARGV[3] 'd' when the times below are delays in ms, 'a' when absolute Unix times in ms;
--         followed by 'g' ('dg', 'ag'): each task has a fourth field, its group (_groups.lua)
-- ARGV[4] max attempts (0 = topic default)   ARGV[5] ttr ms (0 = topic default)
-- ARGV[6] priority (0: the schedule), for all tasks
-- ARGV[7..] three fields per task: id, delay-or-time ms, body (and group, with 'g' above)
-- (The options are passed once a call, not per task: every argument costs Redis a string.)
-- Returns: {status1, status2, ...}, as send.lua's, one per task in the order given:
--   1 stored | 0 kept: id already live, or repeated earlier in the batch (nothing written)
--   | -1 time too far past; with 'replace': 2 replaced, the delayed or ready task (or one
--   stored by an earlier send of the batch: the last of an id's sends wins) now has the new
--   body, due time and options, as if newly sent | 3 not replaced: reserved (running)
--@include _envelope
--@include _layout
--@include _priority
--@include _groups
--@include _replace
local prefix, wheel, dead, errors, reserved = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local pk = prio_keys(prefix)  -- where tasks with a priority wait (_priority.lua)
local tolerance, channel, mode = tonumber(ARGV[1]), ARGV[2], string.sub(ARGV[3], 1, 1)
local max_attempts, ttr, priority = ARGV[4], ARGV[5], tonumber(ARGV[6]) or 0
local suffix = priority ~= 0 and prio().suffix(priority) or ''
local replace = reserved ~= nil
local grouped = string.sub(ARGV[3], 2, 2) == 'g'
local FIRST, FIELDS = 7, grouped and 4 or 3
local gk = grouped and grp().keys(prefix) or nil
local store_groups = {}  -- a grouped batch: each stored task's group
local bad = check_types({ [wheel] = 'zset', [dead] = 'zset', [errors] = 'hash',
  [slot_counter(prefix)] = 'string', [meta_key(prefix)] = 'hash' }) or load_buckets(prefix)
if not bad and priority ~= 0 then
  bad = check_types({ [pk.index] = 'zset', [pk.ready] = 'zset', [pk.mark] = 'string' })
end
if not bad and replace then
  -- A replaced task may wait among the priority tasks (or in a group) whatever this batch's.
  bad = check_types(grp().kinds(grp().keys(prefix),
    { [reserved] = 'zset', [pk.index] = 'zset', [pk.ready] = 'zset' }))
end
if not bad and grouped then
  local kinds = grp().kinds(gk, {})
  for i = FIRST + 3, #ARGV, FIELDS do
    kinds[grp().queue(gk, ARGV[i])] = 'zset'
  end
  bad = check_types(kinds)
end
if bad then
  return bad
end
local now = now_ms()
local now_text, due_text = int_text(now), text_of_last()

-- Which ids are stored already; only those are looked up among the dead letters (and,
-- to replace, among the leases).
local ids, existing, known = {}, {}, {}
for i = FIRST, #ARGV, FIELDS do
  local id = ARGV[i]
  ids[#ids + 1] = id
  if redis.call('HEXISTS', bucket_of(prefix, id), id) == 1 then
    existing[#ids] = true
    known[#known + 1] = id
  end
end
local is_dead, is_reserved = {}, {}
if #known > 0 then
  for k, score in ipairs(redis.call('ZMSCORE', dead, unpack(known))) do
    is_dead[known[k]] = score ~= false
  end
  if replace then
    for k, score in ipairs(redis.call('ZMSCORE', reserved, unpack(known))) do
      is_reserved[known[k]] = score ~= false and not is_dead[known[k]]
    end
  end
end
-- The tasks to store, in parallel arrays (a table per task costs a microsecond's tenth).
local scheduled, store_ids, store_headers, store_bodies, store_new = {}, {}, {}, {}, {}
local revived, out, seen = {}, {}, {}
local earliest, latest = nil, nil
local replaced = {}  -- with 'replace': {id, header, slot, waiting} of each live task replaced
if not replace then
  for n, id in ipairs(ids) do
    local i = FIRST + (n - 1) * FIELDS
    local due = due_time(now, mode, tonumber(ARGV[i + 1]), tolerance)
    local status = due and 1 or -1
    if status == 1 and (seen[id] or (existing[n] and not is_dead[id])) then
      status = 0
    end
    if status == 1 then
      seen[id] = true
      if existing[n] then
        revived[#revived + 1] = id
      end
      scheduled[#scheduled + 1] = due
      scheduled[#scheduled + 1] = id
      local k = #store_ids + 1
      store_ids[k] = id
      store_headers[k] = new_header(max_attempts, ttr, now_text, due_text(due))
      if priority ~= 0 then
        store_headers[k] = store_headers[k] .. suffix
      end
      if grouped then
        store_groups[k] = ARGV[i + 3]
        store_headers[k] = store_headers[k] .. ',g' .. ARGV[i + 3]
      end
      store_bodies[k] = ARGV[i + 2]
      store_new[k] = not existing[n]
      earliest = math.min(earliest or due, due)
      latest = math.max(latest or due, due)
    end
    out[n] = status
  end
else
  -- As the sends one by one, in the order given: the first send of an id creates it (also
  -- over a dead letter) or replaces the live task, each later one replaces what the
  -- earlier stored, so the last wins; nothing touches a reserved task.  Each id is stored
  -- once, with its last send's due time and body (seen[id] = its index in the arrays).
  for n, id in ipairs(ids) do
    local i = FIRST + (n - 1) * FIELDS
    local due = due_time(now, mode, tonumber(ARGV[i + 1]), tolerance)
    local status, k = -1, seen[id]
    if not due then
      status = -1
    elseif is_reserved[id] then
      status = 3
    elseif k then
      status = 2
    else
      status = (existing[n] and not is_dead[id]) and 2 or 1
      k = #store_ids + 1
      seen[id], store_ids[k], store_new[k] = k, id, not existing[n]
      if existing[n] and is_dead[id] then
        revived[#revived + 1] = id
      elseif existing[n] then
        local header = read_header(prefix, id)
        local e = parse_header(header)
        local slot, waiting = waiting_place(prefix, wheel, pk, id, e)
        replaced[#replaced + 1] = { id, e, slot, waiting }
      end
    end
    if due and k then
      scheduled[2 * k - 1], scheduled[2 * k] = due, id
      store_headers[k] = new_header(max_attempts, ttr, now_text, due_text(due)) .. suffix
      if grouped then
        store_groups[k] = ARGV[i + 3]
        store_headers[k] = store_headers[k] .. ',g' .. ARGV[i + 3]
      end
      store_bodies[k] = ARGV[i + 2]
    end
    out[n] = status
  end
  for k = 1, #scheduled, 2 do
    earliest = math.min(earliest or scheduled[k], scheduled[k])
    latest = math.max(latest or scheduled[k], scheduled[k])
  end
end
if not earliest then
  return out
end
bad = check_slots(prefix, wheel, earliest, latest)
if bad then
  return bad
end
-- Replaced tasks leave where they waited before anything is scheduled (the schedule's
-- entries are ids not scheduled yet).
local removed = 0
for _, r in ipairs(replaced) do
  removed = removed + unwait(prefix, wheel, pk, r[1], r[2], r[3], r[4])
  revived[#revived + 1] = r[1]  -- its last error goes, as a new send's would
end
-- Each new task that lands in a full bucket splits one bucket, under the rules of
-- bucket_full in send.lua; the splits come before the stores, which then go to the
-- buckets of the new count.
local splits, fill, listpack = 0, {}, {}
for k, id in ipairs(store_ids) do
  if store_new[k] and #store_bodies[k] <= LISTPACK_VALUE_MAX then
    local bucket = bucket_of(prefix, id)
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
for k, id in ipairs(store_ids) do
  redis.call('HSET', bucket_of(prefix, id), id, store_headers[k], body_field(id), store_bodies[k])
end
if #revived > 0 then
  -- A dead task's id is free again: the new send replaces the dead letter (and a replaced
  -- task starts afresh).  ZREM of a replaced id, which is not dead, removes nothing.
  redis.call('HDEL', errors, unpack(revived))
  redis.call('ZREM', dead, unpack(revived))
end
if grouped then
  -- Each group's tasks in one call.
  local by_group, order, wake = {}, {}, false
  for k, g in ipairs(store_groups) do
    local entries = by_group[g]
    if not entries then
      entries = {}
      by_group[g] = entries
      order[#order + 1] = g
    end
    entries[#entries + 1] = scheduled[2 * k - 1]
    entries[#entries + 1] = grp().member(store_ids[k], priority)
  end
  for _, g in ipairs(order) do
    wake = grp().add(gk, g, by_group[g]) or wake
  end
  wake_if_earliest(wake, channel, earliest)
  if removed > 0 then
    schedule_changed(prefix, wheel, -removed)
  end
elseif priority == 0 then
  wake_if_earliest(schedule_add(prefix, wheel, scheduled), channel, earliest)
  schedule_changed(prefix, wheel, #store_ids - removed)
else
  wake_if_earliest(prio().add_many(pk, scheduled, priority), channel, earliest)
  if removed > 0 then
    schedule_changed(prefix, wheel, -removed)  -- replaced tasks of priority 0 left the schedule
  end
end
return out
