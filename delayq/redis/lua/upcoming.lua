#!lua flags=no-writes
-- upcoming.lua: a page of the schedule (delayed and ready tasks) in the order they fall due.
-- KEYS[1] prefix of the task buckets and schedule slots (see _layout.lua)
-- KEYS[2] wheel (ZSET slot -> bound ms)
-- ARGV[1] most tasks to return
-- ARGV[2] cursor: due ms of the last task of the previous page ('' for the first page)
-- ARGV[3] cursor: id of that task
-- Returns: {now_ms, more, id1, due1, header1, id2, due2, header2, ...}
--   more: 1 when more tasks follow the last one returned, else 0; header: the task's header
--   ("attempts,token,max,ttr,enqueued,due"), false when the task is missing from its bucket.
-- The schedule's order is the wheel's (slot bound, then slot name) and, in a slot, due time
-- then id.  The page starts right after the cursor's task when it is still scheduled there;
-- when it is not (it ran, was cancelled or rescheduled since), after its due time.
-- Tasks with a priority wait in <prio>, and grouped tasks in <grp:all> (_groups.lua), not
-- in the schedule: their entries after the cursor are merged in, in (due time, id) order.  A cursor task not found in the schedule (one
-- with a priority, or one gone since) is placed by (due time, id) there too: schedule
-- entries due at that same millisecond are listed when their id sorts after it.
-- Cost: finding the cursor (as get.lua finds a task), then ARGV[1] + 1 entries read in order
-- from each, and one header per task returned; never a walk of the whole schedule.
--@include _envelope
--@include _layout
local prefix, wheel = KEYS[1], KEYS[2]
local prio = prio_keys(prefix).index  -- id -> due ms: the waiting tasks with a priority
local limit = tonumber(ARGV[1])
local after_due, after_id = tonumber(ARGV[2]), ARGV[3]
local bad = load_buckets(prefix)
if bad then
  return bad
end

-- The last entry's due time of the slot at `rank` of the wheel (nil when none).
local function last_due(rank)
  local n = redis.call('ZRANGE', wheel, rank, rank)[1]
  local last = n and redis.call('ZRANGE', slot_key(prefix, n), -1, -1, 'WITHSCORES')
  return last and tonumber(last[2])
end

-- Where the page starts: the wheel rank of its first slot, and in that slot either the rank
-- of the first entry (>= 0) or -1 for "the first entry due after the cursor's due time".
local function start()
  if not after_due then
    return 0, 0
  end
  local n = slot_of(prefix, wheel, after_id, after_due)
  if n then
    return redis.call('ZRANK', wheel, n), redis.call('ZRANK', slot_key(prefix, n), after_id) + 1
  end
  -- Binary search of the first slot whose last entry is due after the cursor: among the
  -- slots whose bound is at most the cursor's due time, from the last one below it (every
  -- slot after these has a later bound, so later entries).
  local lo = math.max(redis.call('ZCOUNT', wheel, '-inf', '(' .. int_text(after_due)) - 1, 0)
  local hi = redis.call('ZCOUNT', wheel, '-inf', int_text(after_due))
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    local due = last_due(mid)
    if due and due > after_due then
      hi = mid
    else
      lo = mid + 1
    end
  end
  return lo, -1
end

local wanted = limit + 1  -- one more than shown tells whether more follow
local entries = {}
local rank, from = start()
if from < 0 then
  -- The entries due at the cursor's very millisecond whose id sorts after it: in the
  -- slots whose bound is that time, and in the last one before them (as slot_of looks).
  local tied = {}
  local page = redis.call('ZRANGE', wheel, after_due, '-inf', 'BYSCORE', 'REV', 'LIMIT', 0, 16,
    'WITHSCORES')
  for i = 1, #page, 2 do
    for _, id in ipairs(redis.call('ZRANGE', slot_key(prefix, page[i]), after_due, after_due,
        'BYSCORE')) do
      if id > after_id then
        tied[#tied + 1] = id
      end
    end
    if tonumber(page[i + 1]) < after_due then
      break
    end
  end
  table.sort(tied)
  for _, id in ipairs(tied) do
    entries[#entries + 1] = id
    entries[#entries + 1] = int_text(after_due)
  end
end
while #entries < wanted * 2 do
  local names = redis.call('ZRANGE', wheel, rank, rank + 15)
  if #names == 0 then
    break
  end
  for _, n in ipairs(names) do
    local key, need = slot_key(prefix, n), wanted - #entries / 2
    local got
    if from >= 0 then
      got = redis.call('ZRANGE', key, from, from + need - 1, 'WITHSCORES')
    else
      got = redis.call('ZRANGE', key, '(' .. int_text(after_due), '+inf', 'BYSCORE', 'LIMIT', 0,
        need, 'WITHSCORES')
    end
    from = 0
    for i = 1, #got do
      entries[#entries + 1] = got[i]
    end
    if #entries >= wanted * 2 then
      break
    end
  end
  rank = rank + #names
end

-- The tasks of sorted set `key` (id -> due) after the cursor, in (due, id) order: a sorted
-- set orders members of one score by name, which is the id.
local function after_cursor(key)
  local others = {}
  if after_due then
    local tied = redis.call('ZRANGE', key, after_due, after_due, 'BYSCORE', 'WITHSCORES')
    for j = 1, #tied, 2 do
      if tied[j] > after_id then
        others[#others + 1] = tied[j]
        others[#others + 1] = tied[j + 1]
      end
    end
    for _, v in ipairs(redis.call('ZRANGE', key, '(' .. int_text(after_due), '+inf', 'BYSCORE',
        'LIMIT', 0, wanted, 'WITHSCORES')) do
      others[#others + 1] = v
    end
  else
    others = redis.call('ZRANGE', key, 0, wanted - 1, 'WITHSCORES')
  end
  return others
end

-- Merge two lists {id, due, ...}, each in (due, id) order.
local function merge(entries, others)
  local merged, a, b = {}, 1, 1
  while #merged < wanted * 2 and (a <= #entries or b <= #others) do
    local take_a = b > #others or (a <= #entries and (tonumber(entries[a + 1]) < tonumber(others[b + 1])
      or (tonumber(entries[a + 1]) == tonumber(others[b + 1]) and entries[a] < others[b])))
    if take_a then
      merged[#merged + 1], merged[#merged + 2] = entries[a], entries[a + 1]
      a = a + 2
    else
      merged[#merged + 1], merged[#merged + 2] = others[b], others[b + 1]
      b = b + 2
    end
  end
  return merged
end

local merged = merge(merge(entries, after_cursor(prio)), after_cursor(prefix .. 'grp:all'))

local out = { now_ms(), #merged > limit * 2 and 1 or 0 }
for i = 1, math.min(#merged, limit * 2), 2 do
  local id = merged[i]
  out[#out + 1] = id
  out[#out + 1] = merged[i + 1]
  out[#out + 1] = read_header(prefix, id) or false
end
return out
