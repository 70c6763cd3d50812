#!lua flags=no-writes
-- running.lua: page through a topic's reserved (leased) tasks, soonest lease deadline first.
-- KEYS[1] prefix of the task buckets (see _layout.lua)
-- KEYS[2] reserved (ZSET id -> lease deadline ms, plus the pin member at +inf)
-- KEYS[3] errors (HASH)
-- ARGV[1] offset   ARGV[2] limit
-- Returns: {now_ms, total, id1, envelope1, error1, deadline_ms1, ...} (envelope/error false
--   when missing); a deadline before now_ms is a lease that expired and is not yet reclaimed
--@include _envelope
--@include _layout
--@include _page
return task_page(function(reserved)
  return { now_ms(), lease_count(reserved) }
end, function(reserved, offset, limit)
  return redis.call('ZRANGE', reserved, '-inf', '(inf', 'BYSCORE', 'LIMIT', offset, limit, 'WITHSCORES')
end)
