#!lua flags=no-writes
-- groups.lua: count a grouped topic's tasks per group (Queue.groups).
-- KEYS[1] prefix of the topic's keys (the group keys are built from it: _groups.lua)
-- KEYS[2] controls (HASH, _controls.lua: the per-group cap and rate limit)
-- ARGV[1] most groups to return, those with the most ready tasks (0: every group visited)
-- ARGV[2] most groups to visit
-- Returns: {now_ms, complete, group1, ready1, delayed1, running1, limited1, group2, ...}
--   in order of ready tasks (most first), then name; complete: 0 when groups were left
--   unvisited (more than ARGV[2]), else 1; limited: 1 when the group is at its cap or has
--   used up its rate window now.
-- The groups visited are those of the ring (may lease now), full (at their cap), wait
-- (waiting for a due time or a rate window; soonest first) and run (leases held), in that
-- order, each once.  Each costs a ZCARD and a ZCOUNT of its queue, an HGET of run, a
-- ZSCORE of full and, under a rate limit, a ZCOUNT of its starts: O(log n) a group, so
-- O(groups visited * log n) a call, and a sort of them.
--@include _envelope
-- (include of _groups goes here once the core lands)
-- STAND-IN until the core's _groups.lua lands (names from the planned layout)
local function groups_keys(prefix)
  local p = prefix .. 'grp:'
  return { wait = p .. 'wait', ring = p .. 'ring', run = p .. 'run', full = p .. 'full', starts = p .. 'starts:' }
end
local function group_queue(prefix, name)
  return prefix .. 'grp:q:' .. name
end
local GROUP_WINDOW_MS = { s = 1000, m = 60000, h = 3600000 }
local function read_group_limits(controls)
  local got = redis.call('HMGET', controls, 'max_running_per_group', 'rate_limit_per_group')
  local l = { cap = tonumber(got[1]) }
  if got[2] then
    local n, unit = string.match(got[2], '^(%d+)/([smh])$')
    l.rate, l.window = tonumber(n), GROUP_WINDOW_MS[unit]
  end
  return l, nil
end
local function group_limited(g, l, name, running, now)
  if l.cap and running >= l.cap then
    return true
  end
  if redis.call('ZSCORE', g.full, name) then
    return true
  end
  return l.rate ~= nil and redis.call('ZCOUNT', g.starts .. name, '(' .. (now - l.window), now) >= l.rate
end
local prefix, controls = KEYS[1], KEYS[2]
local most, visit = tonumber(ARGV[1]), tonumber(ARGV[2])
local bad = READ_CLOCK and load_clock(prefix .. 'clock')
if bad then
  return bad
end
local now = now_ms()
local g = groups_keys(prefix)
local limits, bad_limits = read_group_limits(controls)
if bad_limits then
  return bad_limits
end

-- Each index holds a group at most once, so reading one costs at most `visit` entries
-- already taken, plus the first new one past the budget (which tells that some are cut).
local names, seen, cut = {}, {}, false
local function take(name)
  if seen[name] then
    return true
  end
  if #names >= visit then
    cut = true
    return false
  end
  seen[name] = true
  names[#names + 1] = name
  return true
end
local function take_zset(key)
  local offset = 0
  while true do
    local page = redis.call('ZRANGE', key, offset, offset + 127)
    for _, name in ipairs(page) do
      if not take(name) then
        return
      end
    end
    if #page < 128 then
      return
    end
    offset = offset + 128
  end
end
take_zset(g.ring)
take_zset(g.full)
take_zset(g.wait)  -- by the time each may lease next: soonest first
local cursor = '0'
repeat
  local page = redis.call('HSCAN', g.run, cursor, 'COUNT', 128)
  cursor = page[1]
  for i = 1, #page[2], 2 do
    if not take(page[2][i]) then
      cursor = '0'
      break
    end
  end
until cursor == '0'

local rows = {}
for _, name in ipairs(names) do
  local queue = group_queue(prefix, name)
  local waiting = redis.call('ZCARD', queue)
  local ready = waiting > 0 and redis.call('ZCOUNT', queue, '-inf', now) or 0
  local running = tonumber(redis.call('HGET', g.run, name)) or 0
  rows[#rows + 1] = { name, ready, waiting - ready, running,
    group_limited(g, limits, name, running, now) and 1 or 0 }
end
table.sort(rows, function(a, b)
  if a[2] ~= b[2] then
    return a[2] > b[2]
  end
  return a[1] < b[1]
end)
local out = { now, cut and 0 or 1 }
for i = 1, (most > 0 and math.min(most, #rows) or #rows) do
  for _, v in ipairs(rows[i]) do
    out[#out + 1] = v
  end
end
return out
