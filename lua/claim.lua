-- A consumer claims the reservations of a batch's orders in one shard before
-- persisting them: R -> C, once each. One call per shard and batch, so a
-- batch costs a round trip per shard, not per order.
-- The loser of the race with release.lua follows the winner: a claim that finds
-- X drops the message (the shopper was told no); a release that finds C answers
-- the shopper 202 after all.
--
-- KEYS[1] res, KEYS[2] pend (one shard's slot; see purchase.lua)   ARGV order ids
-- Replies, one per order id in ARGV order:
--          {0, qty, shopper} claimed now   {1, qty, shopper} already claimed (a redelivery)
--          {2} released: drop the message   {4} no such reservation
local replies = {}
local claimed = {}
for i, id in ipairs(ARGV) do
  local r = redis.call('HGET', KEYS[1], id)
  if not r then
    replies[i] = {4}
  else
    local state, qty, created, shopper = string.match(r, '^(%u):(%d+):(%d+):(.*)$')
    if state == 'X' then
      replies[i] = {2}
    elseif state == 'C' then
      replies[i] = {1, tonumber(qty), shopper}
    else
      redis.call('HSET', KEYS[1], id, 'C:' .. qty .. ':' .. created .. ':' .. shopper)
      claimed[#claimed + 1] = id
      replies[i] = {0, tonumber(qty), shopper}
    end
  end
end
-- In chunks: unpack() is bounded by Lua's C stack.
for from = 1, #claimed, 1000 do
  redis.call('ZREM', KEYS[2], unpack(claimed, from, math.min(from + 999, #claimed)))
end
return replies
