-- FlashSale's durable state. PostgreSQL is the final arbiter: the constraints
-- below make overselling (I1) and over-limit purchases (I2) impossible in the
-- database itself, whatever a process does.

-- One row per FlashSale, written by the operator from the resource's spec.
CREATE TABLE sales (
    id                 uuid PRIMARY KEY,          -- the FlashSale's metadata.uid
    namespace          text        NOT NULL,
    name               text        NOT NULL,
    sku                text        NOT NULL,
    stock              integer     NOT NULL CHECK (stock >= 0),
    sold               integer     NOT NULL DEFAULT 0 CHECK (sold >= 0),
    start_at           timestamptz NOT NULL,
    end_at             timestamptz NOT NULL,
    purchase_limit     integer     NOT NULL CHECK (purchase_limit >= 1),
    shards             integer     NOT NULL CHECK (shards BETWEEN 1 AND 1024),
    payment_timeout_ms bigint      NOT NULL CHECK (payment_timeout_ms > 0),
    generation         bigint      NOT NULL DEFAULT 1,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    deleted_at         timestamptz,               -- the resource is gone; its orders stay
    CONSTRAINT sold_within_stock CHECK (sold <= stock),
    CONSTRAINT window_ordered CHECK (end_at > start_at)
);
CREATE UNIQUE INDEX sales_current_name ON sales (namespace, name) WHERE deleted_at IS NULL;

-- Orders the consumers persisted. PENDING lives only in Redis (accepted, not
-- yet persisted); every status change here is conditional on the expected one.
CREATE TABLE orders (
    id             uuid        PRIMARY KEY,       -- UUIDv7 minted by the API
    sale_id        uuid        NOT NULL REFERENCES sales (id),
    shopper        text        NOT NULL,
    quantity       integer     NOT NULL CHECK (quantity >= 1),
    shard          integer     NOT NULL CHECK (shard >= 0),
    status         text        NOT NULL
                   CHECK (status IN ('UNPAID', 'PAID', 'CANCELLED', 'REFUNDED', 'FAILED')),
    failure_reason text,
    accepted_at    timestamptz NOT NULL,          -- when Redis reserved the stock
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    version        integer     NOT NULL DEFAULT 1
);
CREATE INDEX orders_by_sale_shopper ON orders (sale_id, shopper);
CREATE INDEX orders_unpaid ON orders (sale_id, created_at) WHERE status = 'UNPAID';

-- Units each shopper holds in UNPAID or PAID orders of a sale.
CREATE TABLE shopper_units (
    sale_id        uuid    NOT NULL REFERENCES sales (id),
    shopper        text    NOT NULL,
    units          integer NOT NULL CHECK (units >= 0),
    purchase_limit integer NOT NULL,
    PRIMARY KEY (sale_id, shopper),
    CONSTRAINT units_within_limit CHECK (units <= purchase_limit)
);

-- What each reconciliation found and repaired.
CREATE TABLE reconciliation_runs (
    id             bigserial   PRIMARY KEY,
    sale_id        uuid        NOT NULL REFERENCES sales (id),
    started_at     timestamptz NOT NULL,
    finished_at    timestamptz NOT NULL DEFAULT now(),
    drift_found    integer     NOT NULL,
    drift_repaired integer     NOT NULL,
    report         jsonb       NOT NULL
);
CREATE INDEX reconciliation_runs_by_sale ON reconciliation_runs (sale_id, finished_at DESC);
