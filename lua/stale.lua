-- The members of a zset scored by Redis time (ms) that are older than a
-- minimum age, by this node's own clock: the janitor's view of transfers
-- still in transit (xpend) and reservations still R (pend).
--
-- KEYS[1] zset   ARGV[1] minimum age in ms, ARGV[2] most members to return
-- Reply: {now_ms, member, score, member, score, ...}
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local found = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. (now - tonumber(ARGV[1])),
  'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[2]))
local reply = {now}
for i = 1, #found do reply[#reply + 1] = found[i] end
return reply
