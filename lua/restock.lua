-- Applies a stock change (restock or shrink) to a warmed sale, exactly once
-- per sale generation: the new total and its generation are recorded in shard
-- 0's metadata in the same step that moves shard 0's stock, so a retry after a
-- crash can neither miss nor double the change. Shard 0 may go negative on a
-- shrink; its shoppers then borrow from the other shards (see purchase.lua).
--
-- KEYS[1] stock of shard 0, KEYS[2] meta of shard 0
-- ARGV[1] new stock total, ARGV[2] its generation
-- Replies: {0, delta} applied   {1} this generation (or a newer one) was applied already
--          {2} the sale was never warmed
local stock_key, meta_key = KEYS[1], KEYS[2]
local total, generation = tonumber(ARGV[1]), tonumber(ARGV[2])
local m = redis.call('HMGET', meta_key, 'stock_total', 'generation')
if not m[1] or not m[2] then return {2} end
if tonumber(m[2]) >= generation then return {1} end
local delta = total - tonumber(m[1])
redis.call('INCRBY', stock_key, delta)
redis.call('HSET', meta_key, 'stock_total', total, 'generation', generation)
return {0, delta}
