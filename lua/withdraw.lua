-- A shrink takes units out of sale shard by shard before the database's stock
-- is lowered, so Redis never sells more than the new stock (units leave Redis
-- first, the database follows). One record per shrink and shard, in the
-- shard's `wd` hash: "<generation>:<target stock>" -> "A:<units>" (active) or
-- "U:<units>" (undone: the shrink was refused or replaced, the units came back).
--
-- KEYS[1] stock, KEYS[2] wd hash, KEYS[3] meta (`arrivals` counter)
-- ARGV[1] shrink id, ARGV[2] mode: take | undo, ARGV[3] units wanted (take)
-- take: idempotent; takes min(wanted, stock) once; a repeat returns what the
--       first took (after an undo it takes anew).   Reply {units taken}
-- undo: gives an active record's units back once.   Reply {units returned}
-- A shard without metadata (its state was lost) is not written: {-1}.
local stock_key, wd_key, meta_key = KEYS[1], KEYS[2], KEYS[3]
local id, mode, wanted = ARGV[1], ARGV[2], tonumber(ARGV[3] or '0')
local record = redis.call('HGET', wd_key, id)
if redis.call('EXISTS', meta_key) == 0 then return {-1} end
if mode == 'take' then
  -- A shrink refused and undone may be asked again: it takes anew.
  if record and string.sub(record, 1, 1) == 'A' then return {tonumber(string.sub(record, 3))} end
  local available = math.max(tonumber(redis.call('GET', stock_key) or '0'), 0)
  local take = math.min(available, math.max(wanted, 0))
  redis.call('DECRBY', stock_key, take)
  redis.call('HSET', wd_key, id, 'A:' .. take)
  return {take}
end
if not record or string.sub(record, 1, 1) ~= 'A' then return {0} end
local units = tonumber(string.sub(record, 3))
redis.call('INCRBY', stock_key, units)
redis.call('HSET', wd_key, id, 'U:' .. units)
redis.call('HINCRBY', meta_key, 'arrivals', 1)
return {units}
