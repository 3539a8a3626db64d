-- Fences a shard of a sale whose Redis state was found lost (a consumer met an
-- accepted order without its reservation): purchase.lua then answers "state
-- lost" and reserves nothing, until a recovery loads a new incarnation (which
-- rewrites the metadata). A shard without metadata is not written: it refuses
-- purchases already, and no key may appear on a partial state.
--
-- KEYS[1] meta   Reply: 1 fenced, 0 no metadata
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'lost', '1')
return 1
