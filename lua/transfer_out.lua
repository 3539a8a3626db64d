-- First half of moving stock between shards: takes units out of a donor shard,
-- records the transfer there and lists it as in transit (xpend) until the
-- receiving shard is credited. Stock is taken before it is credited anywhere,
-- so a crash between the halves can strand units for a moment (the API's
-- janitor finishes the transfer) but never create them.
--
-- Idempotent by transfer id: a Redis Cluster client re-sends a script after an
-- IO error, and the second run must not debit again.
--
-- KEYS[1] stock, KEYS[2] xout hash: transfer id -> "<to shard>:<amount>:<created_ms>",
-- KEYS[3] xpend zset: transfers not yet credited, scored by created_ms
-- ARGV[1] transfer id, ARGV[2] receiving shard, ARGV[3] units wanted
-- Takes max(wanted, half the donor's stock), at most what the donor has.
-- Replies: {amount taken, created_ms}; amount 0 when the donor is empty.
local stock_key, xout_key, xpend_key = KEYS[1], KEYS[2], KEYS[3]
local id, to, wanted = ARGV[1], ARGV[2], tonumber(ARGV[3])
local prior = redis.call('HGET', xout_key, id)
if prior then
  local _, amount, created = string.match(prior, '^(%d+):(%d+):(%d+)$')
  return {tonumber(amount), tonumber(created)}
end
local available = tonumber(redis.call('GET', stock_key) or '0')
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if available <= 0 or wanted == nil or wanted < 1 then return {0, now} end
local take = math.min(available, math.max(wanted, math.floor(available / 2)))
redis.call('DECRBY', stock_key, take)
redis.call('HSET', xout_key, id, to .. ':' .. take .. ':' .. now)
redis.call('ZADD', xpend_key, now, id)
return {take, now}
