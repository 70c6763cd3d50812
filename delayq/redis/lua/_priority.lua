-- _priority.lua: where tasks with a priority other than 0 wait, inlined by the loader into
-- every script that adds, finds or removes a waiting task.  A task of priority 0 (all but a
-- few) waits in the schedule (_layout.lua) as before: nothing here costs it anything.
--   <prio>        ZSET id -> due ms: every waiting (delayed or ready) task with a priority
--   <prio:ready>  ZSET -priority -> "<due ms, 13 digits><id>": the tasks of <prio> due by
--                 <prio:mark>, in lease order (highest priority, then earliest due, then id)
--   <prio:mark>   STRING ms: every entry of <prio> due at or before it is in <prio:ready>
-- reserve.lua moves the entries of <prio> that came due since the mark into <prio:ready>
-- (promote), then leases from <prio:ready> and the schedule in priority order.  The index
-- <prio> keeps every waiting priority task in due order, so get, stats, upcoming and
-- timeline read it as they read the schedule.  A priority task costs two sorted-set
-- entries (~130 bytes) where one of priority 0 costs ~22 in a schedule slot.
-- `pk` below is {index = <prio>, ready = <prio:ready>, mark = <prio:mark>}.

local PROMOTE_MAX = 1000  -- entries promoted per call (bounds the script's run time)
local priority_helpers = nil

-- The helpers, defined on first use: a call that meets no priority task (most calls of
-- send.lua) does not pay for defining them (~0.9 us a call, measured).
local function prio()
  if priority_helpers then
    return priority_helpers
  end
  local M = {}

  -- The header suffix that stores a priority: none for 0, so that the task of priority 0
  -- costs no byte more (see _envelope.lua's parse_header).
  function M.suffix(priority)
    if priority == 0 then
      return ''
    end
    return ',p' .. int_text(priority)
  end

  function M.ready_member(due, id)
    return string.format('%013d', due) .. id
  end

  function M.mark(pk)
    return tonumber(redis.call('GET', pk.mark)) or -1
  end

  -- Waiting tasks of priority `priority` (not 0): entries {due1, id1, due2, id2, ...}.
  -- Returns whether one of them is now the earliest priority task (then a waiting worker may
  -- need waking).  Reads before it writes, so a key of the wrong type fails it first.
  function M.add_many(pk, entries, priority)
    local mark = M.mark(pk)
    local head = tonumber(redis.call('ZRANGE', pk.index, 0, 0, 'WITHSCORES')[2])
    local ready, earliest = {}, nil
    for i = 1, #entries, 2 do
      local due = entries[i]
      earliest = math.min(earliest or due, due)
      if due <= mark then
        ready[#ready + 1] = -priority
        ready[#ready + 1] = M.ready_member(due, entries[i + 1])
      end
    end
    for i = 1, #entries, 2000 do
      redis.call('ZADD', pk.index, unpack(entries, i, math.min(i + 1999, #entries)))
    end
    for i = 1, #ready, 2000 do
      redis.call('ZADD', pk.ready, unpack(ready, i, math.min(i + 1999, #ready)))
    end
    return earliest ~= nil and (head == nil or earliest < head)
  end

  function M.add(pk, id, due, priority)
    return M.add_many(pk, { due, id }, priority)
  end

  -- Remove a waiting priority task (its header's due and priority); returns whether it was
  -- waiting.
  function M.remove(pk, id, due, priority)
    if redis.call('ZREM', pk.index, id) == 0 then
      return false
    end
    redis.call('ZREM', pk.ready, M.ready_member(due, id))
    return true
  end

  -- The due time of a waiting priority task, or nil.
  function M.due(pk, id)
    return tonumber(redis.call('ZSCORE', pk.index, id))
  end

  -- The earliest due time among waiting priority tasks, or nil.
  function M.head(pk)
    return tonumber(redis.call('ZRANGE', pk.index, 0, 0, 'WITHSCORES')[2])
  end

  -- Move the priority tasks that came due by `now` into the lease order.  `priority_of(id)`
  -- reads a task's priority (nil: its header is missing or unreadable, and the entry is left
  -- for the caller, which finds it in `unusable`).  Returns whether every due entry was moved:
  -- about PROMOTE_MAX are a call, and until all are, no lease may pass them over.
  function M.promote(pk, now, priority_of)
    local mark = M.mark(pk)
    if mark >= now then
      return true, {}
    end
    local due = redis.call('ZRANGE', pk.index, '(' .. int_text(mark), now, 'BYSCORE', 'LIMIT', 0,
      PROMOTE_MAX, 'WITHSCORES')
    local complete = #due < 2 * PROMOTE_MAX
    if not complete then
      -- Cut short: the mark can only move past whole due times, so the call takes all the
      -- tasks due at the last time it reached (a send_many batch shares one), however many.
      local last = tonumber(due[#due])
      while #due > 0 and tonumber(due[#due]) == last do
        due[#due], due[#due - 1] = nil, nil
      end
      for _, v in ipairs(redis.call('ZRANGE', pk.index, last, last, 'BYSCORE', 'WITHSCORES')) do
        due[#due + 1] = v
      end
      now = last
    end
    local entries, unusable = {}, {}
    for i = 1, #due, 2 do
      local priority = priority_of(due[i])
      if priority then
        entries[#entries + 1] = -priority
        entries[#entries + 1] = M.ready_member(tonumber(due[i + 1]), due[i])
      else
        unusable[#unusable + 1] = due[i]
      end
    end
    for i = 1, #entries, 2000 do
      redis.call('ZADD', pk.ready, unpack(entries, i, math.min(i + 1999, #entries)))
    end
    redis.call('SET', pk.mark, int_text(now))
    return complete, unusable
  end

  -- Up to `limit` entries of the lease order, {member, id, ...}: those of priority above 0
  -- (`above` true) or below 0.
  function M.ready(pk, above, limit)
    if limit <= 0 then
      return {}
    end
    local lo, hi = '-inf', '(0'
    if not above then
      lo, hi = '(0', '+inf'
    end
    local members = redis.call('ZRANGE', pk.ready, lo, hi, 'BYSCORE', 'LIMIT', 0, limit)
    local out = {}
    for _, member in ipairs(members) do
      out[#out + 1] = member
      out[#out + 1] = string.sub(member, 14)
    end
    return out
  end

  -- Remove entries prio_ready returned (they are being leased or dropped).
  function M.take(pk, picked)
    if #picked == 0 then
      return
    end
    local members, ids = {}, {}
    for i = 1, #picked, 2 do
      members[#members + 1] = picked[i]
      ids[#ids + 1] = picked[i + 1]
    end
    redis.call('ZREM', pk.ready, unpack(members))
    redis.call('ZREM', pk.index, unpack(ids))
  end

  priority_helpers = M
  return M
end
