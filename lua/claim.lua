-- A consumer claims a reservation before persisting its order: R -> C, once.
-- The loser of the race with release.lua follows the winner: a claim that finds
-- X drops the message (the shopper was told no); a release that finds C answers
-- the shopper 202 after all.
--
-- KEYS[1] res (one shard's slot; see purchase.lua)   ARGV[1] order id
-- Replies: {0, qty, shopper} claimed now   {1, qty, shopper} already claimed (a redelivery)
--          {2} released: drop the message   {4} no such reservation
local r = redis.call('HGET', KEYS[1], ARGV[1])
if not r then return {4} end
local state, qty, created, shopper = string.match(r, '^(%u):(%d+):(%d+):(.*)$')
if state == 'X' then return {2} end
if state == 'C' then return {1, tonumber(qty), shopper} end
redis.call('HSET', KEYS[1], ARGV[1], 'C:' .. qty .. ':' .. created .. ':' .. shopper)
return {0, tonumber(qty), shopper}
