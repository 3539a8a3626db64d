-- Risk scoring (spec.risk): the sale's policy as the operator wrote it (NULL:
-- its orders are not scored), and what the scorer saw and decided of each
-- order. The scorer writes a row when it first reads the order's message
-- (so the network rule counts every order it saw), and scores it once the
-- order is persisted and the payment rule had its time.
ALTER TABLE sales ADD COLUMN risk jsonb;

CREATE TABLE order_risk (
    order_id        uuid        PRIMARY KEY,
    sale_id         uuid        NOT NULL,
    shopper         text        NOT NULL,
    client_network  text,
    accepted_at     timestamptz NOT NULL,
    token_issued_at timestamptz,
    seen_at         timestamptz NOT NULL DEFAULT now(),
    scored_at       timestamptz,
    score           integer,
    hits            jsonb,
    verdict         text CHECK (verdict IN ('PASS', 'CANCEL', 'REVIEW'))
);
CREATE INDEX order_risk_by_network ON order_risk (sale_id, client_network);
CREATE INDEX order_risk_flagged ON order_risk (sale_id, score DESC) WHERE verdict <> 'PASS';

-- A shopper's history across sales, for the cancelled-share rule.
CREATE INDEX orders_by_shopper ON orders (shopper);
