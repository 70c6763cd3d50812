#!lua flags=allow-oom
-- reserve.lua: reclaim expired leases, then lease up to ARGV[1] due tasks, highest priority
-- first, then oldest due first, in one atomic step.
-- KEYS[1] prefix of the task buckets and schedule slots (see _layout.lua)
-- KEYS[2] wheel (ZSET slot -> bound ms)  KEYS[3] reserved (ZSET id -> lease deadline ms)
-- KEYS[4] dead (ZSET id -> died ms)      KEYS[5] errors (HASH id -> last error)
-- KEYS[6] seq (STRING, fencing-token counter)   KEYS[7] controls (HASH, see _controls.lua)
-- KEYS[8] starts (HASH, the rate limit's recent leases, see _controls.lua)
-- ARGV[1] max tasks to lease   ARGV[2] max expired leases to reclaim
-- ARGV[3] topic default ttr ms  ARGV[4] topic default max attempts
-- ARGV[5] history: records the topic keeps (0: none; -1: the setting its workers recorded in
--   <prefix>meta; see _history.lua), for the expired leases it dead-letters
-- ARGV[6] results: ms the topic keeps each task's result (0 or absent: none; -1: the setting
--   its workers recorded in <prefix>meta; _results.lua), for the expired leases it
--   dead-letters   ARGV[7] the topic's wake channel (tells whether to notify sharded)
-- Returns: {now_us, next_ms, skipped, id1, envelope1, id2, envelope2, ...}
--   now_us: Redis time in microseconds, so the caller's sleep until next_ms is not up to
--   1 ms too long; next_ms: earliest due time or lease deadline still pending (-1 if none);
--   skipped: {id, reason, id, reason, ...} for entries this call could not lease, so the
--   caller can log them: 'missing' (a due or expired entry whose task is absent from its
--   bucket; the entry is removed, nothing else is written) or 'corrupt' (the header or body
--   is unreadable; the task is dead-lettered as CorruptTask), and for the expired leases it
--   reclaimed, so the caller can count them: 'expired' (due again) or 'expired-dead' (out
--   of attempts, dead-lettered); each envelope
--   ("attempts,token,max,ttr,enqueued,due,body") carries the new attempt count and the
--   lease's fencing token.
--   A topic's controls (_controls.lua) lease fewer: none while paused, at most max_running
--   leased at once, at most rate_limit leases a window.  next_ms then says when they may
--   allow one again: the rate limit's next opening; or, while paused or at max_running,
--   only the next lease deadline (a resume, or the end of a lease, publishes a wake-up).
--   Due tasks with a priority above 0 are leased before the schedule's, those below 0
--   after; until every priority task that came due is in the lease order (at most 1,000
--   move a call), nothing is leased and next_ms is now.
--   Grouped tasks (_groups.lua) are leased round-robin over their groups, one task of each
--   group a turn, within max_running_per_group and rate_limit_per_group; the ungrouped
--   tasks of a grouped topic (sent by a process that did not register it) take one turn of
--   the round as if they were one more group.
-- allow-oom: finishing, retrying or moving tasks frees or keeps memory, and a full Redis
-- must still be drainable; only sends are refused when Redis is at maxmemory.
--@include _envelope
--@include _layout
--@include _controls
--@include _priority
--@include _groups
--@include _history
--@include _results
local prefix, wheel, reserved, dead, errors, seq = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local controls, starts = KEYS[7], KEYS[8]
local pk = prio_keys(prefix)  -- where tasks with a priority wait (_priority.lua)
local bad = check_types({ [wheel] = 'zset', [reserved] = 'zset', [dead] = 'zset',
  [errors] = 'hash', [seq] = 'string', [slot_counter(prefix)] = 'string',
  [meta_key(prefix)] = 'hash' }) or load_buckets(prefix)
if bad then
  return bad
end
-- A plain topic has neither controls, priority tasks nor groups: one EXISTS a call is all
-- it pays for them.
local ctl, has_prio, gk, gs = nil, false, nil, nil
if redis.call('EXISTS', controls, pk.index, prefix .. 'grp:ring', prefix .. 'grp:wait') > 0 then
  local has_controls = redis.call('EXISTS', controls) == 1
  if has_controls then
    ctl, bad = read_controls(controls, starts)
  end
  if not bad and redis.call('EXISTS', prefix .. 'grp:ring', prefix .. 'grp:wait') > 0 then
    gk = grp().keys(prefix)
    gs, bad = grp().settings(controls)
    bad = bad or check_types(grp().kinds(gk, {}))
  end
  has_prio = redis.call('EXISTS', pk.index) == 1
  bad = bad or (has_prio and check_types({ [pk.index] = 'zset', [pk.ready] = 'zset',
    [pk.mark] = 'string' }))
  if bad then
    return bad
  end
end
local max_tasks, max_reclaim = tonumber(ARGV[1]), tonumber(ARGV[2])
local default_ttr, default_max = tonumber(ARGV[3]), tonumber(ARGV[4])
local cap = tonumber(ARGV[5]) or 0
if cap < 0 then  -- a consumer that did not register the topic: what its workers recorded
  cap = tonumber(redis.call('HGET', meta_key(prefix), 'history')) or 0
