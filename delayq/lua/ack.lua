#!lua flags=allow-oom
-- ack.lua: finish a batch of leased tasks (delete them), each only if its lease token still matches.
-- KEYS[1] reserved (ZSET)   KEYS[2] tasks (HASH)   KEYS[3] errors (HASH)
-- ARGV: id1, token1, id2, token2, ...
-- Returns: {r1, r2, ...} with 1 for an acked task, 0 where the lease was lost to another worker.
-- allow-oom: finishing, retrying or moving tasks frees or keeps memory, and a full Redis
-- must still be drainable; only sends are refused when Redis is at maxmemory.
--@include _envelope
local reserved, tasks, errors = KEYS[1], KEYS[2], KEYS[3]
local bad = check_types({ [reserved] = 'zset', [tasks] = 'hash', [errors] = 'hash' })
if bad then
  return bad
end
local ids = {}
for i = 1, #ARGV, 2 do
  ids[#ids + 1] = ARGV[i]
end
-- One read of each structure for the whole batch: per-call overhead dominates otherwise.
local raws = redis.call('HMGET', tasks, unpack(ids))
local leased = redis.call('ZMSCORE', reserved, unpack(ids))
local done, out, seen = {}, {}, {}
for n, id in ipairs(ids) do
  local raw = raws[n]
  local e = raw and parse_envelope(raw)
  if e and leased[n] and e.token == ARGV[2 * n] and not seen[id] then
    seen[id] = true
    done[#done + 1] = id
    out[n] = 1
  else
    out[n] = 0
  end
end
if #done > 0 then
  redis.call('ZREM', reserved, unpack(done))
  redis.call('HDEL', tasks, unpack(done))
  redis.call('HDEL', errors, unpack(done))
end
return out
