-- _envelope.lua: helpers inlined by the loader into every script that reads a task.
-- A task's header (see _layout.lua for where it is stored) is one string:
--   "<attempts>,<token>,<max_attempts>,<ttr_ms>,<enqueued_ms>,<due_ms>"
-- and, for a task sent with a priority other than 0 only, ",p<priority>" after it (so a
-- task without one costs no byte more; a body never starts with 'p', so the envelope
-- "header,body" stays unambiguous); then, for a task of a group only (_groups.lua),
-- ",g<group>" (the group is the rest of the header: it holds no comma, and a body never
-- starts with 'g').
-- max_attempts and ttr_ms are 0 when the task uses its topic's defaults; the caller then
-- passes the consuming worker's defaults in ARGV.  The body is stored apart, so a script
-- rewrites attempts/token/due without ever reading or decoding the body.

-- A topic's time is Redis's TIME plus clock_offset: the milliseconds a test clock
-- (delayq.testing.run_due) moved it on, kept in <prefix>clock.  Production scripts read no
-- such key (READ_CLOCK is false, the offset the constant 0), so they cost and return what
-- they did before test clocks existed.  A process with a test clock runs copies of the
-- scripts in which the loader set READ_CLOCK to true (delayq/redis/scripts.py); in those,
-- the offset stays nil until the script reads it (load_buckets, or load_clock), so that
-- now_ms() in a script that forgot to fails loudly instead of reading the real time.
local READ_CLOCK = false
local clock_offset = not READ_CLOCK and 0 or nil

-- Read the topic's clock offset from `key` (<prefix>clock; absent: 0); an error reply when
-- it holds anything but a whole number.
local function load_clock(key)
  local raw = redis.call('GET', key)
  clock_offset = 0
  if raw then
    clock_offset = tonumber(raw)
    if not clock_offset or clock_offset ~= math.floor(clock_offset) then
      clock_offset = nil
      return redis.error_reply('ERR delayq key ' .. key .. ' holds "' .. raw .. '", not a clock offset')
    end
  end
  return nil
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + clock_offset
end

-- Returns a table of the header fields, or nil for an unreadable string.
-- `group` is nil for a task of no group.
local function parse_header(raw)
  local attempts, token, max_attempts, ttr, enqueued, due =
    string.match(raw, '^(%d+),(%d+),(%d+),(%d+),(%d+),(%d+)$')
  local priority, group = '0', nil
  if not attempts then
    local rest
    attempts, token, max_attempts, ttr, enqueued, due, rest =
      string.match(raw, '^(%d+),(%d+),(%d+),(%d+),(%d+),(%d+),(.+)$')
    if not attempts then
      return nil
    end
    local p, g = string.match(rest, '^p(%-?%d+)$'), nil
    if not p then
      p, g = string.match(rest, '^p(%-?%d+),g([^,]*)$')
      if not p then
        g = string.match(rest, '^g([^,]*)$')
        if not g then
          return nil
        end
      end
    end
    priority, group = p or '0', g
  end
  return {
    attempts = tonumber(attempts), token = token, max_attempts = tonumber(max_attempts),
    ttr = tonumber(ttr), enqueued = enqueued, due = tonumber(due), priority = tonumber(priority),
    group = group,
  }
end

-- string.format('%d') and not tostring: Lua prints numbers with %.14g, which turns a token
-- of 10^14 into '1e+14'.
local function format_header(e)
  local header = string.format('%d,%d,%d,%d,%s,%d', e.attempts, e.token, e.max_attempts, e.ttr,
    e.enqueued, e.due)
  if e.priority ~= 0 then
    header = header .. string.format(',p%d', e.priority)
  end
  if e.group then
    header = header .. ',g' .. e.group
  end
  return header
end

-- The two per-task steps of a worker's cycle, leasing in reserve.lua and checking the token
-- in ack.lua, match the header string directly: parse_header's table and format_header
-- cost them several microseconds per task.

-- The lease token of a header, or nil for an unreadable header.  (A header with a priority
-- or a group takes a later match: a task without one pays nothing for it; a grouped one
-- is told by a plain find of ",g", which no other header holds, and matched once.)
-- The token of a header known to hold a group (its caller found ",g" in it).
local function grouped_header_token(raw)
  return string.match(raw, '^%d+,(%d+),%d+,%d+,%d+,%d+,g[^,]*$')
    or string.match(raw, '^%d+,(%d+),%d+,%d+,%d+,%d+,p%-?%d+,g[^,]*$')
end

