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
-- Cost: finding the cursor (as get.lua finds a task), then ARGV[1] + 1 entries read in order
-- and one header per task returned; never a walk of the whole schedule.
--@include _envelope
--@include _layout
local prefix, wheel = KEYS[1], KEYS[2]
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

local out = { now_ms(), #entries > limit * 2 and 1 or 0 }
for i = 1, math.min(#entries, limit * 2), 2 do
  local id = entries[i]
  out[#out + 1] = id
  out[#out + 1] = entries[i + 1]
  out[#out + 1] = read_header(prefix, id) or false
end
return out
