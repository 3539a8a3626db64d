-- Uses a purchase token once: the first purchase that shows it records its
-- nonce until the token expires. A retry of that same purchase (the same
-- Idempotency-Key) may show it again and gets the first answer from the
-- purchase script; anything else showing it again is refused.
--
-- KEYS[1] the token's used-key (lives on the shopper's home shard)
-- ARGV[1] the purchase's Idempotency-Key, '' when none
-- ARGV[2] the token's expiry, Unix ms
-- Reply: 1 this purchase may use it, 0 used by another
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PXAT', ARGV[2]) then return 1 end
if ARGV[1] ~= '' and redis.call('GET', KEYS[1]) == ARGV[1] then return 1 end
return 0
