-- A shopper's place in a sale's admission queue, joining it first if needed.
-- KEYS[1]: the queue, a sorted set of shoppers by score (lottery draws
--          before the start, arrival times after: domain::admission).
-- ARGV[1]: the shopper.
-- ARGV[2]: the score to join with: a new draw or arrival, or the one the
--          shopper's ticket carries, so a queue lost with Redis is rebuilt
--          in the same order as its tickets come back.
-- Returns {score, rank, length}: the shopper's score (the first one, when
-- already in line, as a string), 0-based rank and the queue's length.
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score then
  redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
  score = ARGV[2]
end
return {score, redis.call('ZRANK', KEYS[1], ARGV[1]), redis.call('ZCARD', KEYS[1])}
