//! Rate limits (GCRA, from `governor`): one for the whole process, one per
//! shopper and one per client IP. A refusal says when to retry.

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota, RateLimiter};

use super::error::ApiError;

/// Requests per second; 0 turns a limit off.
#[derive(Debug, Clone, Copy)]
pub struct LimitConfig {
    /// All requests of this process.
    pub global_per_sec: u32,
    /// One shopper's requests (a person clicking, not a bot).
    pub per_shopper_per_sec: u32,
    /// One client address (many shoppers may share a NAT).
    pub per_ip_per_sec: u32,
}

/// The limiters, built once per process.
pub struct Limits {
    clock: DefaultClock,
    global: Option<DefaultDirectRateLimiter>,
    shopper: Option<DefaultKeyedRateLimiter<String>>,
    ip: Option<DefaultKeyedRateLimiter<IpAddr>>,
}

/// A burst of one second's worth of requests, at least 5: a shopper's double
/// click is never refused.
fn quota(per_sec: u32) -> Option<Quota> {
    let rate = NonZeroU32::new(per_sec)?;
    let burst = NonZeroU32::new(per_sec.max(5)).unwrap_or(rate);
    Some(Quota::per_second(rate).allow_burst(burst))
}

fn retry_after_secs(wait: Duration) -> u64 {
    wait.as_secs() + u64::from(wait.subsec_nanos() > 0)
}

impl Limits {
    /// Builds the limiters.
    pub fn new(config: LimitConfig) -> Self {
        Self {
            clock: DefaultClock::default(),
            global: quota(config.global_per_sec).map(RateLimiter::direct),
            shopper: quota(config.per_shopper_per_sec).map(RateLimiter::keyed),
            ip: quota(config.per_ip_per_sec).map(RateLimiter::keyed),
        }
    }

    /// Counts a request from `ip` against the global and per-IP limits.
    pub fn check_client(&self, ip: IpAddr) -> Result<(), ApiError> {
        if let Some(global) = &self.global {
            global.check().map_err(|not_until| {
                ApiError::rate_limited(
                    "overall",
                    retry_after_secs(not_until.wait_time_from(self.clock.now())),
                )
            })?;
        }
        if let Some(limiter) = &self.ip {
            limiter.check_key(&ip).map_err(|not_until| {
                ApiError::rate_limited(
                    "from this address",
                    retry_after_secs(not_until.wait_time_from(self.clock.now())),
                )
            })?;
        }
        Ok(())
    }

    /// Counts a request of `shopper` against the per-shopper limit.
    pub fn check_shopper(&self, shopper: &str) -> Result<(), ApiError> {
        if let Some(limiter) = &self.shopper {
            limiter
                .check_key(&shopper.to_string())
                .map_err(|not_until| {
                    ApiError::rate_limited(
                        "for this shopper",
                        retry_after_secs(not_until.wait_time_from(self.clock.now())),
                    )
                })?;
        }
        Ok(())
    }

    /// Forgets idle keys every 10 s, so the keyed limiters stay small.
    pub fn spawn_housekeeping(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let limits = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(10));
            loop {
                tick.tick().await;
                if let Some(l) = &limits.shopper {
                    l.retain_recent();
                }
                if let Some(l) = &limits.ip {
                    l.retain_recent();
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_shopper_limit_refuses_with_retry_after_and_spares_others() {
        let limits = Limits::new(LimitConfig {
            global_per_sec: 0,
            per_shopper_per_sec: 2,
            per_ip_per_sec: 0,
        });
        for _ in 0..5 {
            limits.check_shopper("alice").unwrap();
        }
        let refused = limits.check_shopper("alice").unwrap_err();
        assert_eq!(refused.code(), "RATE_LIMITED");
        limits.check_shopper("bob").unwrap();
    }

    #[test]
    fn zero_turns_a_limit_off() {
        let limits = Limits::new(LimitConfig {
            global_per_sec: 0,
            per_shopper_per_sec: 0,
            per_ip_per_sec: 0,
        });
        for _ in 0..10_000 {
            limits.check_client(IpAddr::from([127, 0, 0, 1])).unwrap();
            limits.check_shopper("alice").unwrap();
        }
    }

    #[test]
    fn retry_after_rounds_up() {
        assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_secs(2)), 2);
        assert_eq!(retry_after_secs(Duration::from_millis(2001)), 3);
    }
}