local function header_token(raw)
  local token = string.match(raw, '^%d+,(%d+),%d+,%d+,%d+,%d+$')
  if token then
    return token
  end
  if not string.find(raw, ',g', 1, true) then
    return string.match(raw, '^%d+,(%d+),%d+,%d+,%d+,%d+,p%-?%d+$')
  end
  return grouped_header_token(raw)
end

-- The group of a header (nil: none): what follows ",g", which only a group's suffix holds.
local function header_group(raw)
  local at = string.find(raw, ',g', 1, true)
  return at and string.sub(raw, at + 2)
end

-- The header of a task being leased (attempts + 1, fencing token `token`) and its ttr ms
-- (0 = topic default), or nil for an unreadable header.  `grouped`: the caller knows the
-- task has a group (it took it from its group), so the forms without one are not tried.
local function leased_header(raw, token, grouped)
  local attempts, rest, ttr
  if not grouped then
    attempts, rest, ttr = string.match(raw, '^(%d+),%d+,(%d+,(%d+),%d+,%d+)$')
    if not attempts and not string.find(raw, ',g', 1, true) then
      attempts, rest, ttr = string.match(raw, '^(%d+),%d+,(%d+,(%d+),%d+,%d+,p%-?%d+)$')
      grouped = false
    end
  end
  if not attempts and grouped ~= false then
    attempts, rest, ttr = string.match(raw, '^(%d+),%d+,(%d+,(%d+),%d+,%d+,g[^,]*)$')
    if not attempts then
      attempts, rest, ttr = string.match(raw, '^(%d+),%d+,(%d+,(%d+),%d+,%d+,p%-?%d+,g[^,]*)$')
    end
  end
  if not attempts then
    return nil
  end
  return string.format('%d,%d,', attempts + 1, token) .. rest, tonumber(ttr)
end

-- The decimal text of an integral number of ms.  Lua turns a number into text with '%.14g'
-- wherever a string is needed (a redis.call argument, a concatenation), and glibc formats
-- that in multi-precision arithmetic: 0.28 us a number here, against 0.11 us for '%d'.
-- Scripts that write many numbers reuse the text of repeated ones (see text_of_last).
local function int_text(n)
  return string.format('%d', n)
end

-- A formatter that remembers the last number it formatted: a batch of tasks sent with one
-- delay, or leased with one ttr, formats its due time or lease deadline once.
local function text_of_last()
  local last, text = nil, nil
  return function(n)
    if n ~= last then
      last, text = n, int_text(n)
    end
    return text
  end
end

-- The header of a task not yet attempted.  max_attempts and ttr are the caller's decimal
-- strings, `now_text` and `due_text` decimal ms.  One concatenation: building a table for
-- table.concat cost a send_many a quarter of its Redis time per task.
local function new_header(max_attempts, ttr, now_text, due_text)
  return '0,0,' .. max_attempts .. ',' .. ttr .. ',' .. now_text .. ',' .. due_text
end

-- Scripts check key types before their first write: Redis does not roll a script back
-- when a later command fails (e.g. WRONGTYPE on a key garbled by hand), so a failure must
-- come before anything changed.  `kinds` maps key name -> expected TYPE.
local function check_types(kinds)
  for key, kind in pairs(kinds) do
    local found = redis.call('TYPE', key)['ok']
    if found ~= 'none' and found ~= kind then
      return redis.error_reply('WRONGTYPE delayq key ' .. key .. ' holds a ' .. found .. ', not a ' .. kind)
    end
  end
  return nil
end

-- The due time in ms for a delay (mode 'd') or an absolute Unix time (mode 'a') in ms, or
-- nil when the absolute time lies more than `tolerance` ms before `now` (a time in the
-- near past is due at once: the caller's clock may trail Redis's a little).
local function due_time(now, mode, value, tolerance)
  if mode ~= 'a' then
    return now + value
  end
  if value < now - tolerance then
    return nil
  end
  return math.max(value, now)
end

-- Publish on a wake channel.  A channel passed as '!name' (a queue on a Redis Cluster) is
-- published with SPUBLISH: sharded pub/sub keeps the message on the shard that owns the
-- channel's slot, which is this script's (the channel carries the topic's hash tag).
local function publish(channel, message)
  if string.byte(channel, 1) == 33 then
    redis.call('SPUBLISH', string.sub(channel, 2), message)
  else
    redis.call('PUBLISH', channel, message)
  end
end

-- Publish a wake-up only when schedule_add reports that what it scheduled became the
-- earliest moment a worker must act on, so a busy topic costs no PUBLISH per task.  (Redis
-- delivers a script's messages after the script, so where this runs in it does not matter.)
local function wake_if_earliest(earliest, channel, due)
  if earliest then
    publish(channel, due)
  end
end
