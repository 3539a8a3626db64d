-- Second half of a stock transfer: credits the receiving shard, exactly once
-- per transfer id (the xin record remembers it).
--
-- KEYS[1] stock, KEYS[2] xin hash: transfer id -> "<amount>:<credited_ms>"
-- ARGV[1] transfer id, ARGV[2] amount, ARGV[3] created_ms of the transfer,
-- ARGV[4] max age in ms (0 = any age). The API passes a max age so that a very
-- late credit can never race reconciliation, which finishes old transfers itself.
-- Replies: {0} credited   {1} already credited   {2} too old: left to reconciliation
local stock_key, xin_key = KEYS[1], KEYS[2]
local id, amount, created, max_age = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
if redis.call('HEXISTS', xin_key, id) == 1 then return {1} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if max_age > 0 and now - created > max_age then return {2} end
redis.call('INCRBY', stock_key, amount)
redis.call('HSET', xin_key, id, amount .. ':' .. now)
return {0}
