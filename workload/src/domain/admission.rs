//! Fair admission (`spec.admission`): who may buy, and when. Shoppers who
//! join before the start (the pre-queue) are ordered by a lottery drawn as
//! they join, so arriving at T−5 min is no worse than at T−0.1 s; after the
//! start, by arrival. They are admitted in that order at a steady rate from
//! the start. A shopper's place is a score carried in their signed ticket:
//! a Redis loss cannot reorder the queue, a returning ticket puts its holder
//! back where they were.

use std::time::Duration;

use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::seal::{self, Unsealed};

/// Lottery draws lie below this; arrivals after the start score this plus
/// their Unix microseconds, so every draw ranks first. Both are integers a
/// Redis score (a double) holds exactly until the year 2200.
pub const LOTTERY_SPAN: u64 = 1_000_000_000_000_000;

/// A sale's admission rules, from `spec.admission` with `mode: queue`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admission {
    /// The queue opens this long before the start.
    pub prequeue: Duration,
    /// Shoppers admitted per second.
    pub rate_per_sec: u32,
    /// The proof of work asked for before joining, if any.
    pub challenge: Option<ChallengeRule>,
}

/// `spec.admission.challenge`: leading zero bits of SHA-256.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChallengeRule {
    /// Asked when the queue is calm.
    pub difficulty: u8,
    /// Never more than this, however hot the queue.
    pub max_difficulty: u8,
}

/// The score of a shopper joining at `now_us` a queue whose sale starts at
/// `start_us`, `draw` a random number.
pub fn score(now_us: i64, start_us: i64, draw: u64) -> u64 {
    if now_us < start_us {
        draw % LOTTERY_SPAN
    } else {
        now_us.max(0) as u64 + LOTTERY_SPAN
    }
}

/// Why a shopper cannot join.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinRefusal {
    /// Before `start − prequeue`: 409 `QUEUE_NOT_OPEN`.
    NotOpen,
    /// At or past the end: 409 `ENDED`.
    Ended,
}

/// Whether the queue takes joiners at `now_ms`.
pub fn may_join(
    admission: &Admission,
    start_ms: i64,
    end_ms: i64,
    now_ms: i64,
) -> Result<(), JoinRefusal> {
    let opens_ms = start_ms.saturating_sub(admission.prequeue.as_millis() as i64);
    if now_ms >= end_ms {
        Err(JoinRefusal::Ended)
    } else if now_ms < opens_ms {
        Err(JoinRefusal::NotOpen)
    } else {
        Ok(())
    }
}

/// How many places have been admitted by `now_ms`: `rate` a second from
/// the start, none before. Nothing stored: every replica computes the same.
pub fn admitted(rate_per_sec: u32, start_ms: i64, now_ms: i64) -> u64 {
    let elapsed = now_ms.saturating_sub(start_ms).max(0) as u64;
    elapsed.saturating_mul(u64::from(rate_per_sec)) / 1000
}

/// What a waiting shopper is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// Before the start: the lottery has not been drawn; the place is known
    /// at the start, in `starts_in`.
    Drawing {
        /// Until the draw, whole seconds rounded up.
        starts_in_secs: u64,
    },
    /// In line.
    Waiting {
        /// 1 = next.
        position: u64,
        /// Seconds until admitted at the current rate, rounded up: it falls
        /// by one a second and never rises while the rate holds.
        eta_secs: u64,
    },
    /// May buy now.
    Admitted,
    /// Sold out or ended: nobody waiting will be admitted.
    Closed,
}

/// The place of the shopper at `rank` (0 = first) at `now_ms`; `closed`:
/// the sale is sold out or over.
pub fn place(rank: u64, admission: &Admission, start_ms: i64, now_ms: i64, closed: bool) -> Place {
    if closed {
        return Place::Closed;
    }
    if now_ms < start_ms {
        return Place::Drawing {
            starts_in_secs: ((start_ms - now_ms) as u64).div_ceil(1000),
        };
    }
    let rate = u64::from(admission.rate_per_sec.max(1));
    let done = admitted(admission.rate_per_sec, start_ms, now_ms);
    if rank < done {
        return Place::Admitted;
    }
    // Admitted when `admitted` passes rank: at start + (rank + 1) / rate.
    let wait_ms = (rank + 1).saturating_mul(1000).div_ceil(rate);
    let at_ms = start_ms.saturating_add(i64::try_from(wait_ms).unwrap_or(i64::MAX));
    Place::Waiting {
        position: rank - done + 1,
        eta_secs: (at_ms.saturating_sub(now_ms).max(0) as u64).div_ceil(1000),
    }
}

