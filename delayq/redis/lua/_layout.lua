-- _layout.lua: where a task lives, inlined by the loader into every script that touches tasks.
-- Small keys keep Redis's compact listpack encoding (hash/zset-max-listpack-entries 128,
-- -value 64 by default), which costs a quarter of a hashtable or skiplist per entry:
--   <prefix>tasks:<b>   HASH, b = bucket number in hex, at least 3 digits (see bucket_of):
--                       field <id> -> header "attempts,token,max,ttr,enqueued,due",
--                       field <id>\0 -> body JSON (apart, so a small body stays under 64 bytes)
--   <prefix>buckets     STRING number of buckets (absent: BUCKETS_MIN), grows as they split
--   <prefix>slot:<n>    ZSET id -> due ms, at most SLOT_MAX entries (the schedule, cut in slots)
--   <prefix>wheel       ZSET n -> the slot's lower bound ms (every entry of the slot is >= it)
--   <prefix>slots       STRING counter that numbers new slots
--   <prefix>clock       STRING ms a test clock moved the topic's time on (absent: 0; _envelope.lua)
--   <prefix>prio, <prefix>prio:ready, <prefix>prio:mark: where tasks with a priority wait
--                       (see _priority.lua; prio_keys below)
-- These names are built here from the prefix passed in KEYS (it carries the topic's hash tag),
-- so a script touches one Cluster slot although not every key it touches is in KEYS.
-- Slots stay in due order: walking the wheel from the front visits every entry in due order.
-- A new entry goes to the last slot whose bound is <= its due time; a full slot is split.

local SLOT_MAX = 128

-- The reserved ZSET (id -> lease deadline) holds one more member, never removed: a name
-- longer than zset-max-listpack-value (64 by default) keeps the set a skiplist.  As a
-- listpack each ZADD, ZMSCORE and ZREM of a lease scans the whole set, and a worker keeps
-- about a batch of leases (~100) in it: leasing 100 tasks took 119 us of ZADD there
-- against 21 us as a skiplist.  Leases are few and short-lived, so the skiplist's extra
-- memory does not matter.  The name starts with a NUL byte, which no task id may hold,
-- and its score +inf puts it after every deadline: range reads stop at '(inf'.
local RESERVED_PIN = '\0delayq: pins this sorted set to the skiplist encoding (leases are O(log n))'

-- Add leases {deadline1, id1, ...} to `reserved`, and the pin with them.
local function add_leases(reserved, leases)
  redis.call('ZADD', reserved, 'inf', RESERVED_PIN, unpack(leases))
end

-- The earliest lease deadline in `reserved` (ms), or nil when no task is leased.
local function first_lease_deadline(reserved)
  return tonumber(redis.call('ZRANGE', reserved, '-inf', '(inf', 'BYSCORE', 'LIMIT', 0, 1,
    'WITHSCORES')[2])
end

-- The number of leases in `reserved`.
local function lease_count(reserved)
  return redis.call('ZCOUNT', reserved, '-inf', '(inf')
end

-- Buckets split as a topic grows (linear hashing), so that each stays a listpack: a bucket
-- past 128 fields turns into a hashtable, and at a million tasks in 4,096 buckets that made
-- the bucket commands 2-10x as costly.  There are `bucket_count` buckets, numbered from 0;
-- `level` is the largest power of two (>= BUCKETS_MIN) not above it.  An id hashes to a
-- 32-bit h; its bucket is h mod 2*level, or h mod level when that bucket does not exist yet.
-- A split divides bucket (count - level) by the next bit of h into itself and bucket
-- `count`, so one split moves only that bucket's tasks and every other id keeps its bucket.
-- The low 12 bits of h are the first 3 hex digits of sha1(id): the 4,096 buckets of a
-- topic that never split are the buckets of delayq's earlier fixed layout.
local BUCKETS_MIN = 4096
local BUCKET_SPLIT_FIELDS = 64  -- a send into a bucket already this full splits one bucket
-- Splits are for keeping buckets listpacks.  A body longer than hash-max-listpack-value's
-- default makes its bucket a hashtable whatever its size, and Redis never turns a hashtable
-- back into a listpack, so neither such a send nor a send into such a bucket splits one:
-- splitting hashtable buckets doubled the time to fill a 1M-task topic with 68-byte bodies
-- and took 7% more memory, and a topic grown to hashtables before delayq split buckets
-- would have paid a split of a ~500-field bucket on each send.
local LISTPACK_VALUE_MAX = 64
-- A split costs ~150-300 us; a batch of ids crafted to land in one bucket must not stall
-- Redis for each of them.  64 a call keeps up with batches of 1,000 (one split per ~17
-- tasks at the equilibrium load).
local SPLITS_PER_CALL_MAX = 64
local bucket_count, level

-- Read the bucket count before anything else in a script that touches tasks (and, under a
-- test clock, the topic's clock offset: _envelope.lua); returns an error reply (nothing
-- written yet) when either key holds something unreadable.
local function load_buckets(prefix)
  if READ_CLOCK then
    local bad = load_clock(prefix .. 'clock')
    if bad then
      return bad
    end
  end
  local raw = redis.call('GET', prefix .. 'buckets')
  bucket_count = BUCKETS_MIN
  if raw then
    bucket_count = tonumber(raw)
    if not bucket_count or bucket_count ~= math.floor(bucket_count)
        or bucket_count < BUCKETS_MIN or bucket_count >= 2 ^ 32 then
      return redis.error_reply('ERR delayq key ' .. prefix .. 'buckets holds "' .. raw .. '", not a bucket count')
    end
  end
  level = BUCKETS_MIN
  while level * 2 <= bucket_count do
    level = level * 2
  end
  return nil
end

local function hex_hash(hex)
  return tonumber(string.sub(hex, 1, 3), 16) + 4096 * tonumber(string.sub(hex, 4, 8), 16)
end

local function id_hash(id)
  return hex_hash(redis.sha1hex(id))
end

local function bucket_name(prefix, n)
  return prefix .. 'tasks:' .. string.format('%03x', n)
end

local function bucket_number(h)
  local n = h % (2 * level)
  if n >= bucket_count then
    n = h % level
  end
  return n
end

-- Remembered for the rest of the call (most scripts read and then write each task); a
-- split forgets them.
local buckets = {}

local function bucket_of(prefix, id)
  local bucket = buckets[id]
  if not bucket then
    -- A topic that never split (most) is addressed by the first 3 hex digits, which is
    -- what bucket_name gives there, without the arithmetic: this runs once per task in
    -- every script.
    local hex = redis.sha1hex(id)
    if bucket_count == BUCKETS_MIN then
      bucket = prefix .. 'tasks:' .. string.sub(hex, 1, 3)
    else
      bucket = bucket_name(prefix, bucket_number(hex_hash(hex)))
    end
    buckets[id] = bucket
  end
  return bucket
end

local function still_listpack(bucket)
  return redis.call('OBJECT', 'ENCODING', bucket) ~= 'hashtable'  -- true for no bucket yet
end

-- Whether a new task sent to `id`'s bucket should split one bucket (not necessarily this
-- one: linear hashing splits in bucket order, and the load evens out as the count grows).
local function bucket_full(prefix, id, body)
  local bucket = bucket_of(prefix, id)
  return #body <= LISTPACK_VALUE_MAX
    and redis.call('HLEN', bucket) >= BUCKET_SPLIT_FIELDS and still_listpack(bucket)
