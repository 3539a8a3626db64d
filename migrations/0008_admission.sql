-- Fair admission (spec.admission with mode: queue): the pre-queue's lead,
-- the admission rate and the optional proof of work. All NULL: the sale is
-- open (anyone may buy); the challenge's pair is set together or not at all.
ALTER TABLE sales
  ADD COLUMN admission_prequeue_ms bigint CHECK (admission_prequeue_ms >= 0),
  ADD COLUMN admission_rate integer CHECK (admission_rate BETWEEN 1 AND 1000000),
  ADD COLUMN challenge_difficulty smallint CHECK (challenge_difficulty BETWEEN 1 AND 32),
  ADD COLUMN challenge_max_difficulty smallint CHECK (challenge_max_difficulty BETWEEN 1 AND 32),
  ADD CONSTRAINT admission_whole CHECK (
    (admission_prequeue_ms IS NULL) = (admission_rate IS NULL)
    AND (challenge_difficulty IS NULL) = (challenge_max_difficulty IS NULL)
    AND (challenge_difficulty IS NULL OR admission_rate IS NOT NULL)
    AND (challenge_difficulty IS NULL OR challenge_max_difficulty >= challenge_difficulty));