/// The difficulty asked for when shoppers join at `joins_per_sec`: the
/// calm one while joins stay within ten seconds' admissions a second, one
/// bit more per doubling beyond, at most the rule's maximum.
pub fn difficulty(rule: &ChallengeRule, joins_per_sec: f64, rate_per_sec: u32) -> u8 {
    let calm = 10.0 * f64::from(rate_per_sec.max(1));
    let over = (joins_per_sec / calm).max(1.0).log2().floor() as u32;
    let raised = u32::from(rule.difficulty).saturating_add(over);
    raised.min(u32::from(rule.max_difficulty.max(rule.difficulty))) as u8
}

/// Leading zero bits of `hash`.
pub fn leading_zero_bits(hash: &[u8]) -> u32 {
    let mut bits = 0;
    for &byte in hash {
        if byte == 0 {
            bits += 8;
        } else {
            return bits + byte.leading_zeros();
        }
    }
    bits
}

/// Longest shopper id a ticket or challenge carries.
const MAX_SHOPPER: usize = 256;
const TICKET: &[u8] = b"flashsale queue ticket v1\0";
const CHALLENGE: &[u8] = b"flashsale challenge v1\0";

/// A shopper's ticket: their score in one sale's queue, signed, so it
/// survives a reload, another API replica and a Redis loss.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ticket {
    /// The FlashSale's uid.
    pub sale_id: Uuid,
    /// The place's score ([`score`]).
    pub score: u64,
    /// Whose it is.
    pub shopper: String,
}

impl Ticket {
    /// The ticket's text: sale id (16 bytes), score (8), then the shopper.
    pub fn sign(&self, secret: &[u8]) -> String {
        let mut payload = Vec::with_capacity(24 + self.shopper.len());
        payload.extend_from_slice(self.sale_id.as_bytes());
        payload.extend_from_slice(&self.score.to_be_bytes());
        payload.extend_from_slice(self.shopper.as_bytes());
        seal::seal(secret, TICKET, &payload)
    }
}

/// The ticket `text` if it is `shopper`'s for `sale_id`; `None` for a
/// forged, altered or another shopper's ticket (told apart from nothing:
/// a forger learns nothing).
pub fn read_ticket(secret: &[u8], text: &str, sale_id: Uuid, shopper: &str) -> Option<Ticket> {
    let payload = seal::open(secret, TICKET, text, 24..=24 + MAX_SHOPPER).ok()?;
    let ticket = Ticket {
        sale_id: Uuid::from_slice(&payload[..16]).ok()?,
        score: u64::from_be_bytes(payload[16..24].try_into().ok()?),
        shopper: String::from_utf8(payload[24..].to_vec()).ok()?,
    };
    (ticket.sale_id == sale_id && ticket.shopper == shopper).then_some(ticket)
}

/// A proof-of-work challenge, issued to one shopper for one sale, good
/// until `expires_ms`, answered once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChallengeClaims {
    /// The FlashSale's uid.
    pub sale_id: Uuid,
    /// What makes it single-use.
    pub nonce: Uuid,
    /// First instant (Unix ms) it is refused.
    pub expires_ms: i64,
    /// Leading zero bits the answer's hash needs.
    pub difficulty: u8,
    /// Whose it is.
    pub shopper: String,
}

/// Why an answer to a challenge was refused (all 403 `CHALLENGE_FAILED`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ChallengeError {
    /// Not a challenge this API issued, or altered.
    #[error("the challenge is not one this sale issued")]
    Forged,
    /// Issued for another sale or shopper.
    #[error("the challenge was issued for another sale or shopper")]
    NotYours,
    /// Past its expiry.
    #[error("the challenge expired; fetch a new one")]
    Expired,
    /// The solution's hash has too few leading zero bits.
    #[error("the solution does not solve the challenge")]
    Unsolved,
    /// Answered before.
    #[error("the challenge was already answered; fetch a new one")]
    Used,
}

impl ChallengeError {
    /// A fixed word for metrics.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Forged => "forged",
            Self::NotYours => "not_yours",
            Self::Expired => "expired",
            Self::Unsolved => "unsolved",
            Self::Used => "used",
        }
    }
}

impl ChallengeClaims {
    /// The challenge's text (its `nonce` to the shopper): sale id, nonce,
    /// expiry, difficulty, then the shopper.
    pub fn sign(&self, secret: &[u8]) -> String {
        let mut payload = Vec::with_capacity(41 + self.shopper.len());
        payload.extend_from_slice(self.sale_id.as_bytes());
        payload.extend_from_slice(self.nonce.as_bytes());
        payload.extend_from_slice(&self.expires_ms.to_be_bytes());
        payload.push(self.difficulty);
        payload.extend_from_slice(self.shopper.as_bytes());
        seal::seal(secret, CHALLENGE, &payload)
    }
}

