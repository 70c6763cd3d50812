#!lua flags=no-writes
-- groups.lua: count a grouped topic's tasks per group (Queue.groups).
-- KEYS[1] prefix of the topic's keys (the group keys are built from it: _groups.lua)
-- KEYS[2] controls (HASH: the per-group cap and rate limit, _groups.lua's settings)
-- ARGV[1] most groups to return: those with the most ready tasks
-- ARGV[2] most groups to visit
-- Returns: {now_ms, complete, group1, ready1, delayed1, running1, limited1, group2, ...}
--   most ready first, then by name; limited: 1 when the group is at its cap, or its rate
--   window allows no lease now; complete: 0 when groups were left unvisited.
-- The groups visited are those of the ring (may lease now), full (at their cap), wait
-- (waiting for a due time or a rate window; soonest first) and run (leases held), in that
-- order, each once, at most ARGV[2]: a ZCOUNT of each group's queue, O(log n), ranks them
-- (a sort of the groups visited); then a ZCARD, an HGET of run and, under
-- rate_limit_per_group, an HGETALL of its rate window (at most 22 fields) for each group
-- returned.  So a call costs O(groups visited * log n) (docs/controls.md, "Seeing groups").
--@include _envelope
--@include _layout
--@include _controls
--@include _groups
local prefix, controls = KEYS[1], KEYS[2]
local most, visit = tonumber(ARGV[1]), tonumber(ARGV[2])
local bad = READ_CLOCK and load_clock(prefix .. 'clock')
if bad then
  return bad
end
local now = now_ms()
local G = grp()
local g = G.keys(prefix)
local s, bad_settings = G.settings(controls)
if bad_settings then
  return bad_settings
end

-- Whether the group's rate window allows no lease now, as reserve.lua would judge it
-- (rate_window and rate_allows of _controls.lua), read without rate_window's clean-up of
-- old sub-windows (this script writes nothing): those are left out of the count instead.
local function out_of_rate(name)
  local fields = redis.call('HGETALL', G.starts(g, name))
  local c = { rate = s.rate, g = s.window / RATE_PARTS, used = 0, current = 0 }
  c.pace, c.part = math.ceil(s.rate / RATE_PARTS), math.floor(now / c.g)
  local kept = false
  for i = 1, #fields, 2 do
    kept = kept or (fields[i] == 'g' and tonumber(fields[i + 1]) == c.g)
  end
  if not kept then
    return false  -- no lease counted with this window length: reserve.lua would drop them
  end
  for i = 1, #fields, 2 do
    local n = tonumber(fields[i])
    if fields[i] ~= 'g' and n and n >= c.part - RATE_PARTS then
      local count = tonumber(fields[i + 1]) or 0
      c.used = c.used + count
      if n == c.part then
        c.current = count
      end
    end
  end
  return rate_allows(c) == 0
end

local function limited(name, running)
  return (s.cap ~= nil and running >= s.cap) or (s.rate ~= nil and out_of_rate(name))
end

-- A group's full row: {name, ready, delayed, running, limited}.
local function row(name)
  local queue = G.queue(g, name)
  local waiting = redis.call('ZCARD', queue)
  local ready = waiting > 0 and redis.call('ZCOUNT', queue, '-inf', now) or 0
  local running = tonumber(redis.call('HGET', g.run, name)) or 0
  return { name, ready, waiting - ready, running, limited(name, running) and 1 or 0 }
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

-- Rank by ready tasks (most first), then name: one ZCOUNT a group, and a sort of strings
-- that carry both (Lua's own comparison: no comparator call per step).
local ranked = {}
for i, name in ipairs(names) do
  local ready = redis.call('ZCOUNT', G.queue(g, name), '-inf', now)
  ranked[i] = string.format('%012d', 999999999999 - ready) .. name
end
table.sort(ranked)
-- A group that holds no task, waiting or running, is left out: it may still sit in an
-- index (e.g. in wait until its rate window reopens), but it is no longer a group to show.
local out, shown = { now, cut and 0 or 1 }, 0
for i = 1, #ranked do
  if shown >= most then
    break
  end
  local r = row(string.sub(ranked[i], 13))
  if r[2] + r[3] + r[4] > 0 then
    shown = shown + 1
    for _, v in ipairs(r) do
      out[#out + 1] = v
    end
  end
end
return out
