-- _controls.lua: a topic's fleet-wide controls, inlined into reserve.lua, which applies them
-- before it leases (docs/controls.md):
--   <controls>  HASH   paused -> '1' while paused (Queue.pause)
--                      rate_limit -> 'N/s', 'N/m' or 'N/h': at most N leases in any window
--                      of a second, minute or hour, judged on Redis's clock
--                      max_running -> N: at most N of the topic's tasks leased at once
--                      full -> '1' once a worker was turned away by max_running while tasks
--                      were ready: the next script that ends a lease publishes a wake-up
--   <starts>    HASH   the rate limit's recent leases: sub-window number -> leases started
--                      in it, and 'g' -> the sub-window length (ms) they were counted with
-- rate_limit and max_running are what the last worker to start declared (its topic's
-- options); paused is set and cleared by control.lua.

-- The rate limit counts leases in sub-windows of a 20th of its window.  A lease is allowed
-- while the sub-windows that overlap the last window (21 of them: the oldest only partly
-- inside) hold fewer than N, so every window of that length, wherever it starts, holds at
-- most N leases (a sliding window, not only windows aligned to the clock); the price is
-- that a sub-window's leases stay counted up to a sub-window longer than they must, so a
-- limit kept saturated runs at >= 20/21 of N (95%).  Leases are also paced: at most
-- ceil(N / 20) in one sub-window, so a backlog starts evenly (200/s: 10 every 50 ms)
-- rather than in a burst of N each window, which a rate-limited service may refuse.
local RATE_PARTS = 20
local RATE_WINDOW_MS = { s = 1000, m = 60000, h = 3600000 }

-- The controls of a topic whose controls key exists, or nil and an error reply for a field
-- that does not parse (set by hand: better a loud error each call than a silent no-limit).
local function read_controls(controls, starts)
  local bad = check_types({ [controls] = 'hash', [starts] = 'hash' })
  if bad then
    return nil, bad
  end
  local got = redis.call('HMGET', controls, 'paused', 'rate_limit', 'max_running')
  local c = { paused = got[1] ~= false }
  if got[2] then
    local n, unit = string.match(got[2], '^(%d+)/([smh])$')
    c.rate = tonumber(n)
    if not c.rate or c.rate < 1 then
      return nil, redis.error_reply('ERR delayq key ' .. controls .. ' holds rate_limit "'
        .. got[2] .. '", not "N/s", "N/m" or "N/h"')
    end
    c.window = RATE_WINDOW_MS[unit]
  end
  if got[3] then
    c.cap = tonumber(got[3])
    if not c.cap or c.cap < 1 or c.cap ~= math.floor(c.cap) then
      return nil, redis.error_reply('ERR delayq key ' .. controls .. ' holds max_running "'
        .. got[3] .. '", not a positive count')
    end
  end
  return c, nil
end

-- The rate limit's state at `now`: c.used (leases counted in the last window), c.oldest
-- (the oldest sub-window counted, or nil), c.part (the current sub-window's number) and
-- c.current (the leases counted in it).
-- Sub-windows that left the window are deleted, and so are all counts kept with another
-- sub-window length (the limit's unit changed: they cannot be placed in this window).
local function rate_window(c, starts, now)
  local g = c.window / RATE_PARTS
  c.g, c.part, c.used, c.oldest, c.current = g, math.floor(now / g), 0, nil, 0
  c.pace = math.ceil(c.rate / RATE_PARTS)
  local fields = redis.call('HGETALL', starts)
  local kept = false
  for i = 1, #fields, 2 do
    kept = kept or (fields[i] == 'g' and tonumber(fields[i + 1]) == g)
  end
  local stale = {}
  for i = 1, #fields, 2 do
    local n = tonumber(fields[i])
    if fields[i] ~= 'g' then
      if not kept or not n or n < c.part - RATE_PARTS then
        stale[#stale + 1] = fields[i]
      else
        local count = tonumber(fields[i + 1]) or 0
        c.used = c.used + count
        c.oldest = math.min(c.oldest or n, n)
        if n == c.part then
          c.current = count
        end
      end
    end
  end
  if #stale > 0 then
    redis.call('HDEL', starts, unpack(stale))
  end
end

-- Count `k` leases started now; the key expires once its counts are all out of the window.
local function rate_record(c, starts, k)
  if k > 0 then
    redis.call('HINCRBY', starts, c.part, k)
    redis.call('HSET', starts, 'g', c.g)
    redis.call('PEXPIRE', starts, c.window + 2 * c.g)
    c.used, c.current = c.used + k, c.current + k
    c.oldest = math.min(c.oldest or c.part, c.part)
  end
end

-- How many leases the rate limit allows now.
local function rate_allows(c)
  return math.max(math.min(c.rate - c.used, c.pace - c.current), 0)
end

-- When the rate limit next allows a lease, once it allows none: the next sub-window when
-- only the pace held it back, else the end of the window that still counts the oldest
-- sub-window.
local function rate_reopens(c)
  if c.used < c.rate then
    return (c.part + 1) * c.g
  end
  return (c.oldest + RATE_PARTS + 1) * c.g
end

-- How many leases the controls allow now, of `wanted`.  Reads the rate window first (the
-- caller has not written yet when it calls this after its reclaim, or has written only
-- keys checked before), then the leases held.
local function control_quota(c, reserved, starts, now, wanted)
  if c.paused then
    return 0
  end
  local quota = wanted
  if c.rate then
    rate_window(c, starts, now)
    quota = math.min(quota, rate_allows(c))
  end
  if c.cap then
    c.places = math.max(c.cap - lease_count(reserved), 0)
    quota = math.min(quota, c.places)
  end
  return quota
end

-- After leasing `k` tasks under controls `c`: record them, and return the earliest time
-- the controls let the topic's ready tasks (if `ready` says some remain) be leased, or
-- false when only a wake-up can tell (paused, or max_running reached: the next lease to
-- end publishes one, since 'full' is set here).  nil: the controls hold nothing back.
local function control_after(c, controls, starts, k, ready)
  if c.paused then
    return false
  end
  local reopens = nil
  if c.rate then
    rate_record(c, starts, k)
    if rate_allows(c) == 0 then
      reopens = rate_reopens(c)
    end
  end
  if c.cap and c.places - k <= 0 and ready then
    redis.call('HSET', controls, 'full', 1)
    return false
  end
  return reopens
end

-- A lease ended (nack.lua; ack.lua does the same in two steps): if a worker waits for a
-- place under max_running, wake the topic's workers.  One HDEL a call (on an absent key
-- for a topic without controls).
local function place_freed(controls, channel)
  if redis.call('HDEL', controls, 'full') == 1 then
    publish(channel, 0)
  end
end
