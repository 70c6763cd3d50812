-- _groups.lua: where the tasks of a grouped topic wait, inlined by the loader (after _layout
-- and _controls) into every script that adds, finds or removes a waiting task or ends a
-- lease.  A task sent with a group (its header ends ",g<group>": _envelope.lua) never enters
-- the schedule nor the priority store; an ungrouped task pays nothing here.  Keys, all built
-- from the topic's prefix (group_keys below):
--   <grp:q:G>       ZSET member -> due ms: every waiting (delayed or ready) task of group G;
--                   the member is the id, or for a task with a priority a 1-byte class and 7
--                   digits in front of it, so that within one due ms the higher runs first
--   <grp:wait>      ZSET G -> ms from which G may lease again (its head's due time, or its
--                   rate window's reopening); groups in neither <grp:ring> nor <grp:full>
--   <grp:ring>      ZSET G -> turn: groups that may lease now; reserve.lua leases one task
--                   from each of the lowest turns, then gives the group the next turn
--   <grp:turn>      STRING the last turn handed out
--   <grp:run>       HASH G -> leases G holds now (every grouped topic keeps it)
--   <grp:full>      ZSET G -> ms it reached max_running_per_group with tasks waiting
--   <grp:starts:G>  HASH the rate_limit_per_group window of G (as <starts>, _controls.lua)
--   <grp:all>       ZSET id -> due ms: every waiting grouped task, whatever its group, so
--                   that stats, upcoming, timeline and test clocks read them as they read
--                   <prio> (one more sorted-set entry a grouped task, written in the same
--                   calls: a send, a lease batch, a requeue)
-- A group with a waiting task is in exactly one of wait, ring and full; its entry there may
-- be earlier than the truth (a cancelled head; a group leased from stays in the ring or
-- goes to full without its next task being read), never later, and an emptied group may
-- linger in one of them until its turn: reserve.lua checks a group when it comes to it,
-- and puts it where it belongs (or drops it).  So every
-- script but reserve.lua only adds to <grp:wait> or moves a group from <grp:full> to the
-- end of <grp:ring>, and a blocked group (at its cap, or out of rate) is looked at once,
-- then not again until a lease of it ends or its window reopens: reserving costs
-- O(log n) whatever it holds.
-- The settings are fields of the topic's controls hash: group_max_running and
-- group_rate_limit ('N/s', 'N/m' or 'N/h'), written by the workers that register the topic.

local group_helpers = nil

-- The helpers, defined on first use (an ungrouped call never pays for defining them).
local function grp()
  if group_helpers then
    return group_helpers
  end
  local M = {}

  function M.keys(prefix)
    local base = prefix .. 'grp:'
    return { base = base, wait = base .. 'wait', ring = base .. 'ring', turn = base .. 'turn',
      run = base .. 'run', full = base .. 'full', all = base .. 'all' }
  end

  function M.queue(gk, group)
    return gk.base .. 'q:' .. group
  end

  function M.starts(gk, group)
    return gk.base .. 'starts:' .. group
  end

  -- The key types a script writing grouped tasks checks before its first write.
  function M.kinds(gk, kinds)
    kinds[gk.wait], kinds[gk.ring], kinds[gk.full] = 'zset', 'zset', 'zset'
    kinds[gk.run], kinds[gk.turn], kinds[gk.all] = 'hash', 'string', 'zset'
    return kinds
  end

  -- A task's member in its group's queue: the id for priority 0; else a class byte (NUL
  -- above 0, 0xFF below: neither starts an id) and 7 digits, so the higher priority sorts
  -- first among members of one due ms.
  function M.member(id, priority)
    if priority == 0 then
      return id
    elseif priority > 0 then
      return '\0' .. string.format('%07d', 1000000 - priority) .. id
    end
    return '\255' .. string.format('%07d', -priority - 1) .. id
  end

  function M.id_of(member)
    local b = string.byte(member, 1)
    if b == 0 or b == 255 then
      return string.sub(member, 9)
    end
    return member
  end

  -- Add waiting tasks {due1, member1, due2, member2, ...} of one group; the group, if it was
  -- in none of wait/ring/full, enters wait at its earliest due time (reserve.lua moves it on).
  -- Returns whether that made it the earliest group waiting (a worker may need waking).
  function M.add(gk, group, entries)
    for i = 1, #entries, 2000 do
      redis.call('ZADD', M.queue(gk, group), unpack(entries, i, math.min(i + 1999, #entries)))
    end
    local index = {}
    for i = 1, #entries, 2 do
      index[i], index[i + 1] = entries[i], M.id_of(entries[i + 1])
    end
    for i = 1, #index, 2000 do
      redis.call('ZADD', gk.all, unpack(index, i, math.min(i + 1999, #index)))
    end
    if redis.call('ZSCORE', gk.ring, group) or redis.call('ZSCORE', gk.full, group) then
      return false
    end
    local due = entries[1]
    for i = 3, #entries, 2 do
      due = math.min(due, entries[i])
    end
    local old = tonumber(redis.call('ZSCORE', gk.wait, group))
    if old and old <= due then
      return false
    end
    local head = tonumber(redis.call('ZRANGE', gk.wait, 0, 0, 'WITHSCORES')[2])
    redis.call('ZADD', gk.wait, due, group)
    return head == nil or due < head
  end

  -- Take a waiting task (its group, id, priority) out of its group's queue; returns whether
  -- it was waiting.  An emptied group leaves wait, ring and full.
  function M.remove(gk, group, id, priority)
    local q = M.queue(gk, group)
    if redis.call('ZREM', q, M.member(id, priority)) == 0 then
      return false
    end
    redis.call('ZREM', gk.all, id)
    if redis.call('EXISTS', q) == 0 then
      redis.call('ZREM', gk.wait, group)
      redis.call('ZREM', gk.ring, group)
      redis.call('ZREM', gk.full, group)
    end
    return true
  end

  -- The due time of a waiting grouped task, or nil.
  function M.due(gk, group, id, priority)
    return tonumber(redis.call('ZSCORE', M.queue(gk, group), M.member(id, priority)))
  end

  -- A lease of `group` ended (acked, retried, dead-lettered, expired, aborted): its slot
  -- frees, and a group waiting for one at its cap may lease again (reserve.lua checks the
  -- cap when the group's turn comes).  Returns whether a worker should be woken.
  function M.release(gk, group)
    return M.release_many(gk, { [group] = 1 })
  end

  -- M.release for the leases that ended of several groups, {group -> count}, in a few
  -- calls whatever their number (ack.lua ends a batch).
  function M.release_many(gk, ended)
    local groups, kept, emptied = {}, {}, {}
    for g in pairs(ended) do
      groups[#groups + 1] = g
    end
    local counts = redis.call('HMGET', gk.run, unpack(groups))
    for k, g in ipairs(groups) do
      local left = (tonumber(counts[k]) or 0) - ended[g]
      if left > 0 then
        kept[#kept + 1] = g
        kept[#kept + 1] = int_text(left)
      else
        emptied[#emptied + 1] = g
      end
    end
    if #kept > 0 then
      redis.call('HSET', gk.run, unpack(kept))
    end
    if #emptied > 0 then
      redis.call('HDEL', gk.run, unpack(emptied))
    end
    -- A group that waited at its cap goes straight back to the ring, with the next turns
    -- (reserve.lua checks its head, cap and rate when its turn comes).  Without a cap, no
    -- group ever waits there.
    if redis.call('EXISTS', gk.full) == 0 then
      return false
    end
    local names = {}
    for k, score in ipairs(redis.call('ZMSCORE', gk.full, unpack(groups))) do
      if score then
        names[#names + 1] = groups[k]
      end
    end
    if #names == 0 then
      return false
    end
    redis.call('ZREM', gk.full, unpack(names))
    local turn = redis.call('INCRBY', gk.turn, #names) - #names
    local back = {}
    for k, g in ipairs(names) do
      back[#back + 1] = int_text(turn + k)
      back[#back + 1] = g
    end
    redis.call('ZADD', gk.ring, unpack(back))
    return true
  end

  -- The group settings in the controls hash: cap (or nil) and a rate table (or nil), or an
  -- error reply for a value set by hand that does not parse.
  function M.settings(controls)
    local got = redis.call('HMGET', controls, 'group_max_running', 'group_rate_limit')
    local s = {}
    if got[1] then
      s.cap = tonumber(got[1])
      if not s.cap or s.cap < 1 or s.cap ~= math.floor(s.cap) then
        return nil, redis.error_reply('ERR delayq key ' .. controls .. ' holds group_max_running "'
          .. got[1] .. '", not a positive count')
      end
    end
    if got[2] then
      local n, unit = string.match(got[2], '^(%d+)/([smh])$')
      s.rate, s.window = tonumber(n), RATE_WINDOW_MS[unit]
      if not s.rate or s.rate < 1 then
        return nil, redis.error_reply('ERR delayq key ' .. controls .. ' holds group_rate_limit "'
          .. got[2] .. '", not "N/s", "N/m" or "N/h"')
      end
    end
    return s, nil
  end

  -- Lease up to `quota` due tasks round-robin over the groups that may lease (see the top).
  -- `s`: the settings.  Returns {id1, group1, id2, group2, ...}, taken out of their
  -- queues (the caller leases them, then calls M.started with those it did lease), and
  -- the leases each group held before (group -> count, for the groups whose count it read:
  -- those of a topic with a cap).
  -- Calls that touch several groups are made once a round: a lease costs its group's
  -- ZPOPMIN, plus its share of a few calls a round.  The round's groups are read with a
  -- ZRANGE, not popped: a ZPOPMIN of the ring cost ~1 us a group more (it replies each
  -- score), and the ZADD that gives a group its next turn moves it as well.
  function M.take(gk, s, now, quota)
    -- Groups whose wait ended join the ring, earliest first.
    local turn = tonumber(redis.call('GET', gk.turn)) or 0
    local woke = redis.call('ZRANGE', gk.wait, '-inf', now, 'BYSCORE', 'LIMIT', 0, 1000)
    if #woke > 0 then
      local adds = {}
      for _, g in ipairs(woke) do
        turn = turn + 1
        adds[#adds + 1] = int_text(turn)
        adds[#adds + 1] = g
      end
      redis.call('ZADD', gk.ring, unpack(adds))
      redis.call('ZREM', gk.wait, unpack(woke))
    end
    local picks, held, before, rates = {}, {}, {}, {}
    local now_text = int_text(now)
    local taken = 0
    while taken < quota do
      local ranked = redis.call('ZRANGE', gk.ring, 0, quota - taken - 1)
      if #ranked == 0 then
        break
      end
      if s.cap then
        local unread = {}
        for _, g in ipairs(ranked) do
          if not held[g] then
            unread[#unread + 1] = g
          end
        end
        if #unread > 0 then
          for k, count in ipairs(redis.call('HMGET', gk.run, unpack(unread))) do
            held[unread[k]] = tonumber(count) or 0
            before[unread[k]] = held[unread[k]]
          end
        end
      end
      -- again: the groups that take the next turns; gone: those that leave the ring.
      local again, gone, waits, fulls = {}, {}, {}, {}
      local qbase = gk.base .. 'q:'
      for _, g in ipairs(ranked) do
        local q = qbase .. g
        local rate = s.rate and rates[g]
        if s.rate and not rate then
          rate = { rate = s.rate, window = s.window }
          rate_window(rate, M.starts(gk, g), now)
          rates[g] = rate
        end
        if s.cap and held[g] >= s.cap then
          fulls[#fulls + 1] = now_text
          fulls[#fulls + 1] = g
          gone[#gone + 1] = g
        elseif rate and rate_allows(rate) == 0 then
          waits[#waits + 1] = rate_reopens(rate)
          waits[#waits + 1] = g
          gone[#gone + 1] = g
        else
          local head = redis.call('ZPOPMIN', q)
          if not head[1] then
            gone[#gone + 1] = g  -- emptied (its last task cancelled or leased)
          else
            local due = tonumber(head[2])
            if due > now then
              redis.call('ZADD', q, head[2], head[1])
              waits[#waits + 1] = due
              waits[#waits + 1] = g
              gone[#gone + 1] = g
            else
              local member, class = head[1], string.byte(head[1], 1)
              picks[#picks + 1] = (class == 0 or class == 255) and string.sub(member, 9) or member
              picks[#picks + 1] = g
              taken = taken + 1
              if s.cap then
                held[g] = held[g] + 1
              end
              if rate then
                rate_record(rate, M.starts(gk, g), 1)
              end
              -- The group's next place, without reading its next task (a call a lease):
              -- when that is not due, or there is none, the group's next turn finds out.
              if s.cap and held[g] >= s.cap then
                fulls[#fulls + 1] = now_text
                fulls[#fulls + 1] = g
                gone[#gone + 1] = g
              else
                turn = turn + 1
                again[#again + 1] = int_text(turn)
                again[#again + 1] = g
              end
            end
          end
        end
      end
      if #gone > 0 then
        redis.call('ZREM', gk.ring, unpack(gone))
      end
      if #again > 0 then
        redis.call('ZADD', gk.ring, unpack(again))
      end
      if #waits > 0 then
        redis.call('ZADD', gk.wait, unpack(waits))
      end
      if #fulls > 0 then
        redis.call('ZADD', gk.full, unpack(fulls))
      end
    end
    if taken > 0 then
      local ids = {}
      for i = 1, #picks, 2 do
        ids[#ids + 1] = picks[i]
      end
      redis.call('ZREM', gk.all, unpack(ids))
    end
    redis.call('SET', gk.turn, int_text(turn))
    return picks, before
  end

  -- Count the leases taken, {group -> count}, in <grp:run>: one HSET a call, and one HMGET
  -- of the groups whose count take() did not read (`before`: group -> count it read).
  function M.started(gk, counts, before)
    local groups, values = {}, {}
    for g, n in pairs(counts) do
      if before[g] then
        values[#values + 1] = g
        values[#values + 1] = int_text(before[g] + n)
      else
        groups[#groups + 1] = g
      end
    end
    if #groups > 0 then
      for k, count in ipairs(redis.call('HMGET', gk.run, unpack(groups))) do
        values[#values + 1] = groups[k]
        values[#values + 1] = int_text((tonumber(count) or 0) + counts[groups[k]])
      end
    end
    redis.call('HSET', gk.run, unpack(values))
  end

  -- When a group next may lease, for the caller's next look: now when one is in the ring,
  -- else the earliest of wait (nil: none).
  function M.next_due(gk, now)
    if redis.call('ZCARD', gk.ring) > 0 then
      return now
    end
    return tonumber(redis.call('ZRANGE', gk.wait, 0, 0, 'WITHSCORES')[2])
  end

  group_helpers = M
  return M
end
