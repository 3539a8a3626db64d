-- The members of a zset scored by Redis time (ms) that are older than a
-- minimum age, by this node's own clock: the janitor's view of transfers
-- still in transit (xpend) and reservations still R (pend).
--
-- KEYS[1] zset   ARGV[1] minimum age in ms, ARGV[2] most members to return
-- (0: only how many there are), ARGV[3] optional: only members scored
-- before this instant (ms, this node's clock)
-- Reply: {now_ms, member, score, member, score, ...}, or {now_ms, count}
-- when ARGV[2] is 0
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local bound = now - tonumber(ARGV[1])
if ARGV[3] ~= nil and tonumber(ARGV[3]) < bound then bound = tonumber(ARGV[3]) end
local limit = tonumber(ARGV[2])
if limit == 0 then
  return {now, redis.call('ZCOUNT', KEYS[1], '-inf', '(' .. bound)}
end
local found = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. bound,
  'WITHSCORES', 'LIMIT', 0, limit)
local reply = {now}
for i = 1, #found do reply[#reply + 1] = found[i] end
return reply
