-- Reads what a sold-out decision needs from one shard, atomically: units left,
-- transfers taken out of it and not yet credited anywhere (those units are in
-- no shard's stock), and how many times units arrived in it. Two rounds over
-- every shard that read the same arrivals and find nothing anywhere prove the
-- sale was sold out between them (a unit moving into an already-read shard
-- would have moved its counter).
--
-- KEYS[1] stock, KEYS[2] xpend, KEYS[3] meta
-- Reply: {stock, transfers in transit, arrivals}
return {
  tonumber(redis.call('GET', KEYS[1]) or '0'),
  redis.call('ZCARD', KEYS[2]),
  tonumber(redis.call('HGET', KEYS[3], 'arrivals') or '0'),
}
