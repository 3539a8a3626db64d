-- Loads one shard of a sale at warm-up (or at its recovery from a lost state),
-- once per incarnation: every key of an older incarnation goes, and the
-- shard's stock and metadata (closed: warmed=0) are written together. A shard
-- that already holds this incarnation is left as it is: a warm-up that failed
-- half-way and resumes must never reset a shard that opened and sold. The
-- incarnation (stored in the database before any shard is loaded) is also how
-- a lost or replaced Redis state is told from the one the sale was given.
--
-- KEYS[1] meta, KEYS[2] stock, KEYS[3..] the shard's other keys (units,
-- reservations, ...: deleted when a new incarnation is loaded)
-- ARGV[1] incarnation, ARGV[2] units, ARGV[3...] metadata field, value pairs
-- Replies: {0} loaded now   {1} this incarnation, still closed   {2} this incarnation, open
local m = redis.call('HMGET', KEYS[1], 'inc', 'warmed')
if m[1] == ARGV[1] then
  if m[2] == '1' then return {2} end
  return {1}
end
for i = 2, #KEYS do redis.call('DEL', KEYS[i]) end
redis.call('SET', KEYS[2], ARGV[2])
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'inc', ARGV[1], unpack(ARGV, 3))
return {0}
