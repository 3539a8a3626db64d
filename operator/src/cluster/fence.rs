//! Stops a leader before its Lease can expire unrenewed: the lease manager
//! only reports a lost Lease once it can read it again, so a leader cut off
//! from the API server would go on acting (on Redis and PostgreSQL, from a
//! stale spec) while another replica takes over. This watchdog reads the
//! Lease every second and fences the replica when it no longer holds it, or
//! cannot prove it does, `grace` before the Lease could lapse.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;

/// Why the replica stopped acting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fenced {
    /// Another replica holds the Lease.
    Taken,
    /// The Lease could lapse within `grace` and its renewal is not seen.
    Unconfirmed,
}

/// Seconds before expiry at which the holder renews its Lease: halfway, so
/// one missed renewal still leaves the watchdog time to act.
pub fn renewal_grace(lease_seconds: u64) -> u64 {
    (lease_seconds / 2).max(1)
}

/// How long before a possible lapse the watchdog stops the replica: later
/// than a renewal is due (the Lease manager renews `renewal_grace` before
/// expiry), early enough to stop before another replica may take over.
pub fn fence_grace(lease_seconds: u64) -> Duration {
    Duration::from_secs((lease_seconds / 5).max(1))
}

/// Whether to fence now (pure): the Lease was last seen renewed by us at
/// `renewed` (on our clock); it lapses `duration` after that; we stop
/// `grace` before.
pub fn must_fence(renewed: Instant, duration: Duration, grace: Duration, now: Instant) -> bool {
    now + grace >= renewed + duration
}

/// Watches the Lease `name` held by `identity`; returns when the replica
/// must stop acting.
pub async fn watch(
    leases: Api<Lease>,
    name: String,
    identity: String,
    duration: Duration,
    grace: Duration,
) -> Fenced {
    let mut renewed = Instant::now();
    let mut seen: Option<String> = None;
    // When the last read that answered was sent: a renewal first seen now
    // happened after it, so dating it there never makes the Lease look
    // fresher than it is.
    let mut previous_read = renewed;
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let sent = Instant::now();
        let lease = tokio::time::timeout(Duration::from_secs(1), leases.get(&name)).await;
        if let Ok(Ok(lease)) = lease {
            let spec = lease.spec.unwrap_or_default();
            if spec.holder_identity.as_deref() != Some(identity.as_str()) {
                return Fenced::Taken;
            }
            let stamp = spec.renew_time.map(|t| t.0.to_string());
            if stamp != seen {
                seen = stamp;
                renewed = previous_read;
            }
            previous_read = sent;
        }
        if must_fence(renewed, duration, grace, Instant::now()) {
            return Fenced::Unconfirmed;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_renewal_is_due_before_the_watchdog_fences() {
        for lease_seconds in [6, 7, 15, 30, 60] {
            let renew_after = lease_seconds - renewal_grace(lease_seconds);
            let fence_after = Duration::from_secs(lease_seconds) - fence_grace(lease_seconds);
            assert!(
                Duration::from_secs(renew_after + 1) < fence_after,
                "{lease_seconds}"
            );
        }
    }

    #[test]
    fn fences_grace_before_the_lapse() {
        let t0 = Instant::now();
        let (duration, grace) = (Duration::from_secs(15), Duration::from_secs(5));
        assert!(!must_fence(
            t0,
            duration,
            grace,
            t0 + Duration::from_secs(9)
        ));
        assert!(must_fence(
            t0,
            duration,
            grace,
            t0 + Duration::from_secs(10)
        ));
    }
}
