#!lua flags=allow-oom
-- shards.lua: read a topic's recorded shard count, or change it if it is still what the
-- caller saw (docs/cluster.md, "Changing a topic's shard count").
-- KEYS[1] meta (HASH) of the topic's shard 0: field shards (absent: 1)
-- ARGV[1] (optional) the count the caller read; ARGV[2] the count to record (1 deletes the
--         field, so that an unsharded topic keeps exactly its plain layout)
-- Returns: the count recorded when the script ends
-- The caller checks that no shard holds tasks before it asks for a change; a count that
-- moved since it read (another process) is left alone and returned.
local meta = KEYS[1]
local seen, wanted = ARGV[1], ARGV[2]

local recorded = redis.call('HGET', meta, 'shards') or '1'
if seen == nil or seen ~= recorded then
  return tonumber(recorded)
end
if wanted == '1' then
  redis.call('HDEL', meta, 'shards')
else
  redis.call('HSET', meta, 'shards', wanted)
end
return tonumber(wanted)
