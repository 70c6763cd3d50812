-- archived.lua: move a SQL destination's archive cursor of one topic (shard) forward, after
-- the destination committed the records up to it.
-- KEYS[1] the topic's archive cursors (HASH destination -> seq of the last record it holds)
-- ARGV[1] the destination's name   ARGV[2] seq of the last record it committed
-- Returns: the cursor after the call.  It never moves back, so an archiver that stalled
-- (a slow transaction) cannot make a newer one copy records again.
local cursors = KEYS[1]
local destination, seq = ARGV[1], tonumber(ARGV[2])
local kind = redis.call('TYPE', cursors)['ok']
if kind ~= 'none' and kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE delayq key ' .. cursors .. ' holds a ' .. kind .. ', not a hash')
end
local held = tonumber(redis.call('HGET', cursors, destination) or '0')
if seq > held then
  redis.call('HSET', cursors, destination, string.format('%d', seq))
  return seq
end
return held
