-- Second half of a stock transfer: credits the receiving shard, exactly once
-- per transfer id (the xin record remembers it; records are kept until the
-- sale's cleanup, so a late or repeated credit always finds it). Ages are not
-- compared here: the ids' creation times come from another node's clock.
-- The caller then takes the id off the donor's xpend set.
--
-- KEYS[1] stock, KEYS[2] xin hash: transfer id -> "<amount>:<credited_ms>",
-- KEYS[3] meta (its `arrivals` counter moves with every unit that arrives)
-- ARGV[1] transfer id, ARGV[2] amount
-- Replies: {0} credited   {1} already credited   {3} the shard has no metadata:
--          its state was lost, nothing is written (see docs/reliability.md)
local stock_key, xin_key, meta_key = KEYS[1], KEYS[2], KEYS[3]
local id, amount = ARGV[1], tonumber(ARGV[2])
if redis.call('HEXISTS', xin_key, id) == 1 then return {1} end
if redis.call('EXISTS', meta_key) == 0 then return {3} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('INCRBY', stock_key, amount)
redis.call('HSET', xin_key, id, amount .. ':' .. now)
redis.call('HINCRBY', meta_key, 'arrivals', 1)
return {0}
