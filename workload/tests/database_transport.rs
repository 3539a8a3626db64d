//! The PostgreSQL adapter's transport on a real socket: a query whose
//! messages span several TCP segments (the consumer's batches bind 50–200 KB)
//! must not wait for the server's delayed ACK. sqlx 0.9.0 dropped
//! `TCP_NODELAY`, and every such query paid ~40 ms (vendor/README.md).

use std::time::{Duration, Instant};

use flashsale_testkit as stack;

/// Linux's shortest delayed ACK is 40 ms; a stalled query takes at least
/// that, a query that does not, a millisecond or two.
const STALL: Duration = Duration::from_millis(35);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_queries_do_not_wait_for_a_delayed_ack() {
    let db = flashsale_workload::orders::connect(&stack::database_url(), 1)
        .await
        .expect("PostgreSQL");
    // The sizes of the consumer's binds, each sent ten times on one
    // connection (the pool has one).
    let mut stalled = Vec::new();
    let mut total = 0;
    for size in [20_000, 70_000, 100_000, 170_000, 250_000] {
        let text = "x".repeat(size);
        for _ in 0..10 {
            let started = Instant::now();
            let length: i32 = sqlx::query_scalar("SELECT length($1)")
                .bind(&text)
                .fetch_one(&db)
                .await
                .expect("a round trip");
            let took = started.elapsed();
            assert_eq!(length as usize, size);
            total += 1;
            if took >= STALL {
                stalled.push((size, took));
            }
        }
    }
    // A loaded machine may delay a few; a missing TCP_NODELAY delays most
    // of them (34 of 50 with sqlx 0.9.0 as released).
    assert!(
        stalled.len() <= 5,
        "{} of {total} round trips took over {STALL:?}, the delayed-ACK stall: {stalled:?}",
        stalled.len()
    );
}
