#!lua
-- send.lua: store a new task and schedule it, unless the id is already live (idempotent send);
-- or, with on_conflict 'replace', give a live task that is still waiting the new body and
-- due time (debounce).
-- KEYS[1] prefix "delayq:{q:t}:" of the task buckets and schedule slots (see _layout.lua)
-- KEYS[2] wheel (ZSET slot -> bound ms)   KEYS[3] dead (ZSET id -> dead-lettered at ms)
-- KEYS[4] errors (HASH id -> last error)
-- KEYS[5] reserved (ZSET id -> lease deadline ms), with on_conflict 'replace' only
-- ARGV[1] task id
-- ARGV[2] 'd' when ARGV[3] is a delay in ms, 'a' when it is an absolute Unix time in ms
-- ARGV[3] delay or time (ms)
-- ARGV[4] max attempts (0 = topic default)   ARGV[5] ttr ms (0 = topic default)
-- ARGV[6] body JSON   ARGV[7] tolerance ms for an absolute time in the past   ARGV[8] wake channel
-- ARGV[9] on_conflict: 'keep' (an id already live is left as it is; also when absent) or
--         'replace'
-- ARGV[10] priority (an integer; absent or 0: the schedule, else <prio>, see _priority.lua)
-- ARGV[11] group (absent: none; else the task waits in its group's queue, see _groups.lua)
-- (The last three and KEYS[5] are left out of a plain send: every argument costs Redis a string.)
-- Returns: {1, due_ms} stored | {0, due_ms or 0 when reserved} id already delayed/ready/reserved,
--   kept | {2, due_ms} replaced: the delayed or ready task now has the new body, due time and
--   options, as if newly sent (attempts 0, last error cleared) | {3, 0} not replaced: reserved
--   (running) | {-1, now_ms} time too far in the past
-- Also counts the task in <prefix>meta (see _layout.lua).
--@include _envelope
--@include _layout
--@include _priority
--@include _groups
--@include _replace
local prefix, wheel, dead, errors, reserved = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local id, mode, value = ARGV[1], ARGV[2], tonumber(ARGV[3])
local max_attempts, ttr, body = ARGV[4], ARGV[5], ARGV[6]
local tolerance, channel, replace = tonumber(ARGV[7]), ARGV[8], ARGV[9] == 'replace'
local priority, group = tonumber(ARGV[10]) or 0, ARGV[11]
local suffix, pk = '', nil  -- the header's suffix and keys, for a task with a priority only
if priority ~= 0 then
  suffix, pk = prio().suffix(priority), prio_keys(prefix)
end
local gk = nil  -- a grouped task's keys (_groups.lua)
if group then
  suffix, gk = suffix .. ',g' .. group, grp().keys(prefix)
end

local bad = load_buckets(prefix)
if bad then
  return bad
end
local now = now_ms()
local due = due_time(now, mode, value, tolerance)
if not due then
  return { -1, now }
end
if priority ~= 0 then
  bad = check_types({ [pk.index] = 'zset', [pk.ready] = 'zset', [pk.mark] = 'string' })
  if bad then
    return bad
  end
end
if group then
  bad = check_types(grp().kinds(gk, { [grp().queue(gk, group)] = 'zset' }))
  if bad then
    return bad
  end
end

-- Schedule the task: in the schedule (priority 0) or among the priority tasks, waking the
-- workers when it is now the earliest.  Returns how many entries the schedule gained.
local function schedule()
  if group then
    wake_if_earliest(grp().add(gk, group, { due, grp().member(id, priority) }), channel, due)
    return 0
  end
  if priority == 0 then
    wake_if_earliest(schedule_add(prefix, wheel, { due, id }), channel, due)
    return 1
  end
  wake_if_earliest(prio().add(pk, id, due, priority), channel, due)
  return 0
end

local function stored_header()
  return new_header(max_attempts, ttr, int_text(now), int_text(due)) .. suffix
end

-- No TYPE checks on the common path (each redis.call costs microseconds, and a send is the
-- hottest script): every key a new send writes is read first (bucket by HGET, wheel and slot
-- by schedule_add), or written first (the slot counter), so a key of the wrong type fails
-- the call before anything changed.  `dead` and `errors` are only touched for a known id.
local header = read_header(prefix, id)
if header then
  pk = pk or prio_keys(prefix)
  bad = check_types(grp().kinds(grp().keys(prefix), { [dead] = 'zset', [errors] = 'hash',
    [meta_key(prefix)] = 'hash', [pk.index] = 'zset', [pk.ready] = 'zset',
    [reserved or dead] = 'zset' }))
  if bad then
    return bad
  end
  if not redis.call('ZSCORE', dead, id) then
    local e = parse_header(header)
    local slot, waiting = waiting_place(prefix, wheel, pk, id, e)
    if not replace then
      return { 0, waiting and e.due or 0 }
    end
    if redis.call('ZSCORE', reserved, id) then
      return { 3, 0 }  -- running somewhere: a replacement would race its ack
    end
    -- Waiting (or a header without a schedule entry): the task is replaced whole
    -- (_replace.lua), as reschedule.lua moves one, its slots checked first.
    bad = check_slots(prefix, wheel, due, due)
    if bad then
      return bad
    end
    local removed = unwait(prefix, wheel, pk, id, e, slot, waiting)
    schedule_changed(prefix, wheel, schedule() - removed)
    redis.call('HDEL', errors, id)
    redis.call('HSET', bucket_of(prefix, id), id, stored_header(), body_field(id), body)
    return { 2, due }
  end
end

-- A new task landing in a full bucket splits one (its keys checked before the first write).
local split = not header and bucket_full(prefix, id, body)
if split then
  check_splits(prefix, 1)
end
-- Read before the first write, so that a meta key of the wrong type fails the call
-- before anything changed; the count goes up after the schedule's writes.
redis.call('HGET', meta_key(prefix), 'scheduled')
if priority == 0 and not group then
  wake_if_earliest(schedule_add(prefix, wheel, { due, id }), channel, due)
  schedule_changed(prefix, wheel, 1)
else
  schedule()
end
if split then
  split_bucket(prefix)
end
if header then
  -- A dead task's id is free again: the new send replaces the dead letter.
  redis.call('HDEL', errors, id)
  redis.call('ZREM', dead, id)
end
redis.call('HSET', bucket_of(prefix, id), id,
  new_header(max_attempts, ttr, int_text(now), int_text(due)) .. suffix,
  body_field(id), body)
return { 1, due }
