-- Writes the sale's metadata into one shard that still holds it: the kill
-- switch, backpressure, window and limit changes of a live sale, and the
-- opening at the end of a warm-up. A shard without metadata (its state was
-- lost: a restart, a flush, a failover to a replica that never had it) is
-- not written: a plain HSET would bring it back "warmed" with no stock, and
-- its purchases would be told SOLD_OUT instead of waiting for the recovery.
--
-- KEYS[1] meta   ARGV field, value pairs
-- Reply: 1 written, 0 no metadata
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
