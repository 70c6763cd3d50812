#!lua flags=allow-oom
-- ack.lua: finish a batch of leased tasks (delete them), each only if its lease token still matches.
-- KEYS[1] prefix of the task buckets (see _layout.lua)   KEYS[2] reserved (ZSET)
-- KEYS[3] errors (HASH)   KEYS[4] controls (HASH, see _controls.lua)
-- ARGV[1] wake channel   ARGV[2] history: records the topic keeps (0: none; -1: the setting
-- its workers recorded in <prefix>meta, for a consumer that did not register it; _history.lua)
-- ARGV[3] results: ms the topic keeps each task's result (0: none; -1: the setting its
-- workers recorded in <prefix>meta; _results.lua)
-- ARGV[4..]: id1, token1, id2, token2, ... with, when ARGV[2] ~= 0, times after each token,
--   where times is "<handler started ms>,<handler ended ms>" on Redis's clock, and then,
--   when ARGV[3] ~= 0, the result: '' (none), 'v' .. the return value's JSON, or 'e' .. why
--   it was not stored
-- Returns: {r1, r2, ...} with 1 for an acked task, 0 where the lease was lost to another worker.
-- Wakes the topic's workers when one waits for a place under max_running (_controls.lua),
-- or when a group waits for a place under max_running_per_group (_groups.lua).
-- allow-oom: finishing, retrying or moving tasks frees or keeps memory, and a full Redis
-- must still be drainable; only sends are refused when Redis is at maxmemory.
--@include _envelope
--@include _layout
--@include _controls
--@include _groups
--@include _history
--@include _results
local prefix, reserved, errors, controls = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local channel, cap, ttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local step = 2 + (cap ~= 0 and 1 or 0) + (ttl ~= 0 and 1 or 0)
if cap < 0 then
  cap = tonumber(redis.call('HGET', meta_key(prefix), 'history')) or 0
end
if ttl ~= 0 then
  ttl = results_ttl(prefix, ttl)
end
local bad = check_types(history_kinds(prefix, cap, { [reserved] = 'zset', [errors] = 'hash' }))
  or load_buckets(prefix)
if bad then
  return bad
end
-- First, so that a controls key of the wrong type fails the call before anything changed
-- (and in place of a TYPE check: one call a batch, on an absent key for most topics).
local waiting = redis.call('HDEL', controls, 'full') == 1
local ids, headers, bodies = {}, {}, {}
for i = 4, #ARGV, step do
  ids[#ids + 1] = ARGV[i]
  if cap > 0 then
    headers[#ids], bodies[#ids] = read_task(prefix, ARGV[i])
  else
    headers[#ids] = read_header(prefix, ARGV[i])
  end
end
-- A grouped task (",g" is in no other header: a plain ack pays one find a task) frees its
-- group's place: its keys are checked before the first lease is removed.  grouped[n]: where
-- the ",g" of a grouped header starts (its group follows), else false.
local grouped, checked = {}, false
for n = 1, #ids do
  grouped[n] = headers[n] and string.find(headers[n], ',g', 1, true) or false
  if grouped[n] and not checked then
    checked = true
    bad = check_types(grp().kinds(grp().keys(prefix), {}))
    if bad then
      return bad
    end
  end
end
-- A task whose header carries the token is acked if its lease is still in `reserved`: ZREM
-- tests and removes it in one command.  (A ZMSCORE of the batch costs more: Redis prints
-- each score it returns as a floating-point number.)  A repeated id is refused by its
-- second ZREM.
local done, out, records = {}, {}, {}
for n, id in ipairs(ids) do
  local raw = headers[n]
  local at = 4 + (n - 1) * step
  local token = raw and (grouped[n] and grouped_header_token(raw) or header_token(raw))
  if token == ARGV[at + 1] and redis.call('ZREM', reserved, id) == 1 then
    done[#done + 1] = id
    out[n] = 1
    if cap > 0 then
      records[#records + 1] = id
      records[#records + 1] = history_record('acked', raw, ARGV[at + 2], '', bodies[n])
    end
    if ttl > 0 then
      local result = ARGV[at + step - 1]
      local kind, text = string.sub(result, 1, 1), string.sub(result, 2)
      write_result(prefix, ttl, id, 'acked', string.match(raw, '^%d+'),
        kind == 'e' and text or '', kind == 'v' and text or '')
    end
  else
    out[n] = 0
  end
end
if #done > 0 then
  for _, id in ipairs(done) do
    delete_task(prefix, id)
  end
  -- A grouped task's lease frees its place in its group.
  local ended = nil
  for n in ipairs(ids) do
    if out[n] == 1 and grouped[n] then
      local g = string.sub(headers[n], grouped[n] + 2)
      ended = ended or {}
      ended[g] = (ended[g] or 0) + 1
    end
  end
  if ended then
    waiting = grp().release_many(grp().keys(prefix), ended) or waiting
  end
  redis.call('HDEL', errors, unpack(done))
  history_add(prefix, cap, records)
  if ttl > 0 then
    results_notify(results_channel(prefix, channel), done)
  end
end
if waiting then
  publish(channel, 0)  -- a worker waits for a place under max_running
end
return out
