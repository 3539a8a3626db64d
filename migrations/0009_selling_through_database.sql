-- spec.degradation.redisDown: database. While Redis is unreachable or the
-- sale's Redis state is lost, the operator may let the sale sell through
-- PostgreSQL alone: set once the topic is drained after the fence (every
-- order Redis accepted is persisted), cleared by the recovery in the same
-- statement that replaces the incarnation. A purchase through the database
-- checks it under the sale row's lock, so none lands after the recovery's
-- snapshot.
ALTER TABLE sales ADD COLUMN selling_through_database_at timestamptz;