end
bad = check_types(history_kinds(prefix, cap, {}))
if bad then
  return bad
end
local ttl = tonumber(ARGV[6]) or 0
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000) + clock_offset
bad = check_slots(prefix, wheel, now, now)
if bad then
  return bad
end

local function bury(id, reason)
  redis.call('ZADD', dead, now, id)
  redis.call('HSET', errors, id, reason)
end

local skipped = {}
local function skip(id, reason)
  skipped[#skipped + 1] = id
  skipped[#skipped + 1] = reason
end

local function bury_corrupt(id)
  bury(id, 'CorruptTask: stored envelope is unreadable')
  skip(id, 'corrupt')
end

-- Move the priority tasks that came due into the lease order (_priority.lua): one whose
-- task is missing is dropped, one whose header is unreadable buried.  Returns whether all
-- did: only then may anything be leased.
local function promote()
  local function priority_of(id)
    local raw = read_header(prefix, id)
    local e = raw and parse_header(raw)
    return e and e.priority ~= 0 and e.priority or nil
  end
  local complete, unusable = prio().promote(pk, now, priority_of)
  for _, id in ipairs(unusable) do
    redis.call('ZREM', pk.index, id)
    if read_header(prefix, id) then
      bury_corrupt(id)
    else
      skip(id, 'missing')
    end
  end
  return complete
end

-- 1. A lease past its deadline belongs to a worker that died or stalled: the attempt failed.
-- Every header is read before the first write, so a bucket of the wrong type fails the
-- step before anything changed.
local expired = redis.call('ZRANGE', reserved, '-inf', now, 'BYSCORE', 'LIMIT', 0, max_reclaim)
local headers = {}
for i, id in ipairs(expired) do
  headers[i] = read_header(prefix, id)
end
if #expired > 0 and not has_prio then
  -- A reclaimed task may have a priority: its keys are checked before the first write.
  bad = check_types({ [pk.index] = 'zset', [pk.ready] = 'zset', [pk.mark] = 'string' })
  if bad then
    return bad
  end
end
local reclaim_gk = gk
for i = 1, #expired do
  -- A reclaimed task of a group frees its slot there and waits in its group again.
  local g = headers[i] and header_group(headers[i])
  if g and not reclaim_gk then
    reclaim_gk = grp().keys(prefix)
    gs, bad = grp().settings(controls)
    bad = bad or check_types(grp().kinds(reclaim_gk, {}))
    if bad then
      return bad
    end
  end
  if g then
    bad = check_types({ [grp().queue(reclaim_gk, g)] = 'zset' })
    if bad then
      return bad
    end
  end
end
if #expired > 0 then
  redis.call('ZREMRANGEBYRANK', reserved, 0, #expired - 1)
end
local requeued, buried = {}, {}
for i, id in ipairs(expired) do
  local raw = headers[i]
  if raw then
    local e = parse_header(raw)
    if e and e.group then
      grp().release(reclaim_gk, e.group)
    end
    if not e then
      bury_corrupt(id)
    else
      local limit = e.max_attempts > 0 and e.max_attempts or default_max
      local reason = 'LeaseExpired: no ack within the lease (attempt ' .. e.attempts .. ' of ' .. limit .. ')'
      if e.attempts >= limit then
        bury(id, reason)
        skip(id, 'expired-dead')
        if cap > 0 then
          local _, body = read_task(prefix, id)
          buried[#buried + 1] = id
          buried[#buried + 1] = history_record('dead', raw, ',', reason, body)
        end
        if ttl ~= 0 then
          ttl = results_ttl(prefix, ttl)
          store_result(prefix, ttl, results_channel(prefix, ARGV[7]), id, 'dead', e.attempts,
            reason, '')
        end
      else
        e.due = now
        redis.call('HSET', bucket_of(prefix, id), id, format_header(e))
        redis.call('HSET', errors, id, reason)
        if e.group then
          grp().add(reclaim_gk, e.group, { now, grp().member(id, e.priority) })
        elseif e.priority == 0 then
          requeued[#requeued + 1] = now
          requeued[#requeued + 1] = id
        else
          prio().add(pk, id, now, e.priority)
          has_prio = true
        end
        skip(id, 'expired')
      end
    end
  else
    skip(id, 'missing')
  end
end
if #requeued > 0 then
  schedule_add(prefix, wheel, requeued)
end
history_add(prefix, cap, buried)
gk = reclaim_gk  -- a reclaimed grouped task may be due in its group now

-- 2. Lease the due tasks, their tasks read before the first write: those of priority above
-- 0, highest first (each priority oldest due first), then the schedule's (priority 0,
-- oldest due first), then those below 0.  Each redis.call costs microseconds of overhead:
-- the schedule is read and cut slot by slot and the reserved ZSET written once; only the
-- buckets (one per task) are touched per task.
local out = { tonumber(clock[1]) * 1000000 + tonumber(clock[2]) + clock_offset * 1000, -1,
  skipped }
local quota = ctl and control_quota(ctl, reserved, starts, now, max_tasks) or max_tasks
local group_quota = 0  -- of a grouped topic: what the groups may lease (the rest: the others)
if gk and quota > 0 then
  -- The ungrouped tasks take one turn of the round, as one more group would.
  local ready = redis.call('ZCARD', gk.ring) + redis.call('ZCOUNT', gk.wait, '-inf', now)
  local share = math.floor(quota / (ready + 1))
  if share == 0 and (tonumber(redis.call('GET', gk.turn)) or 0) % (ready + 1) == 0 then
    share = 1
  end
  group_quota, quota = quota - share, share
end
local promoted, above, below = true, {}, {}
if has_prio then
  promoted = promote()
  if not promoted then
    quota = 0  -- a priority task not yet in the lease order might outrank what is
  end
  above = prio().ready(pk, true, quota)
end
local due, cuts = {}, {}
if quota > #above / 2 then
  due, cuts = schedule_due(prefix, wheel, now, quota - #above / 2)
end
local picks = due
if has_prio then
  below = prio().ready(pk, false, quota - #above / 2 - #due)
  picks = {}
  for i = 2, #above, 2 do
    picks[#picks + 1] = above[i]
  end
  for _, id in ipairs(due) do
    picks[#picks + 1] = id
  end
  for i = 2, #below, 2 do
    picks[#picks + 1] = below[i]
  end
end
if gk then
  -- What the others left to the groups, and the groups' share of it.
  group_quota = group_quota + quota - #picks
  if not promoted then
    group_quota = 0
  end
end
local pick_group = {}  -- index in picks -> group, for grouped picks
local held_before = {}  -- group -> leases it held, where take() read it
if gk and group_quota > 0 then
  local taken
  taken, held_before = grp().take(gk, gs, now, group_quota)
  if picks == due then
    picks = {}
    for _, id in ipairs(due) do
      picks[#picks + 1] = id
    end
  end
  for i = 1, #taken, 2 do
    picks[#picks + 1] = taken[i]
    pick_group[#picks] = taken[i + 1]
  end
end
-- A grouped pick that could not be leased holds no slot: its group, if take() counted it
-- into <grp:full>, may lease again.
local function unleased(g)
  if g and redis.call('ZREM', gk.full, g) == 1 then
    redis.call('ZADD', gk.wait, 0, g)
  end
end
local leased_raw, leased_body = {}, {}
for i, id in ipairs(picks) do
  leased_raw[i], leased_body[i] = read_task(prefix, id)
end
schedule_cut(prefix, wheel, cuts)
if has_prio then
  prio().take(pk, above)
  prio().take(pk, below)
end
if #picks > 0 then
  local first_token = redis.call('INCRBY', seq, #picks) - #picks
  local leases, deadline_text = {}, text_of_last()
  local started = nil  -- group -> leases started, for grouped picks
  for i, id in ipairs(picks) do
    local raw, body = leased_raw[i], leased_body[i]
    if raw then
      local header, ttr = leased_header(raw, first_token + i, pick_group[i] ~= nil)
      if not header or not body then
        bury_corrupt(id)
        unleased(pick_group[i])
      else
        local g = pick_group[i]
        if g then
          started = started or {}
          started[g] = (started[g] or 0) + 1
        end
        redis.call('HSET', bucket_of(prefix, id), id, header)
        leases[#leases + 1] = deadline_text(now + (ttr > 0 and ttr or default_ttr))
        leases[#leases + 1] = id
        out[#out + 1] = id
        out[#out + 1] = joined(header, body)
      end
    else
      skip(id, 'missing')  -- nothing to run: the entry is dropped, and reported
      unleased(pick_group[i])
    end
  end
  if #leases > 0 then
    add_leases(reserved, leases)
  end
  if started then
    grp().started(gk, started, held_before)
  end
end

-- Every due entry left the schedule (leased, dropped or buried); reclaimed leases joined it.
schedule_changed(prefix, wheel, #requeued / 2 - #due)

-- 3. Tell the caller when to look again: the next due task or the next lease to expire,
-- the former no sooner than the topic's controls allow a lease (and not at all while they
-- wait for a wake-up).
local next_due = schedule_head(prefix, wheel)
if not next_due then
  schedule_emptied(prefix)
end
if gk then
  local head = grp().next_due(gk, now)
  if head then
    next_due = math.min(next_due or head, head)
  end
end
if has_prio then
  local head = now  -- the lease order is still being built: come back at once
  if promoted then
    head = prio().head(pk)
  end
  if head then
    next_due = math.min(next_due or head, head)
  end
end
if ctl then
  local leased = (#out - 3) / 2
  local reopens = control_after(ctl, controls, starts, leased, next_due ~= nil and next_due <= now)
  if reopens == false then
    next_due = nil
  elseif reopens and next_due then
    next_due = math.max(next_due, reopens)
  end
end
local next_lease = first_lease_deadline(reserved)
if next_due and next_lease then
  out[2] = math.min(next_due, next_lease)
elseif next_due or next_lease then
  out[2] = next_due or next_lease
end
return out
