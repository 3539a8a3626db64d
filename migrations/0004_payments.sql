-- Payments started by shoppers and settled by the payment provider's signed
-- callback: an order is PAID only on the provider's word. A payment whose
-- money was taken for an order that can no longer be paid (cancelled, or
-- paid by another payment) is REFUND_DUE: money taken is never lost.
CREATE TABLE payments (
    id         uuid        PRIMARY KEY,          -- UUIDv7 minted by the API
    order_id   uuid        NOT NULL,
    state      text        NOT NULL DEFAULT 'STARTED'
               CHECK (state IN ('STARTED', 'SUCCEEDED', 'FAILED', 'REFUND_DUE')),
    started_at timestamptz NOT NULL DEFAULT now(),
    settled_at timestamptz
);
-- One payment in flight per order: a retried start gets the same one.
CREATE UNIQUE INDEX payments_one_started ON payments (order_id) WHERE state = 'STARTED';
CREATE INDEX payments_by_order ON payments (order_id);
CREATE INDEX payments_refund_due ON payments (settled_at) WHERE state = 'REFUND_DUE';
