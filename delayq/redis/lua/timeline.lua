#!lua flags=no-writes
-- timeline.lua: how many tasks fall due in each of ARGV[2] windows of ARGV[1] ms from now.
-- KEYS[1] prefix of the schedule slots (see _layout.lua)   KEYS[2] wheel (ZSET slot -> bound ms)
-- ARGV[1] window length ms   ARGV[2] number of windows
-- ARGV[3] most whole slots counted one by one in a window (beyond, their sizes are sampled)
-- Returns: {now_ms, due, due_estimated, count1, estimated1, count2, estimated2, ...}
--   due: tasks due by now (ready); window i (from 1) counts tasks due in
--   (now + (i-1)*w, now + i*w]; estimated: 1 when the range spans more than ARGV[3] whole
--   slots, whose total was then estimated from ARGV[3] of them, evenly spaced, else 0 (exact).
-- Cost: O(windows * (log(slots) + ARGV[3])) whatever the number of tasks: each range is
-- located in the wheel by rank, its two edge slots counted with ZCOUNT, the slots between
-- (all of whose entries fall in the range) by their sizes; tasks with a priority by one
-- ZCOUNT per range.
--@include _envelope
--@include _layout
local prefix, wheel = KEYS[1], KEYS[2]
local prio = prio_keys(prefix).index  -- id -> due ms: the tasks with a priority
local width, windows, most = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])

local function slot_at_rank(rank)
  return slot_key(prefix, redis.call('ZRANGE', wheel, rank, rank)[1])
end

-- Entries due in (lo, hi]; lo_text/hi_text as ZCOUNT takes them ('-inf' or ms).  A slot holds
-- entries from its bound up to the next slot's bound, so only the last slot whose bound is
-- <= lo and the last one whose bound is <= hi can hold entries outside the range.
local function count(lo_text, hi_text)
  local before = redis.call('ZCOUNT', wheel, '-inf', lo_text)  -- slots with bound <= lo
  local upto = redis.call('ZCOUNT', wheel, '-inf', hi_text)    -- slots with bound <= hi
  local total, estimated = 0, 0
  local range_lo = lo_text == '-inf' and '-inf' or '(' .. lo_text
  if before > 0 then
    total = total + redis.call('ZCOUNT', slot_at_rank(before - 1), range_lo, hi_text)
  end
  if upto > before then
    total = total + redis.call('ZCOUNT', slot_at_rank(upto - 1), range_lo, hi_text)
    local inner = upto - 1 - before  -- ranks before .. upto - 2: wholly inside
    if inner > 0 and inner <= most then
      for _, n in ipairs(redis.call('ZRANGE', wheel, before, upto - 2)) do
        total = total + redis.call('ZCARD', slot_key(prefix, n))
      end
    elseif inner > 0 then
      local sampled = 0
      for j = 0, most - 1 do
        sampled = sampled + redis.call('ZCARD', slot_at_rank(before + math.floor(j * inner / most)))
      end
      total = total + math.floor(sampled * inner / most + 0.5)
      estimated = 1
    end
  end
  return total + redis.call('ZCOUNT', prio, range_lo, hi_text)
    + redis.call('ZCOUNT', prefix .. 'grp:all', range_lo, hi_text), estimated
end

local bad = READ_CLOCK and load_clock(prefix .. 'clock')
if bad then
  return bad
end
local now = now_ms()
local out = { now }
local due, due_estimated = count('-inf', int_text(now))
out[2], out[3] = due, due_estimated
for i = 1, windows do
  local n, e = count(int_text(now + (i - 1) * width), int_text(now + i * width))
  out[#out + 1] = n
  out[#out + 1] = e
end
return out
