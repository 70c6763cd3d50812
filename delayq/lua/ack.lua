#!lua
-- ack.lua: finish a batch of leased tasks (delete them), each only if its lease token still matches.
-- KEYS[1] reserved (ZSET)   KEYS[2] tasks (HASH)   KEYS[3] errors (HASH)
-- ARGV: id1, token1, id2, token2, ...
-- Returns: {r1, r2, ...} with 1 for an acked task, 0 where the lease was lost to another worker.
--@include _envelope
local reserved, tasks, errors = KEYS[1], KEYS[2], KEYS[3]
local out = {}
for i = 1, #ARGV, 2 do
  local id, token = ARGV[i], ARGV[i + 1]
  local raw = redis.call('HGET', tasks, id)
  local e = raw and parse_envelope(raw)
  if e and e.token == token and redis.call('ZREM', reserved, id) == 1 then
    redis.call('HDEL', tasks, id)
    redis.call('HDEL', errors, id)
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
