//! The order desk: shoppers' order changes gathered into one transaction
//! while the previous one commits (group commit), so a storm of cancels
//! updates each sale's row once per batch instead of queueing on it.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use super::order::{EventOutcome, apply_events};
use crate::domain::order::OrderEvent;

/// Events one transaction takes at most.
const MOST_PER_BATCH: usize = 256;

/// How long one batch may take before its callers are told the database
/// is unavailable (the request timeout would cut them then anyway).
const BATCH_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a batch left its events undone.
pub type DeskError = Arc<sqlx::Error>;

type Reply = oneshot::Sender<Result<EventOutcome, DeskError>>;

struct Request {
    order: Uuid,
    shopper: String,
    event: OrderEvent,
    reply: Reply,
}

/// A handle on the desk's one worker; cloning it shares the worker.
#[derive(Clone)]
pub struct OrderDesk {
    requests: mpsc::Sender<Request>,
}

impl OrderDesk {
    /// Starts the worker on `db`. One worker: a batch waits on at most one
    /// database connection, and the next batch holds everything that
    /// arrived meanwhile.
    pub fn start(db: sqlx::PgPool) -> Self {
        let (requests, queue) = mpsc::channel(4 * MOST_PER_BATCH);
        tokio::spawn(work(db, queue));
        Self { requests }
    }

    /// Applies `event` to the shopper's order within the next batch.
    pub async fn apply(
        &self,
        order: Uuid,
        shopper: &str,
        event: OrderEvent,
    ) -> Result<EventOutcome, DeskError> {
        let (reply, answer) = oneshot::channel();
        let request = Request {
            order,
            shopper: shopper.to_string(),
            event,
            reply,
        };
        let closed = || Arc::new(sqlx::Error::PoolClosed);
        self.requests.send(request).await.map_err(|_| closed())?;
        answer.await.map_err(|_| closed())?
    }
}

async fn work(db: sqlx::PgPool, mut queue: mpsc::Receiver<Request>) {
    let mut batch = Vec::with_capacity(MOST_PER_BATCH);
    while queue.recv_many(&mut batch, MOST_PER_BATCH).await > 0 {
        let events: Vec<(Uuid, &str, OrderEvent)> = batch
            .iter()
            .map(|r| (r.order, r.shopper.as_str(), r.event))
            .collect();
        let outcomes = match tokio::time::timeout(BATCH_TIMEOUT, apply_events(&db, &events)).await {
            Ok(Ok(outcomes)) => outcomes.into_iter().map(Ok).collect(),
            Ok(Err(e)) => vec![Err(Arc::new(e)); batch.len()],
            Err(_) => {
                let late = std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("an order batch took over {BATCH_TIMEOUT:?}"),
                );
                vec![Err(Arc::new(sqlx::Error::Io(late))); batch.len()]
            }
        };
        for (request, outcome) in batch.drain(..).zip(outcomes) {
            // A caller that gave up (its request was cut) is not waiting.
            let _ = request.reply.send(outcome);
        }
    }
}