/// Checks `solution` to the challenge `text` for `shopper` in `sale_id` at
/// `now_ms`: signed by us (constant time, first), theirs, not expired, and
/// SHA-256(`text` ":" `solution`) with the difficulty's leading zero bits.
/// Single use is the caller's (Redis): this is pure.
pub fn check_solution(
    secret: &[u8],
    text: &str,
    solution: &str,
    sale_id: Uuid,
    shopper: &str,
    now_ms: i64,
) -> Result<ChallengeClaims, ChallengeError> {
    let payload = seal::open(secret, CHALLENGE, text, 41..=41 + MAX_SHOPPER).map_err(
        |e: Unsealed| match e {
            Unsealed::Malformed | Unsealed::Forged => ChallengeError::Forged,
        },
    )?;
    let uuid = |at: usize| Uuid::from_slice(&payload[at..at + 16]).expect("16 bytes");
    let claims = ChallengeClaims {
        sale_id: uuid(0),
        nonce: uuid(16),
        expires_ms: i64::from_be_bytes(payload[32..40].try_into().expect("8 bytes")),
        difficulty: payload[40],
        shopper: String::from_utf8(payload[41..].to_vec()).map_err(|_| ChallengeError::Forged)?,
    };
    if claims.sale_id != sale_id || claims.shopper != shopper {
        return Err(ChallengeError::NotYours);
    }
    if now_ms >= claims.expires_ms {
        return Err(ChallengeError::Expired);
    }
    if leading_zero_bits(&solution_hash(text, solution)) < u32::from(claims.difficulty) {
        return Err(ChallengeError::Unsolved);
    }
    Ok(claims)
}

/// SHA-256 of `challenge` ":" `solution`, as the page computes it.
pub fn solution_hash(challenge: &str, solution: &str) -> [u8; 32] {
    let mut hash = Sha256::new();
    hash.update(challenge.as_bytes());
    hash.update(b":");
    hash.update(solution.as_bytes());
    hash.finalize().into()
}

