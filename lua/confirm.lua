-- Records that the broker acknowledged the messages of reservations (R -> A),
-- so that a retry of the purchase (its Idempotency-Key) can be answered with
-- the order at once, and the janitor, which releases only R reservations
-- whose message cannot come any more, leaves them alone.
--
-- KEYS[1] res, KEYS[2] pend (one shard's slot; see purchase.lua)   ARGV order ids
-- Replies, one per order id in ARGV order:
--   0 acknowledged (now or before)   1 claimed by a consumer already
--   2 released: the shopper must not be told it was accepted   3 no such reservation
local replies = {}
for i, id in ipairs(ARGV) do
  local r = redis.call('HGET', KEYS[1], id)
  if not r then
    replies[i] = 3
  else
    local state = string.sub(r, 1, 1)
    if state == 'R' then
      redis.call('HSET', KEYS[1], id, 'A' .. string.sub(r, 2))
      redis.call('ZREM', KEYS[2], id)
      replies[i] = 0
    elseif state == 'A' then
      replies[i] = 0
    elseif state == 'C' then
      replies[i] = 1
    else
      replies[i] = 2
    end
  end
end
return replies
