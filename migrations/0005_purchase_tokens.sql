-- Purchase tokens (spec.antiBot): how long a token is good for once issued;
-- NULL when the sale needs none.
ALTER TABLE sales ADD COLUMN purchase_token_ttl_ms bigint CHECK (purchase_token_ttl_ms > 0);
