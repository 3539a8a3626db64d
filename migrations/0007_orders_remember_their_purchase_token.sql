-- The purchase token an order used (spec.antiBot) and until when it must be
-- remembered as used: a recovery that reloads a lost Redis state from the
-- database restores it, so a token still buys only once.
ALTER TABLE orders
  ADD COLUMN purchase_token uuid,
  ADD COLUMN purchase_token_until timestamptz;
