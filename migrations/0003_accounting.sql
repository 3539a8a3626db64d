-- A sale whose order topic is drained for good (it is Completed, or being
-- deleted after its orders drained): no consumer needs to run for it any more.
-- Set by the operator; consumers that serve a whole namespace read it.
ALTER TABLE sales ADD COLUMN drained_at timestamptz;

-- The order's units go back to Redis after the database said so (a cancel, a
-- payment timeout): the row is written in the same transaction as the status
-- change and deleted once Redis released the reservation, so a failed
-- release is retried (by every API's janitor) instead of lost.
CREATE TABLE stock_returns (
    order_id   uuid        PRIMARY KEY,
    namespace  text        NOT NULL,
    name       text        NOT NULL,
    shard      integer     NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX stock_returns_by_namespace ON stock_returns (namespace, created_at);

-- The incarnation of the sale's Redis state: written here before warm-up
-- loads any shard, so a warm-up that failed half-way resumes under the same
-- one, and a Redis state that lost it is recognized.
ALTER TABLE sales ADD COLUMN incarnation uuid;

-- When the current incarnation was loaded, verified and opened (NULL while a
-- warm-up or a recovery loads it), and when its loss was noticed (NULL while
-- Redis holds it): a restart, a flush or a failover that dropped writes. While
-- set, the sale takes no orders; the operator re-warms it from this database
-- once its orders are drained (docs/reliability.md).
ALTER TABLE sales ADD COLUMN opened_at timestamptz;
ALTER TABLE sales ADD COLUMN redis_lost_at timestamptz;

-- The shopper's Idempotency-Key of the purchase, so a recovered Redis state
-- answers a retry with its first order.
ALTER TABLE orders ADD COLUMN idempotency_key text;
