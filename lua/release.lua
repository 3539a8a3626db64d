-- Returns a reservation's units to its shard, exactly once: moves it from the
-- expected state to X (released), giving back the stock and the shopper's units.
--
-- KEYS[1] stock, KEYS[2] units, KEYS[3] res, KEYS[4] meta (`arrivals` counter),
-- KEYS[5] pend zset of R reservations   (one shard's slot; see purchase.lua)
-- KEYS[6] optional: the purchase token the order used; freed when this call
--         releases the reservation (the API after a failed produce: it bought nothing)
-- ARGV[1] order id
-- ARGV[2] expected state: R (the API after a failed produce, or the janitor),
--         A (acknowledged by the broker, never claimed: reconciliation only),
--         C (a claimed order that failed, was cancelled or timed out)
-- ARGV[3] minimum age in ms: younger reservations are left alone (0 = any age)
-- ARGV[4] shopper or '': when set and no reservation exists, a tombstone
--         "X:0:<now>:<shopper>" is written, so a purchase script of this order
--         id that runs late (its reply timed out) finds it released and
--         reserves nothing
-- ARGV[5] '1' to forget: the record is deleted instead of kept as X. Only for
--         an order the database holds (a cancel, a payment timeout, a refund):
--         its outcome lives there from now on, a redelivered message of it
--         finds it there, and a shopper's buy-and-cancel churn leaves nothing
--         behind in Redis
--
-- Replies: {0, qty} released   {1} found R   {2} found C   {3} found X (already released)
--          {4} no such reservation   {5} younger than the minimum age   {6} found A
--          {9} malformed
local stock_key, units_key, res_key, meta_key, pend_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local order_id, expected, min_age, tombstone = ARGV[1], ARGV[2], tonumber(ARGV[3] or '0'), ARGV[4]
local forget = ARGV[5] == '1'
if order_id == nil or order_id == '' or (expected ~= 'R' and expected ~= 'A' and expected ~= 'C')
    or min_age == nil then
  return {9}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local r = redis.call('HGET', res_key, order_id)
if not r then
  if tombstone ~= nil and tombstone ~= '' then
    redis.call('HSET', res_key, order_id, 'X:0:' .. now .. ':' .. tombstone)
  end
  return {4}
end
local state, qty, created, shopper = string.match(r, '^(%u):(%d+):(%d+):(.*)$')
if state ~= expected then
  if state == 'R' then return {1} elseif state == 'A' then return {6}
  elseif state == 'C' then return {2} else return {3} end
end
if min_age > 0 and now - tonumber(created) < min_age then return {5} end
redis.call('INCRBY', stock_key, qty)
if redis.call('HINCRBY', units_key, shopper, -tonumber(qty)) <= 0 then
  redis.call('HDEL', units_key, shopper)
end
if forget then
  redis.call('HDEL', res_key, order_id)
else
  redis.call('HSET', res_key, order_id, 'X:' .. qty .. ':' .. created .. ':' .. shopper)
end
redis.call('ZREM', pend_key, order_id)
redis.call('HINCRBY', meta_key, 'arrivals', 1)
if KEYS[6] and redis.call('GET', KEYS[6]) == order_id then redis.call('DEL', KEYS[6]) end
return {0, tonumber(qty)}
