//! Rate limits (GCRA, from `governor`): one for the whole process, one per
//! shopper and one per client IP. A refusal says when to retry. The keyed
//! limits are charged first and the process-wide one last, so a client over
//! its own limit never spends everyone's budget.

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

    /// Counts a request from `ip` against the per-IP limit; a route that
    /// knows its shopper then calls [`Limits::check_shopper`], any other
    /// [`Limits::check_anonymous`] instead.
    pub fn check_client(&self, ip: IpAddr) -> Result<(), ApiError> {
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

    /// Counts a request of `shopper` against the per-shopper limit, then
    /// the process-wide one.
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
        self.check_overall()
    }

    /// Counts a request without a shopper from `ip` against the per-IP
    /// limit, then the process-wide one.
    pub fn check_anonymous(&self, ip: IpAddr) -> Result<(), ApiError> {
        self.check_client(ip)?;
        self.check_overall()
    }

    fn check_overall(&self) -> Result<(), ApiError> {
        if let Some(global) = &self.global {
            global.check().map_err(|not_until| {
                ApiError::rate_limited(
                    "overall",
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

    /// One address over its own limit is refused as such, and leaves the
    /// process-wide budget to everyone else (it used to be charged first).
    #[test]
    fn one_address_over_its_limit_spends_nobody_elses_budget() {
        let limits = Limits::new(LimitConfig {
            global_per_sec: 20,
            per_shopper_per_sec: 5,
            per_ip_per_sec: 5,
        });
        let flooder = IpAddr::from([10, 0, 0, 1]);
        let refused = (0..100)
            .filter_map(|_| limits.check_client(flooder).err())
            .collect::<Vec<_>>();
        assert_eq!(refused.len(), 95);
        assert!(refused.iter().all(|e| e.message().contains("this address")));
        // A shopper over their own limit spends nothing overall either.
        let noisy = (0..50)
            .filter(|_| limits.check_shopper("mallory").is_err())
            .count();
        assert_eq!(noisy, 45);
        for n in 0..5 {
            let ip = IpAddr::from([10, 0, 1, n]);
            limits.check_client(ip).unwrap();
            assert!(
                limits.check_shopper(&format!("shopper-{n}")).is_ok(),
                "shopper {n} was refused: the flood spent the overall budget"
            );
        }
    }

    #[test]
    fn zero_turns_a_limit_off() {
        let limits = Limits::new(LimitConfig {
            global_per_sec: 0,
            per_shopper_per_sec: 0,
            per_ip_per_sec: 0,
        });
        for _ in 0..10_000 {
            limits
                .check_anonymous(IpAddr::from([127, 0, 0, 1]))
                .unwrap();
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
