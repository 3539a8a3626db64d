-- Shopper ids are opaque: they compare as bytes. Under the database's
-- collation (C.UTF-8 here, a language's locale elsewhere) every index step on
-- these columns called strcoll; under "C" it is memcmp. The consumer's
-- transaction spends most of its time descending these indexes (issue 21).
ALTER TABLE orders ALTER COLUMN shopper TYPE text COLLATE "C";
ALTER TABLE shopper_units ALTER COLUMN shopper TYPE text COLLATE "C";

-- Room on each page for a row's next version: a shopper's count changes with
-- each purchase, and an update that fits its page (HOT) adds no index entry.
ALTER TABLE shopper_units SET (fillfactor = 70);
