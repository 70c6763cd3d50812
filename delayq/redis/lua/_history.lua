-- _history.lua: a topic's finished tasks (acked, dead-lettered, cancelled), kept as records
-- in the stream <prefix>history when the topic keeps history (docs/observability.md).
-- One stream entry per script call holds the records of that call, field = task id,
-- value = the record:
--   "<outcome>,<attempts>,<token>,<max>,<ttr>,<enqueued>,<due>,<started>,<finished>,<n>,<error><body>"
-- the task's header as stored, the handler's start and end (Redis ms, empty when it never
-- ran), the error's length in bytes and the error, then the body field as stored (headers
-- included).  Records are numbered in <prefix>meta's field history_seq; an entry's ID is
-- "<number of its first record>-0", so trimming by MINID keeps the last `cap` records
-- (give or take one entry) and the numbers are unique keys for an archive.

local HISTORY_ENTRY_MAX = 4000  -- records one call may add (ack.lua: 2,000 a call)

local function history_key(prefix)
  return prefix .. 'history'
end

-- `times` is "<started>,<ended>" (Redis ms); an empty end (",", "<started>,") is now.
local history_now
local function history_record(outcome, header, times, err, body)
  if string.sub(times, -1) == ',' then
    history_now = history_now or int_text(now_ms())
    times = times .. history_now
  end
  return outcome .. ',' .. header .. ',' .. times .. ',' .. #err .. ',' .. err .. (body or '')
end

-- Append {id1, record1, id2, record2, ...} as one entry, keeping about `cap` records.
-- Callers check the stream's and the meta hash's types before their first write.
local function history_add(prefix, cap, records)
  local n = #records / 2
  if cap <= 0 or n == 0 then
    return
  end
  local meta, key = meta_key(prefix), history_key(prefix)
  local last = redis.call('HINCRBY', meta, 'history_seq', n)
  local added = redis.pcall('XADD', key, 'MINID', string.format('%d', math.max(last - cap + 1, 0)),
    string.format('%d-0', last - n + 1), unpack(records))
  if type(added) == 'table' and added.err then
    -- The numbers fell behind the stream's last ID (the meta hash was deleted by hand):
    -- continue after the last entry's records, or, when that entry is gone (XDEL), past
    -- any number it could have held (at most HISTORY_ENTRY_MAX records an entry).
    local info, newest = redis.call('XINFO', 'STREAM', key), nil
    for i = 1, #info, 2 do
      if info[i] == 'last-generated-id' then
        newest = info[i + 1]
      end
    end
    local top = redis.call('XREVRANGE', key, '+', '-', 'COUNT', 1)[1]
    local held = (top and top[1] == newest) and #top[2] / 2 or HISTORY_ENTRY_MAX + 1
    last = tonumber(string.match(newest, '^(%d+)')) + held - 1 + n
    redis.call('HSET', meta, 'history_seq', last)
    redis.call('XADD', key, 'MINID', string.format('%d', math.max(last - cap + 1, 0)),
      string.format('%d-0', last - n + 1), unpack(records))
  end
end

-- The key types a script that may write history checks before its first write.
local function history_kinds(prefix, cap, kinds)
  if cap > 0 then
    kinds[history_key(prefix)] = 'stream'
    kinds[meta_key(prefix)] = 'hash'
  end
  return kinds
end
