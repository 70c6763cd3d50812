-- _page.lua: one page of a listing of tasks (dead_letters.lua, running.lua), inlined by the
-- loader after _envelope.lua and _layout.lua.  Such a script takes
--   KEYS[1] prefix of the task buckets   KEYS[2] the ZSET it pages through (id -> ms)
--   KEYS[3] errors (HASH)   ARGV[1] offset   ARGV[2] limit
-- and replies {<head>..., id1, envelope1, error1, score1, ...} (envelope/error false when
-- missing).  `head(listing)` gives the reply's first values (read after the bucket count
-- and the test clock, so now_ms() is the topic's time); `range(listing, offset, limit)` the
-- page, a ZRANGE ... WITHSCORES reply.
local function task_page(head, range)
  local prefix, listing, errors = KEYS[1], KEYS[2], KEYS[3]
  local offset, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
  local bad = load_buckets(prefix)
  if bad then
    return bad
  end
  local out = head(listing)
  local page = range(listing, offset, limit)
  for i = 1, #page, 2 do
    local id = page[i]
    local header, body = read_task(prefix, id)
    out[#out + 1] = id
    out[#out + 1] = header and joined(header, body)
    out[#out + 1] = redis.call('HGET', errors, id)
    out[#out + 1] = page[i + 1]
  end
  return out
end