/// Whether a shopper id fits in a ticket or a challenge.
pub fn fits(shopper: &str) -> bool {
    shopper.len() <= MAX_SHOPPER
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admission(rate: u32) -> Admission {
        Admission {
            prequeue: Duration::from_secs(600),
            rate_per_sec: rate,
            challenge: None,
        }
    }

    #[test]
    fn every_lottery_draw_ranks_before_every_arrival_after_the_start() {
        let start_us = 1_800_000_000_000_000;
        let draws = [0, 1, u64::MAX, LOTTERY_SPAN - 1, LOTTERY_SPAN];
        let after = score(start_us, start_us, 0);
        for draw in draws {
            assert!(score(start_us - 1, start_us, draw) < after, "{draw}");
        }
        assert!(score(start_us + 1, start_us, 0) > after);
        assert!((after as f64) as u64 == after, "exact as a double");
    }

    #[test]
    fn the_queue_opens_prequeue_before_the_start_and_closes_at_the_end() {
        let a = admission(10);
        let cases = [
            (399_999, Err(JoinRefusal::NotOpen)),
            (400_000, Ok(())),
            (1_000_000, Ok(())),
            (1_999_999, Ok(())),
            (2_000_000, Err(JoinRefusal::Ended)),
        ];
        for (now, expected) in cases {
            assert_eq!(may_join(&a, 1_000_000, 2_000_000, now), expected, "{now}");
        }
    }

    #[test]
    fn places_fall_at_the_rate_and_the_eta_never_rises() {
        let a = admission(10);
        let start = 1_000_000;
        assert_eq!(
            place(0, &a, start, start - 1, false),
            Place::Drawing { starts_in_secs: 1 }
        );
        assert_eq!(place(5, &a, start, start, true), Place::Closed);
        assert_eq!(
            place(0, &a, start, start, false),
            Place::Waiting {
                position: 1,
                eta_secs: 1
            }
        );
        assert_eq!(place(0, &a, start, start + 100, false), Place::Admitted);
        assert_eq!(
            place(25, &a, start, start + 1_000, false),
            Place::Waiting {
                position: 16,
                eta_secs: 2
            }
        );
        // Every 10 ms for 20 s: positions and ETAs only fall, then admitted
        // exactly when the count passes the rank.
        for rank in [0, 1, 9, 10, 99, 150] {
            let mut last = (u64::MAX, u64::MAX);
            for now in (start..start + 20_000).step_by(10) {
                match place(rank, &a, start, now, false) {
                    Place::Waiting { position, eta_secs } => {
                        assert!(position <= last.0 && eta_secs <= last.1, "{rank} at {now}");
                        assert!(eta_secs > 0);
                        last = (position, eta_secs);
                    }
                    Place::Admitted => {
                        assert!(admitted(10, start, now) > rank);
                        last = (0, 0);
                    }
                    other => panic!("{other:?}"),
                }
            }
            assert_eq!(last, (0, 0), "rank {rank} admitted within 20 s");
        }
    }

    #[test]
    fn difficulty_rises_a_bit_per_doubling_past_calm() {
        let rule = ChallengeRule {
            difficulty: 18,
            max_difficulty: 22,
        };
        let cases = [
            (0.0, 18),
            (1_000.0, 18),
            (1_999.0, 18),
            (2_000.0, 19),
            (4_000.0, 20),
            (1e9, 22),
        ];
        for (joins, bits) in cases {
            assert_eq!(difficulty(&rule, joins, 100), bits, "{joins}/s");
        }
    }

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

    #[test]
    fn a_ticket_is_read_back_only_by_its_shopper_for_its_sale() {
        let ticket = Ticket {
            sale_id: Uuid::from_u128(7),
            score: 1_234,
            shopper: "alice".into(),
        };
        let text = ticket.sign(SECRET);
        assert_eq!(
            read_ticket(SECRET, &text, Uuid::from_u128(7), "alice"),
            Some(ticket)
        );
        assert_eq!(read_ticket(SECRET, &text, Uuid::from_u128(7), "bob"), None);
        assert_eq!(
            read_ticket(SECRET, &text, Uuid::from_u128(8), "alice"),
            None
        );
        assert_eq!(
            read_ticket(b"another", &text, Uuid::from_u128(7), "alice"),
            None
        );
        // A purchase token is not a ticket, even with the same secret.
        let token = super::super::purchase_token::TokenClaims {
            sale_id: Uuid::from_u128(7),
            shopper: "alice".into(),
            nonce: Uuid::from_u128(1),
            expires_ms: 1,
        }
        .sign(SECRET);
        assert_eq!(
            read_ticket(SECRET, &token, Uuid::from_u128(7), "alice"),
            None
        );
    }

    fn solve(text: &str, difficulty: u8) -> String {
        (0u64..)
            .map(|n| n.to_string())
            .find(|s| leading_zero_bits(&solution_hash(text, s)) >= u32::from(difficulty))
            .unwrap()
    }

    #[test]
    fn challenges_table() {
        let claims = ChallengeClaims {
            sale_id: Uuid::from_u128(7),
            nonce: Uuid::from_u128(9),
            expires_ms: 10_000,
            difficulty: 8,
            shopper: "alice".into(),
        };
        let text = claims.sign(SECRET);
        let solution = solve(&text, 8);
        let check = |text: &str, solution: &str, shopper: &str, now| {
            check_solution(SECRET, text, solution, Uuid::from_u128(7), shopper, now)
        };
        assert_eq!(check(&text, &solution, "alice", 9_999), Ok(claims.clone()));
        let unsolved = (0u64..)
            .map(|n| n.to_string())
            .find(|s| leading_zero_bits(&solution_hash(&text, s)) < 8)
            .unwrap();
        let harder = ChallengeClaims {
            difficulty: 30,
            ..claims.clone()
        };
        let forged_harder = format!(
            "{}.{}",
            harder.sign(SECRET).split_once('.').unwrap().0,
            text.split_once('.').unwrap().1
        );
        let cases = [
            (
                "unsolved",
                check(&text, &unsolved, "alice", 0),
                ChallengeError::Unsolved,
            ),
            (
                "bob",
                check(&text, &solution, "bob", 0),
                ChallengeError::NotYours,
            ),
            (
                "expired",
                check(&text, &solution, "alice", 10_000),
                ChallengeError::Expired,
            ),
            (
                "garbage",
                check("x.y", &solution, "alice", 0),
                ChallengeError::Forged,
            ),
            (
                "altered difficulty",
                check(&forged_harder, &solution, "alice", 0),
                ChallengeError::Forged,
            ),
        ];
        for (what, got, error) in cases {
            assert_eq!(got, Err(error), "{what}");
        }
    }

    #[test]
    fn leading_zero_bits_table() {
        let cases: [(&[u8], u32); 5] = [
            (&[0x80], 0),
            (&[0x01], 7),
            (&[0x00, 0x40], 9),
            (&[0x00, 0x00], 16),
            (&[], 0),
        ];
        for (hash, bits) in cases {
            assert_eq!(leading_zero_bits(hash), bits, "{hash:?}");
        }
    }
}
