-- Records a stock change (restock or shrink) of a warmed sale in shard 0's
-- metadata, exactly once per sale generation. A restock (the database's stock
-- was raised first) adds the difference to shard 0's stock in the same step; a
-- shrink's units already left the shards (lua/withdraw.lua), so only the new
-- total is recorded — the database is lowered after this.
--
-- KEYS[1] stock of shard 0, KEYS[2] meta of shard 0
-- ARGV[1] new stock total, ARGV[2] its generation, ARGV[3] mode: add | record
-- Replies: {0, delta} applied (delta added to the stock: 0 for record)
--          {1} this generation (or a newer one) was applied already
--          {2} the sale was never warmed
local stock_key, meta_key = KEYS[1], KEYS[2]
local total, generation, mode = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local m = redis.call('HMGET', meta_key, 'stock_total', 'generation')
if not m[1] or not m[2] then return {2} end
if tonumber(m[2]) >= generation then return {1} end
local delta = 0
if mode == 'add' then
  delta = total - tonumber(m[1])
  redis.call('INCRBY', stock_key, delta)
  redis.call('HINCRBY', meta_key, 'arrivals', 1)
end
redis.call('HSET', meta_key, 'stock_total', total, 'generation', generation)
return {0, delta}