end

-- With `count` buckets at `lvl`: the bucket the next split divides, and the count and
-- level after it (the split creates bucket number `count`).
local function next_split(count, lvl)
  local grown = count + 1
  return count - lvl, grown, grown == 2 * lvl and grown or lvl
end

-- Read the buckets the next `k` splits will read and write: a script calls this before its
-- first write (Redis does not roll a script back, so a key garbled by hand must fail the
-- call before anything changed) and may then split after its other writes.
local function check_splits(prefix, k)
  local count, lvl = bucket_count, level
  for _ = 1, k do
    local from_n, grown, next_level = next_split(count, lvl)
    redis.call('HLEN', bucket_name(prefix, from_n))
    redis.call('HLEN', bucket_name(prefix, count))
    count, lvl = grown, next_level
  end
end

-- Split the next bucket in line (checked first with check_splits).
local function split_bucket(prefix)
  local from_n, grown, next_level = next_split(bucket_count, level)
  local from, to = bucket_name(prefix, from_n), bucket_name(prefix, bucket_count)
  local fields = redis.call('HGETALL', from)
  local moved, names, goes = {}, {}, {}
  for i = 1, #fields, 2 do
    local field = fields[i]
    local id = string.byte(field, -1) == 0 and string.sub(field, 1, -2) or field
    if goes[id] == nil then
      goes[id] = id_hash(id) % (2 * level) ~= from_n
    end
    if goes[id] then
      moved[#moved + 1] = field
      moved[#moved + 1] = fields[i + 1]
      names[#names + 1] = field
    end
  end
  -- In chunks: Lua's unpack() takes at most ~8,000 values, and a bucket may have grown
  -- large (a hashtable, in a topic of mixed body sizes) before its turn came.
  for i = 1, #names, 1000 do
    local last = math.min(i + 999, #names)
    redis.call('HSET', to, unpack(moved, 2 * i - 1, 2 * last))
    redis.call('HDEL', from, unpack(names, i, last))
  end
  bucket_count, level = grown, next_level
  redis.call('SET', prefix .. 'buckets', bucket_count)
  buckets = {}
end

local function body_field(id)
  return id .. '\0'
end

-- Returns header, body (false when missing).
local function read_task(prefix, id)
  local got = redis.call('HMGET', bucket_of(prefix, id), id, body_field(id))
  return got[1], got[2]
end

local function read_header(prefix, id)
  return redis.call('HGET', bucket_of(prefix, id), id)
end

local function delete_task(prefix, id)
  redis.call('HDEL', bucket_of(prefix, id), id, body_field(id))
end

-- What scripts hand back: the header and body joined, "attempts,token,max,ttr,enqueued,due,body".
local function joined(header, body)
  if body then
    return header .. ',' .. body
  end
  return header
end

local function slot_key(prefix, n)
  return prefix .. 'slot:' .. n
end

-- Slot names are zero-padded so that, among slots with the same bound, the wheel's
-- lexicographic tie order is their creation order (a split's new slot comes after).
local function slot_counter(prefix)
  return prefix .. 'slots'
end

local function new_slot(prefix, wheel, bound)
  local n = string.format('%016d', redis.call('INCRBY', slot_counter(prefix), 1))
  redis.call('ZADD', wheel, bound, n)
  return n
end

-- The last slot whose bound is <= due, that bound (nil when due precedes every slot), and
-- whether another slot comes before it (read in the same call: it tells a sender whether its
-- entry can be the earliest one without reading the schedule's head).
local function slot_at(wheel, due)
  local hit = redis.call('ZRANGE', wheel, due, '-inf', 'BYSCORE', 'REV', 'LIMIT', 0, 2, 'WITHSCORES')
  return hit[1], tonumber(hit[2]), hit[3] ~= nil
end

-- A script checks the slots it may write (the first two, the one `lo` falls in and those
-- up to `hi`) before its first write: Redis does not roll a script back, and a slot key
-- replaced by hand with another type would otherwise fail the script half-way.
local function check_slots(prefix, wheel, lo, hi)
  local names = redis.call('ZRANGE', wheel, 0, 1)
  names[#names + 1] = slot_at(wheel, lo)
  for _, n in ipairs(redis.call('ZRANGE', wheel, lo, hi, 'BYSCORE', 'LIMIT', 0, 16)) do
    names[#names + 1] = n
  end
  local kinds = {}
  for _, n in ipairs(names) do
    kinds[slot_key(prefix, n)] = 'zset'
  end
  return check_types(kinds)
end

-- The bound of the slot after the one whose bound is `bound` (slot_at picks the last of
-- slots sharing a bound, so the next one's is greater), or nil.
local function next_bound(wheel, bound)
  local hit = redis.call('ZRANGE', wheel, string.format('(%d', bound), '+inf', 'BYSCORE',
    'LIMIT', 0, 1, 'WITHSCORES')
  return tonumber(hit[2])
end

-- The rank nearest the middle where the due time strictly grows and `accept` holds for it.
local function growth_point(all, count, accept)
  local mid = math.floor(count / 2)
  for d = 0, mid do
    for _, r in ipairs({ mid - d, mid + d }) do
      if r >= 1 and r < count and all[2 * r + 2] ~= all[2 * r] and accept(tonumber(all[2 * r + 2])) then
        return r
      end
    end
  end
  return nil
end

-- Make room in the full slot n (bound `bound`) for an entry due at `due` (bound <= due).
-- Slots with the same bound are ordered by name, i.e. by creation, so a new slot must
-- either get a bound of its own or belong after every slot sharing its bound.  Returns
-- false in the one case no cut keeps the order (the slot holds one repeated due time, and
-- the next slot starts at that time): the caller then overfills the slot, which Redis
-- converts to a skiplist (correct, only not compact).
local function split(prefix, wheel, n, bound, due)
  local key = slot_key(prefix, n)
  -- The last entry first: the common case needs no more (~1 us a send, against reading
  -- the whole slot each time one fills).
  local top = tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2])
  if due >= top then
    -- Appending past the end (due times mostly grow with the clock): leave this slot full.
    new_slot(prefix, wheel, due)
    return true
  end
  local all = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
  local count = #all / 2
  local limit = next_bound(wheel, bound) or math.huge
  -- Cut where the due time grows to a value below the next slot's bound: the new slot
  -- gets that value as its own bound.  Else the cut where it grows to the next slot's
  -- bound: the new slot takes the last due time left here as bound, which puts it right
  -- after this slot.
  local cut = growth_point(all, count, function(w) return w < limit end)
  local new_bound = cut and all[2 * cut + 2]
  if not cut then
    cut = growth_point(all, count, function() return true end)
    new_bound = cut and all[2 * cut]
  end
  if not cut then
    -- One repeated due time, above `due`: this slot takes that time as its bound, unless the
    -- next slot already starts there; the new entry gets a slot with the old bound.
    if top >= limit then
      return false
    end
    -- The new slot first: INCRBY stays the first write of a send, so a slot counter of the
    -- wrong type fails the call before anything changed.
    new_slot(prefix, wheel, bound)
    redis.call('ZADD', wheel, top, n)
    return true
  end
  local moved = {}
  for r = cut, count - 1 do
    moved[#moved + 1] = all[2 * r + 2]
    moved[#moved + 1] = all[2 * r + 1]
  end
  local m = new_slot(prefix, wheel, new_bound)
  redis.call('ZREMRANGEBYRANK', key, cut, -1)
  redis.call('ZADD', slot_key(prefix, m), unpack(moved))
  return true
end

-- Schedule entries {due1, id1, due2, id2, ...} (ids not scheduled yet), in few calls.
-- Returns whether the earliest of them precedes everything scheduled before, i.e. whether
-- a waiting worker must be woken up.
-- For the first entry, the wheel and its slot are read before the first write and the slot
-- counter's INCRBY is the first write, so a key of the wrong type among them fails the call
-- before anything changed (callers schedule before their other writes).
local function schedule_add(prefix, wheel, entries)
  -- Kept flat, and sorted by due time only when out of order: a table per entry cost a
  -- send_many a tenth of a microsecond a task.
  local in_order = true
  for k = 3, #entries, 2 do
    if entries[k - 2] > entries[k] then
      in_order = false
      break
    end
  end
  if not in_order then
    local order = {}
    for k = 1, #entries / 2 do
      order[k] = k
    end
    table.sort(order, function(a, b) return entries[2 * a - 1] < entries[2 * b - 1] end)
    local sorted = {}
    for _, k in ipairs(order) do
      sorted[#sorted + 1] = entries[2 * k - 1]
      sorted[#sorted + 1] = entries[2 * k]
    end
    entries = sorted
  end
  local total = #entries / 2
  local i, earliest = 1, nil
  local due_text = text_of_last()
  while i <= total do
    local due = entries[2 * i - 1]
    local n, bound, after_another = slot_at(wheel, due)
    local count = n and redis.call('ZCARD', slot_key(prefix, n))
    if earliest == nil then
      -- Slots hold entries in due order, so an entry after another slot is not the earliest
      -- (a slot deleted by hand but still on the wheel would cost a wake-up, not a task).
      -- In the first slot it is earliest when it precedes the slot's first entry.
      if not n or (count == 0 and not after_another) then
        earliest = true
      elseif after_another then
        earliest = false
      else
        earliest = due < tonumber(redis.call('ZRANGE', slot_key(prefix, n), 0, 0, 'WITHSCORES')[2])
      end
    end
    if not n then
      -- Earlier than every slot: the first slot's bound moves down if it has room, else a
      -- new slot starts (its bound is below every other, so it comes first).
      n = redis.call('ZRANGE', wheel, 0, 0)[1]
      count = n and redis.call('ZCARD', slot_key(prefix, n)) or SLOT_MAX
      if count < SLOT_MAX then
        redis.call('ZADD', wheel, due, n)
      else
        n, count = new_slot(prefix, wheel, due), 0
      end
      bound = due
    end
    local key = slot_key(prefix, n)
    if count >= SLOT_MAX then
      if not split(prefix, wheel, n, bound, due) then
        redis.call('ZADD', key, due, entries[2 * i])
        i = i + 1
      end
    else
      -- Entries up to the next slot's bound go here (not needed for a last entry: slot_at
      -- placed it before that bound).
      local limit = i < total and next_bound(wheel, bound) or nil
      local first = i
      while i <= total and count < SLOT_MAX and (not limit or entries[2 * i - 1] < limit) do
        count = count + 1
        i = i + 1
      end
      -- Latest first: a listpack insert walks from the front to its place, so in descending
      -- order each entry stops at the previous one instead of walking past it (128 entries
      -- into a new slot: 0.66 us each, against 1.58 in ascending order).
      local batch = {}
      for k = i - 1, first, -1 do
        batch[#batch + 1] = due_text(entries[2 * k - 1])
        batch[#batch + 1] = entries[2 * k]
      end
      redis.call('ZADD', key, unpack(batch))
    end
  end
  return earliest == true
end

-- The slot holding `id` if it is scheduled at `due`: one of the slots with bound == due
-- (usually none) or the last slot with bound < due.
local function slot_of(prefix, wheel, id, due)
  local offset = 0
  while true do
    local page = redis.call('ZRANGE', wheel, due, '-inf', 'BYSCORE', 'REV', 'LIMIT', offset, 16,
      'WITHSCORES')
    for i = 1, #page, 2 do
      if redis.call('ZSCORE', slot_key(prefix, page[i]), id) then
        return page[i]
      end
      if tonumber(page[i + 1]) < due then
        return nil
      end
    end
    if #page < 32 then
      return nil
    end
    offset = offset + 16
  end
end

local function forget_if_empty(prefix, wheel, n)
  if redis.call('ZCARD', slot_key(prefix, n)) == 0 then
    redis.call('ZREM', wheel, n)
  end
end

-- Unschedule `id` (scheduled at `due`); returns whether it was scheduled.
local function schedule_remove(prefix, wheel, id, due)
  local n = slot_of(prefix, wheel, id, due)
  if not n then
    return false
  end
  redis.call('ZREM', slot_key(prefix, n), id)
  forget_if_empty(prefix, wheel, n)
  return true
end

-- The earliest due time scheduled, or nil.  A wheel entry whose slot was deleted by hand
-- is dropped on the way.
local function schedule_head(prefix, wheel)
  for _ = 1, 16 do
    local n = redis.call('ZRANGE', wheel, 0, 0)[1]
    if not n then
      return nil
    end
    local first = redis.call('ZRANGE', slot_key(prefix, n), 0, 0, 'WITHSCORES')[2]
    if first then
      return tonumber(first)
    end
    redis.call('ZREM', wheel, n)
  end
  return nil
end

-- Up to `limit` ids due by `now`, earliest first, without changing anything (so that a
-- script can read their tasks before its first write).  Returns ids and the cuts that
-- schedule_cut needs: {slot, how many from its front, whether that empties it}, ...
local function schedule_due(prefix, wheel, now, limit)
  local ids, cuts = {}, {}
  local slots = redis.call('ZRANGE', wheel, '-inf', now, 'BYSCORE', 'LIMIT', 0, 16)
  for _, n in ipairs(slots) do
    if #ids >= limit then
      break
    end
    local key = slot_key(prefix, n)
    local got = redis.call('ZRANGE', key, '-inf', now, 'BYSCORE', 'LIMIT', 0, limit - #ids)
    for _, id in ipairs(got) do
      ids[#ids + 1] = id
    end
    local whole = #got == redis.call('ZCARD', key)
    cuts[#cuts + 1] = { n, #got, whole }
    if not whole then
      break  -- what is left in this slot (and so in every later one) is not due yet
    end
  end
  return ids, cuts
end

-- Remove what schedule_due returned from the schedule.
local function schedule_cut(prefix, wheel, cuts)
  for _, cut in ipairs(cuts) do
    if cut[3] then
      redis.call('ZREMRANGEBYRANK', slot_key(prefix, cut[1]), 0, -1)
      redis.call('ZREM', wheel, cut[1])
    elseif cut[2] > 0 then
      redis.call('ZREMRANGEBYRANK', slot_key(prefix, cut[1]), 0, cut[2] - 1)
    end
  end
end

-- The count of scheduled tasks (delayed and ready), kept in the field 'scheduled' of
-- <prefix>meta (HASH) by every script that adds to or removes from the schedule, with one
-- HINCRBY per call, so that stats.lua need not walk the slots.  Topics scheduled before
-- delayq kept it have no field: HINCRBY then starts from 0, which is caught below.
local function meta_key(prefix)
  return prefix .. 'meta'
end

-- Every entry of every slot, counted one slot at a time (O(slots)).
local function count_schedule(prefix, wheel)
  local total = 0
  for _, n in ipairs(redis.call('ZRANGE', wheel, 0, -1)) do
    total = total + redis.call('ZCARD', slot_key(prefix, n))
  end
  return total
end

-- Add `delta` to the count (a write: callers check the meta key's type before their first
-- write, or make this their first write).  Returns whether the count must be recounted
-- after the caller's schedule writes (recount_if): a count below 0, or one that equals a
-- positive delta (it was 0 or absent), can be a topic scheduled before the count existed.
-- A topic that really was empty recounts only the slots this call filled.
local function count_scheduled(prefix, delta)
  if delta == 0 then
    return false
  end
  local count = redis.call('HINCRBY', meta_key(prefix), 'scheduled', delta)
  return count < 0 or (delta > 0 and count == delta)
end

local function recount_if(needed, prefix, wheel)
  if needed then
    redis.call('HSET', meta_key(prefix), 'scheduled', count_schedule(prefix, wheel))
  end
end

-- Both at once, for a script that already changed the schedule.
local function schedule_changed(prefix, wheel, delta)
  recount_if(count_scheduled(prefix, delta), prefix, wheel)
end

-- The schedule is empty: so must the count be.  Scripts keep the count exact, but slots or
-- the wheel deleted by hand take tasks away without a script; reserve.lua calls this when
-- it finds nothing scheduled, so such a count is right again once the topic drains.
local function schedule_emptied(prefix)
  local meta = meta_key(prefix)
  if redis.call('HGET', meta, 'scheduled') ~= '0' then
    redis.call('HSET', meta, 'scheduled', 0)
  end
end

-- Where the tasks with a priority wait (_priority.lua): built from the prefix like the
-- buckets and slots, so that no script pays for them in KEYS (a send of priority 0, the
-- hottest call, carries no more arguments than before priorities existed).
local function prio_keys(prefix)
  return { index = prefix .. 'prio', ready = prefix .. 'prio:ready', mark = prefix .. 'prio:mark' }
end

-- A finished task's result, kept for a while when its topic keeps results (_results.lua):
-- a STRING of its own, so that it expires on its own.
local function result_key(prefix, id)
  return prefix .. 'result:' .. id
end
