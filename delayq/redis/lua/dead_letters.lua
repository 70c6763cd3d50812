#!lua flags=no-writes
-- dead_letters.lua: page through a topic's dead letters, oldest first.
-- KEYS[1] prefix of the task buckets (see _layout.lua)   KEYS[2] dead (ZSET id -> died ms)
-- KEYS[3] errors (HASH)
-- ARGV[1] offset   ARGV[2] limit
-- Returns: {now_ms, id1, envelope1, error1, died_ms1, ...} (envelope/error false when missing)
--@include _envelope
--@include _layout
--@include _page
return task_page(function()
  return { now_ms() }
end, function(dead, offset, limit)
  return redis.call('ZRANGE', dead, offset, offset + limit - 1, 'WITHSCORES')
end)
