#!lua flags=allow-oom
-- reserve.lua: reclaim expired leases, then lease up to ARGV[1] due tasks, in one atomic step.
-- KEYS[1] schedule (ZSET id -> due ms)   KEYS[2] reserved (ZSET id -> lease deadline ms)
-- KEYS[3] tasks (HASH id -> envelope)    KEYS[4] dead (ZSET id -> died ms)
-- KEYS[5] errors (HASH id -> last error) KEYS[6] seq (STRING, fencing-token counter)
-- ARGV[1] max tasks to lease   ARGV[2] max expired leases to reclaim
-- ARGV[3] topic default ttr ms  ARGV[4] topic default max attempts
-- Returns: {now_us, next_ms, id1, envelope1, id2, envelope2, ...}
--   now_us: Redis time in microseconds, so the caller's sleep until next_ms is not up to
--   1 ms too long; next_ms: earliest due time or lease deadline still pending (-1 if none); each envelope
--   carries the new attempt count and the lease's fencing token.
-- allow-oom: finishing, retrying or moving tasks frees or keeps memory, and a full Redis
-- must still be drainable; only sends are refused when Redis is at maxmemory.
--@include _envelope
local schedule, reserved, tasks, dead, errors, seq = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local bad = check_types({ [schedule] = 'zset', [reserved] = 'zset', [tasks] = 'hash',
  [dead] = 'zset', [errors] = 'hash', [seq] = 'string' })
if bad then
  return bad
end
local max_tasks, max_reclaim = tonumber(ARGV[1]), tonumber(ARGV[2])
local default_ttr, default_max = tonumber(ARGV[3]), tonumber(ARGV[4])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)

local function bury(id, reason)
  redis.call('ZADD', dead, now, id)
  redis.call('HSET', errors, id, reason)
end

-- 1. A lease past its deadline belongs to a worker that died or stalled: the attempt failed.
local expired = redis.call('ZRANGE', reserved, '-inf', now, 'BYSCORE', 'LIMIT', 0, max_reclaim)
if #expired > 0 then
  redis.call('ZREMRANGEBYRANK', reserved, 0, #expired - 1)
end
for _, id in ipairs(expired) do
  local raw = redis.call('HGET', tasks, id)
  if raw then
    local e = parse_envelope(raw)
    if not e then
      bury(id, 'CorruptTask: stored envelope is unreadable')
    else
      local limit = e.max_attempts > 0 and e.max_attempts or default_max
      local reason = 'LeaseExpired: no ack within the lease (attempt ' .. e.attempts .. ' of ' .. limit .. ')'
      if e.attempts >= limit then
        bury(id, reason)
      else
        e.due = now
        redis.call('HSET', tasks, id, format_envelope(e, raw))
        redis.call('ZADD', schedule, now, id)
        redis.call('HSET', errors, id, reason)
      end
    end
  end
end

-- 2. Lease the due tasks, oldest due first.  Each redis.call costs microseconds of
-- overhead, so the batch is read with one HMGET and written with one HSET and one ZADD.
local out = { tonumber(clock[1]) * 1000000 + tonumber(clock[2]), -1 }
local due = redis.call('ZRANGE', schedule, '-inf', now, 'BYSCORE', 'LIMIT', 0, max_tasks)
if #due > 0 then
  redis.call('ZREMRANGEBYRANK', schedule, 0, #due - 1)
  local first_token = redis.call('INCRBY', seq, #due) - #due
  local raws = redis.call('HMGET', tasks, unpack(due))
  local envelopes, leases = {}, {}
  for i, id in ipairs(due) do
    local raw = raws[i]
    if raw then
      local e = parse_envelope(raw)
      if not e then
        bury(id, 'CorruptTask: stored envelope is unreadable')
      else
        e.attempts = e.attempts + 1
        e.token = first_token + i
        local envelope = format_envelope(e, raw)
        local ttr = e.ttr > 0 and e.ttr or default_ttr
        envelopes[#envelopes + 1] = id
        envelopes[#envelopes + 1] = envelope
        leases[#leases + 1] = now + ttr
        leases[#leases + 1] = id
        out[#out + 1] = id
        out[#out + 1] = envelope
      end
    end
    -- A schedule entry without a task (deleted by hand) is simply dropped.
  end
  if #envelopes > 0 then
    redis.call('HSET', tasks, unpack(envelopes))
    redis.call('ZADD', reserved, unpack(leases))
  end
end

-- 3. Tell the caller when to look again: the next due task or the next lease to expire.
local next_due = redis.call('ZRANGE', schedule, 0, 0, 'WITHSCORES')[2]
local next_lease = redis.call('ZRANGE', reserved, 0, 0, 'WITHSCORES')[2]
if next_due and next_lease then
  out[2] = math.min(tonumber(next_due), tonumber(next_lease))
elseif next_due or next_lease then
  out[2] = tonumber(next_due or next_lease)
end
return out
