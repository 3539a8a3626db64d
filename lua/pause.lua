-- The kill switch in one shard, on its own: sets the shard's `paused` flag
-- without touching anything else (the operator flips it first on every pass,
-- before it reads PostgreSQL or Kafka, so an outage of either cannot delay
-- it). A shard without metadata is not written: nothing is sold from it.
--
-- KEYS[1] meta   ARGV[1] '1' paused, '0' not
-- Reply: 1 changed, 0 already so, -1 no metadata
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
if redis.call('HGET', KEYS[1], 'paused') == ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'paused', ARGV[1])
return 1
