-- _replace.lua: on_conflict 'replace' (debounce), inlined after _layout, _priority and _groups into
-- send.lua and send_many.lua, so that one send and a batch replace a task the same way.
-- A live task that still waits (delayed or ready) is taken out of where it waits, then
-- stored and scheduled anew by the caller, as a new send would be (new header: attempts 0,
-- token 0, the new options and due time; the new body; its last error deleted).  A task
-- that is reserved (running) is never replaced: a new body under it would race its ack.

-- Where the live task `id` waits, read before any write: the schedule slot that holds it
-- (priority 0) or nil, and whether it waits at all (in a slot or among the priority tasks).
-- `e` is its parsed header (nil when unreadable: it waits nowhere a script could find).
-- A live task that waits nowhere (neither reserved nor scheduled: a header without its
-- schedule entry) is replaced all the same: nothing would ever run it as it is.
local function waiting_place(prefix, wheel, pk, id, e)
  if not e then
    return nil, false
  end
  if e.group then
    return nil, grp().due(grp().keys(prefix), e.group, id, e.priority) ~= nil
  end
  if e.priority == 0 then
    local slot = slot_of(prefix, wheel, id, e.due)
    return slot, slot ~= nil
  end
  return nil, prio().due(pk, id) ~= nil
end

-- Take the task out of where waiting_place found it (the caller checked the types of the
-- priority keys first).  Returns how many entries the schedule lost (for its count).
local function unwait(prefix, wheel, pk, id, e, slot, waiting)
  if slot then
    redis.call('ZREM', slot_key(prefix, slot), id)
    forget_if_empty(prefix, wheel, slot)
    return 1
  end
  if waiting and e.group then
    grp().remove(grp().keys(prefix), e.group, id, e.priority)
  elseif waiting then
    prio().remove(pk, id, e.due, e.priority)
  end
  return 0
end
