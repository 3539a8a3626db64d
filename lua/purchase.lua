-- Decides one purchase atomically, inside one stock shard of one sale.
-- Every key is in the shard's hash-tag slot, so this runs on one Redis Cluster node.
--
-- KEYS[1] meta   hash  warmed, paused, busy, start_ms, end_ms, limit (a copy per shard)
-- KEYS[2] stock  int   units left in this shard
-- KEYS[3] units  hash  shopper -> units held (shoppers whose home is this shard)
-- KEYS[4] res    hash  order id -> reservation "<state>:<qty>:<created_ms>:<shopper>"
--                      state R reserved, A acknowledged by the broker (lua/confirm.lua),
--                      C claimed by a consumer, X released
-- KEYS[5] idem   hash  "<length of shopper>:<shopper>|<idempotency key>" -> order id
--                      (the length makes the field unambiguous whatever the two hold)
-- KEYS[6] pend   zset  reservations still R, scored by created_ms: the janitor
--                      releases the ones whose message can no longer come
-- KEYS[7] tok    string (only for a sale that needs purchase tokens): the order id
--                      that used the token shown
-- ARGV[1] shopper, ARGV[2] quantity, ARGV[3] order id, ARGV[4] idempotency key or '',
-- ARGV[5] (with KEYS[7]) how long to remember the token, ms
--
-- Replies (the first element is the code; workload/src/domain/purchase.rs reads them):
--   {0, order id, stock left}   accepted: stock deducted, units counted, reservation R
--   {1} not warmed   {2} paused   {3, start_ms} not started   {4} ended   {5} busy
--   {6, stock left}             this shard cannot cover the quantity: borrow, then retry
--   {7, units held, limit}      the shopper would exceed the purchase limit
--   {8, order id, state}        a retry of an order already decided: its first answer
--   {9}                         malformed arguments
--   {10}                        the sale's Redis state was lost (lua/fence.lua): nothing reserved
--   {11}                        the purchase token was used by another order
local meta, stock_key, units_key, res_key, idem_key, pend_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local token_key = KEYS[7]
local shopper, qty, order_id, idem = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local token_ms = tonumber(ARGV[5])
if shopper == nil or shopper == '' or order_id == nil or order_id == ''
    or qty == nil or qty < 1 or qty ~= math.floor(qty)
    or (token_key ~= nil and (token_ms == nil or token_ms < 1)) then
  return {9}
end

-- Idempotency first: a retry must get the first answer even after the window closed.
local previous = redis.call('HGET', res_key, order_id)
if previous then
  return {8, order_id, string.sub(previous, 1, 1)}
end
local idem_field = nil
if idem ~= nil and idem ~= '' then
  idem_field = #shopper .. ':' .. shopper .. '|' .. idem
  local first = redis.call('HGET', idem_key, idem_field)
  if first then
    local r = redis.call('HGET', res_key, first)
    -- A released first attempt was answered with a failure: this retry buys anew.
    if r and string.sub(r, 1, 1) ~= 'X' then
      return {8, first, string.sub(r, 1, 1)}
    end
  end
end

-- A token buys once: a refusal here never marks it used, and an API whose
-- produce failed frees it as it releases the reservation (lua/release.lua).
if token_key then
  local user = redis.call('GET', token_key)
  if user and user ~= order_id then return {11} end
end

local m = redis.call('HMGET', meta, 'warmed', 'paused', 'start_ms', 'end_ms', 'limit', 'busy', 'lost')
if m[7] == '1' then return {10} end
if m[1] ~= '1' then return {1} end
if m[2] == '1' then return {2} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now < tonumber(m[3]) then return {3, m[3]} end
if now >= tonumber(m[4]) then return {4} end
if m[6] == '1' then return {5} end

local limit = tonumber(m[5])
local held = tonumber(redis.call('HGET', units_key, shopper) or '0')
local available = tonumber(redis.call('GET', stock_key) or '0')
-- A shopper over the limit is refused before any stock moves toward this shard.
if held + qty > limit then return {7, held, limit} end
if available < qty then return {6, available} end

redis.call('DECRBY', stock_key, qty)
redis.call('HINCRBY', units_key, shopper, qty)
redis.call('HSET', res_key, order_id, 'R:' .. qty .. ':' .. now .. ':' .. shopper)
redis.call('ZADD', pend_key, now, order_id)
if idem_field then redis.call('HSET', idem_key, idem_field, order_id) end
-- Relative to now: the token's expiry is by the API's clock, not this one's.
if token_key then redis.call('SET', token_key, order_id, 'PX', token_ms) end
return {0, order_id, available - qty}
