//! The lifecycle decision, pure: from the spec, what was observed and the
//! time, which state the sale is in, what to do now and when to look again.

use std::time::Duration;

use chrono::{DateTime, Utc};
use flashsale_workload::domain::sale::{LoadedSale, RedisLife, SaleMeta};

use crate::model::crd::SaleState;
use crate::model::timeline::Timeline;

/// A Job's outcome so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobPhase {
    /// Not finished.
    Running,
    /// Completed.
    Succeeded,
    /// Gave up (its backoff limit).
    Failed,
}

/// The database row as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowFacts {
    /// Units for sale.
    pub stock: i64,
    /// Units persisted in live orders.
    pub sold: i64,
    /// Stock generation.
    pub generation: i64,
    /// Whether window, limit and payment timeout match the spec.
    pub matches_spec: bool,
}

/// Everything the plan looks at besides the spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// Now.
    pub now: DateTime<Utc>,
    /// The sale's row, if created.
    pub row: Option<RowFacts>,
    /// The order and dead-letter topics exist.
    pub topics_ready: bool,
    /// What Redis holds.
    pub redis: LoadedSale,
    /// What the database knows of the sale's Redis state.
    pub life: RedisLife,
    /// Units out of the shards for shrinks not recorded yet, by shrink
    /// (generation, target stock): an interrupted or replaced shrink.
    pub pending_shrinks: Vec<((i64, i64), i64)>,
    /// The consumer group's lag, when readable.
    pub lag: Option<i64>,
    /// The final reconciliation Job.
    pub final_job: Option<JobPhase>,
    /// The cleanup Job.
    pub cleanup_job: Option<JobPhase>,
    /// The latest periodic reconciliation Job: its index and phase.
    pub periodic_job: Option<(u64, JobPhase)>,
    /// The index of the last periodic reconciliation started, as the status
    /// keeps it (its Job may be gone: Jobs are removed an hour after).
    pub periodic_started: Option<u64>,
}

/// What the spec asks, as plain values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wanted {
    /// spec.stock.
    pub stock: i64,
    /// spec.paused.
    pub paused: bool,
    /// The metadata every shard must hold once warmed: window, limit, kill
    /// switch (spec.paused) and backpressure (from the scaling decision).
    pub meta: SaleMeta,
    /// Consumer replicas (from the scaling decision).
    pub replicas: i32,
    /// Next scaling revisit (end of a stabilization window).
    pub scaling_check: Option<DateTime<Utc>>,
    /// How long a fenced sale waits before it is reloaded from the database
    /// (the API's purchase budget and the clocks' slack): no purchase that
    /// reserved on the lost state can still produce after it.
    pub recovery_grace: Duration,
}

/// A Job the operator runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobKind {
    /// The n-th periodic reconciliation while live.
    Periodic(u64),
    /// The reconciliation after the end.
    Final,
    /// Cleanup of the Redis state.
    Cleanup,
}

/// One step the operator takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Create or update the sale's row with this stock.
    SyncSaleRow {
        /// The stock to store (the spec's, or the current one when a shrink is refused).
        stock: i64,
    },
    /// Create the order and dead-letter topics.
    EnsureTopics,
    /// Load Redis from the database, verify, open.
    Warm,
    /// Apply the row's raised stock (its generation) to Redis.
    Restock,
    /// Shrink a warmed sale: units out of Redis first, then the row.
    Shrink {
        /// The new stock.
        to: i64,
        /// Its generation.
        generation: i64,
    },
    /// Give back the units of a shrink that is no longer wanted.
    UndoShrink {
        /// Its generation.
        generation: i64,
        /// Its target stock.
        to: i64,
    },
    /// Redis lost the sale's state: fence it (purchases stop) and record it.
    FenceLostState,
    /// The lost state's orders are drained: replace its incarnation, so
    /// warm-up reloads it from the database.
    BeginRecovery,
    /// Bring the row to the stock Redis recorded (a shrink whose row write
    /// was interrupted).
    RecordRowStock {
        /// The stock.
        stock: i64,
        /// Its generation.
        generation: i64,
    },
    /// Write the metadata (kill switch, backpressure, window, limit) to every shard.
    WriteMeta(SaleMeta),
    /// Server-side apply the consumer Deployment with this many replicas.
    ApplyConsumers {
        /// Replicas.
        replicas: i32,
    },
    /// Remove the consumer Deployment (the sale is over).
    DeleteConsumers,
    /// Start a Job.
    StartJob(JobKind),
}

impl Action {
    /// Whether this action changes what the next observation sees in a way
    /// the plan must look at again before the status is written.
    pub fn changes_observation(&self) -> bool {
        matches!(
            self,
            Action::SyncSaleRow { .. }
                | Action::EnsureTopics
                | Action::Warm
                | Action::Restock
                | Action::Shrink { .. }
                | Action::UndoShrink { .. }
                | Action::RecordRowStock { .. }
                | Action::FenceLostState
                | Action::BeginRecovery
        )
    }
}

/// Why a change in the spec was not applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// The stock asked for is below the units already sold.
    StockBelowSold {
        /// Asked for.
        asked: i64,
        /// Units accepted so far.
        sold: i64,
    },
}

/// The decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Lifecycle state.
    pub state: SaleState,
    /// Steps, in order.
    pub actions: Vec<Action>,
    /// When to look again.
    pub wake_in: Duration,
    /// While orders may flow (live, or draining before cleanup): read the
    /// sale's Redis state and lag this often between reconciles, and
    /// reconcile when they change (`steps::lag_watch`). A full pass every
    /// poll costs ~10 requests; a thousand idle live sales cannot afford it.
    pub watch_every: Option<Duration>,
    /// A refused change, surfaced as a condition.
    pub refused: Option<Refused>,
    /// Consumer replicas wanted now: none before the warm-up or once the
    /// sale is completed, else what the lag asks for.
    pub replicas: i32,
}

/// Units accepted so far: what Redis handed out (once warmed: its recorded
/// total, less what the shards hold and what an unrecorded shrink took out),
/// else what the database persisted.
pub fn accepted_units(observed: &Observed) -> i64 {
    match (
        observed.redis.warmed(),
        observed.redis.stock_total,
        &observed.row,
    ) {
        (true, Some(total), _) => {
            let withdrawn: i64 = observed.pending_shrinks.iter().map(|(_, u)| u).sum();
            total - observed.redis.remaining() - withdrawn
        }
        (_, _, Some(row)) => row.sold,
        _ => 0,
    }
}

/// The stock to keep in the row, the stock steps and a refusal. Before the
/// sale is warm the row alone holds the stock. Once warm, every change keeps
/// Redis's sellable units within what the database allows: a restock raises
/// the row first and Redis follows; a shrink takes units out of Redis first
/// and the row follows. One change is finished before the next starts.
fn stock_steps(wanted: i64, observed: &Observed) -> (Option<i64>, Vec<Action>, Option<Refused>) {
    let Some(row) = observed.row else {
        return (Some(wanted), Vec::new(), None);
    };
    let refuse = |sold| {
        Some(Refused::StockBelowSold {
            asked: wanted,
            sold,
        })
    };
    let loaded = observed.redis.metas.iter().any(Option::is_some);
    if !observed.redis.warmed() {
        return match () {
            // A warm-up under way loads the row's stock: it waits.
            () if loaded => (Some(row.stock), Vec::new(), None),
            () if wanted < row.sold => (Some(row.stock), Vec::new(), refuse(row.sold)),
            () => (Some(wanted), Vec::new(), None),
        };
    }
    let mut actions = Vec::new();
    let applied = observed.redis.generation.unwrap_or(row.generation);
    if applied > row.generation {
        let stock = observed.redis.stock_total.unwrap_or(row.stock);
        actions.push(Action::RecordRowStock {
            stock,
            generation: applied,
        });
        return (Some(stock), actions, None);
    }
    if applied < row.generation {
        // Restock: live_actions applies it.
        return (Some(row.stock), actions, None);
    }
    let shrink = (wanted < row.stock).then_some((row.generation + 1, wanted));
    let sold = accepted_units(observed);
    let shrink = shrink.filter(|_| wanted >= sold);
    for ((generation, to), _) in &observed.pending_shrinks {
        if Some((*generation, *to)) != shrink {
            actions.push(Action::UndoShrink {
                generation: *generation,
                to: *to,
            });
        }
    }
    let undoing = !actions.is_empty();
    match shrink {
        Some((generation, to)) => actions.push(Action::Shrink { to, generation }),
        None if wanted < row.stock => return (Some(row.stock), actions, refuse(sold)),
        None => {}
    }
    // A restock takes the next generation, the one the shrink being undone
    // holds: it waits until the withdrawal is given back, or a failed undo
    // would leave those units off sale, under a generation Redis applied.
    let stock = if undoing {
        row.stock
    } else {
        wanted.max(row.stock)
    };
    (Some(stock), actions, None)
}

const HEARTBEAT: Duration = Duration::from_secs(60);
const JOB_POLL: Duration = Duration::from_secs(2);

/// Decides what to do at `observed.now`.
pub fn plan(timeline: &Timeline, wanted: &Wanted, observed: &Observed) -> Plan {
    let mut draft = Draft {
        now: observed.now,
        actions: Vec::new(),
        wakes: Vec::new(),
        watch_every: None,
    };
    let lost = observed.life.lost_since.is_some() || observed.life.lost_in(&observed.redis);
    let (row_current, refused) = row_and_topic_steps(wanted, observed, lost, &mut draft.actions);
    let ready_to_warm = observed.row.is_some() && row_current && observed.topics_ready;
    if lost {
        draft.actions.extend(recovery_steps(
            observed,
            wanted.recovery_grace,
            ready_to_warm,
        ));
        draft.actions.push(Action::ApplyConsumers {
            replicas: wanted.replicas,
        });
        return Plan {
            state: window_state(timeline, wanted, observed.now),
            actions: draft.actions,
            wake_in: Duration::from_secs(1),
            watch_every: None,
            refused,
            replicas: wanted.replicas,
        };
    }
    let state = if observed.now < timeline.end {
        in_window(timeline, wanted, observed, ready_to_warm, &mut draft)
    } else {
        after_window(timeline, wanted, observed, &mut draft)
    };
    let replicas = consumer_steps(state, wanted, &mut draft);
    Plan {
        state,
        wake_in: draft.wake_in(),
        watch_every: draft.watch_every,
        actions: draft.actions,
        refused,
        replicas,
    }
}

/// The actions a plan collects, the instants it wants to look again, and
/// how often its sale's orders are watched between those.
struct Draft {
    now: DateTime<Utc>,
    actions: Vec<Action>,
    wakes: Vec<DateTime<Utc>>,
    watch_every: Option<Duration>,
}

impl Draft {
    fn wake_at(&mut self, at: DateTime<Utc>) {
        self.wakes.push(at);
    }

    fn wake_after(&mut self, d: Duration) {
        let at = self.now + chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX);
        self.wakes.push(at);
    }

    /// Until the first wake-up ahead, at most the heartbeat.
    fn wake_in(&self) -> Duration {
        let next = self.wakes.iter().filter(|w| **w > self.now).min();
        next.and_then(|w| (*w - self.now).to_std().ok())
            .unwrap_or(HEARTBEAT)
            .min(HEARTBEAT)
    }
}

/// The sale's row and topics in step with the spec; whether the row is
/// current, and a refused stock change. Nothing is written on a lost state,
/// the stock included: it is reloaded from the row once its orders drained.
fn row_and_topic_steps(
    wanted: &Wanted,
    observed: &Observed,
    lost: bool,
    actions: &mut Vec<Action>,
) -> (bool, Option<Refused>) {
    let (stock, stock_actions, refused) = match observed.row {
        Some(row) if lost => (Some(row.stock), Vec::new(), None),
        _ => stock_steps(wanted.stock, observed),
    };
    let stock = stock.unwrap_or(wanted.stock);
    let row_current = observed
        .row
        .is_some_and(|row| row.stock == stock && row.matches_spec);
    if !row_current
        && !stock_actions
            .iter()
            .any(|a| matches!(a, Action::RecordRowStock { .. }))
    {
        actions.push(Action::SyncSaleRow { stock });
    }
    actions.extend(stock_actions);
    if !observed.topics_ready {
        actions.push(Action::EnsureTopics);
    }
    (row_current, refused)
}

/// Before the end: scheduled, warming, warm, then live (or paused, sold out).
fn in_window(
    timeline: &Timeline,
    wanted: &Wanted,
    observed: &Observed,
    ready_to_warm: bool,
    draft: &mut Draft,
) -> SaleState {
    let now = observed.now;
    if !observed.redis.warmed() {
        if now < timeline.warm_at {
            draft.wake_at(timeline.warm_at);
            return SaleState::Scheduled;
        }
        if ready_to_warm {
            draft.actions.push(Action::Warm);
        }
        draft.wake_after(Duration::from_secs(1));
        return SaleState::Warming;
    }
    live_actions(wanted, observed, &mut draft.actions);
    draft.wake_at(timeline.end);
    if now < timeline.start {
        draft.wake_at(timeline.start);
        return if wanted.paused {
            SaleState::Paused
        } else {
            SaleState::Warm
        };
    }
    draft.watch_every = Some(timeline.poll_every);
    let index = periodic_index(timeline, now);
    if index > 0 {
        let started = observed
            .periodic_started
            .max(observed.periodic_job.map(|(i, _)| i));
        match observed.periodic_job {
            Some((_, JobPhase::Running)) => {}
            _ if started >= Some(index) => {}
            _ => draft
                .actions
                .push(Action::StartJob(JobKind::Periodic(index))),
        }
    }
    draft.wake_at(periodic_due(timeline, index + 1));
    if wanted.paused {
        SaleState::Paused
    } else if observed.redis.remaining() <= 0 {
        SaleState::SoldOut
    } else {
        SaleState::Live
    }
}

/// After the end: the final reconciliation, then cleanup once it is due and
/// the orders drained.
fn after_window(
    timeline: &Timeline,
    wanted: &Wanted,
    observed: &Observed,
    draft: &mut Draft,
) -> SaleState {
    let loaded_now = observed.redis.metas.iter().any(Option::is_some);
    if observed.cleanup_job == Some(JobPhase::Succeeded) && !loaded_now {
        return SaleState::Completed;
    }
    if observed.redis.warmed() || loaded_now {
        // Keep the kill switch and backpressure true until cleanup.
        live_actions(wanted, observed, &mut draft.actions);
    }
    match (observed.final_job, observed.cleanup_job) {
        (_, Some(JobPhase::Running)) => {
            draft.wake_after(JOB_POLL);
            SaleState::CleaningUp
        }
        (None, _) if loaded_now => {
            draft.actions.push(Action::StartJob(JobKind::Final));
            draft.wake_after(JOB_POLL);
            SaleState::Ended
        }
        (Some(JobPhase::Running), _) => {
            draft.wake_after(JOB_POLL);
            SaleState::Ended
        }
        (Some(JobPhase::Failed), _) | (_, Some(JobPhase::Failed)) => SaleState::Failed,
        // The final reconciliation is done (or nothing was ever loaded).
        _ if observed.now < timeline.cleanup_at => {
            draft.wake_at(timeline.cleanup_at);
            SaleState::Ended
        }
        _ if observed.lag.is_some_and(|lag| lag == 0) || !loaded_now => {
            draft.actions.push(Action::StartJob(JobKind::Cleanup));
            draft.wake_after(JOB_POLL);
            SaleState::CleaningUp
        }
        _ => {
            draft.watch_every = Some(timeline.poll_every);
            SaleState::Ended
        }
    }
}

/// The consumers for `state`: none once completed or while scheduled, else
/// the scaling decision's count (and its next check as a wake-up).
fn consumer_steps(state: SaleState, wanted: &Wanted, draft: &mut Draft) -> i32 {
    match state {
        SaleState::Completed => {
            draft.actions.push(Action::DeleteConsumers);
            0
        }
        // Weeks ahead of a sale, nothing can be in its topic yet.
        SaleState::Scheduled => {
            draft.actions.push(Action::ApplyConsumers { replicas: 0 });
            0
        }
        _ => {
            draft.actions.push(Action::ApplyConsumers {
                replicas: wanted.replicas,
            });
            if let Some(check) = wanted.scaling_check {
                draft.wake_at(check);
            }
            wanted.replicas
        }
    }
}

/// Steps while the sale's Redis state is lost: fence it; once every order
/// accepted before the loss is persisted (the topic drained, and no
/// purchase still producing), replace the incarnation; then warm-up reloads
/// Redis from the database alone and reopens the sale. Each step is
/// idempotent and survives an operator restart half-way.
fn recovery_steps(observed: &Observed, grace: Duration, ready_to_warm: bool) -> Vec<Action> {
    let life = observed.life;
    let Some(since) = life.lost_since else {
        return vec![Action::FenceLostState];
    };
    if life.opened {
        let fenced_for = (observed.now - since).to_std().unwrap_or_default();
        // Selling through the database began only once drained, and Redis
        // has accepted nothing since: what the topic holds is persisted
        // (waiting for a lag of 0 under that traffic could wait long).
        let drained = (observed.lag == Some(0) || life.through_database_since.is_some())
            && fenced_for >= grace;
        return if drained {
            vec![Action::BeginRecovery]
        } else {
            Vec::new()
        };
    }
    if ready_to_warm {
        vec![Action::Warm]
    } else {
        Vec::new()
    }
}

/// The state the window gives a sale whose Redis state is being recovered.
fn window_state(timeline: &Timeline, wanted: &Wanted, now: DateTime<Utc>) -> SaleState {
    if now < timeline.start {
        SaleState::Warming
    } else if now >= timeline.end {
        SaleState::Ended
    } else if wanted.paused {
        SaleState::Paused
    } else {
        SaleState::Live
    }
}

/// Steps while Redis holds the sale: metadata in step with the spec, stock
/// changes applied.
fn live_actions(wanted: &Wanted, observed: &Observed, actions: &mut Vec<Action>) {
    if let Some(row) = observed.row
        && observed
            .redis
            .generation
            .is_some_and(|g| g < row.generation)
    {
        actions.push(Action::Restock);
    }
    if !observed.redis.metas.iter().all(|m| *m == Some(wanted.meta)) {
        actions.push(Action::WriteMeta(wanted.meta));
    }
}

/// How many reconciliation intervals have passed since the start.
pub fn periodic_index(timeline: &Timeline, now: DateTime<Utc>) -> u64 {
    let every = timeline.reconcile_every.as_millis().max(1) as i64;
    let since = (now - timeline.start).num_milliseconds();
    if since < 0 { 0 } else { (since / every) as u64 }
}

fn periodic_due(timeline: &Timeline, index: u64) -> DateTime<Utc> {
    let every = timeline.reconcile_every.as_millis() as i64;
    timeline.start + chrono::Duration::milliseconds(every.saturating_mul(index as i64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::timeline::tests::{CLEANUP_AT, END, START, WARM_AT, t, timeline};

    fn meta(paused: bool, busy: bool) -> SaleMeta {
        SaleMeta {
            warmed: true,
            paused,
            busy,
            start_ms: START * 1000,
            end_ms: END * 1000,
            limit: 2,
        }
    }

    fn wanted() -> Wanted {
        Wanted {
            stock: 100,
            paused: false,
            meta: meta(false, false),
            replicas: 1,
            scaling_check: None,
            recovery_grace: Duration::from_secs(6),
        }
    }

    fn row() -> RowFacts {
        RowFacts {
            stock: 100,
            sold: 0,
            generation: 1,
            matches_spec: true,
        }
    }

    fn warm_redis(remaining: i64) -> LoadedSale {
        LoadedSale {
            stocks: vec![remaining],
            metas: vec![Some(meta(false, false))],
            incarnations: vec![Some(uuid::Uuid::nil().to_string())],
            fenced: vec![false],
            stock_total: Some(100),
            generation: Some(1),
        }
    }

    fn cold_redis() -> LoadedSale {
        LoadedSale {
            stocks: vec![0],
            metas: vec![None],
            incarnations: vec![None],
            fenced: vec![false],
            stock_total: None,
            generation: None,
        }
    }

    fn observed(now: i64) -> Observed {
        Observed {
            now: t(now),
            row: Some(row()),
            topics_ready: true,
            redis: if now >= WARM_AT {
                warm_redis(60)
            } else {
                cold_redis()
            },
            pending_shrinks: Vec::new(),
            life: RedisLife {
                incarnation: Some(uuid::Uuid::nil()),
                opened: false,
                ..RedisLife::default()
            },
            lag: Some(0),
            final_job: None,
            cleanup_job: None,
            periodic_job: None,
            periodic_started: None,
        }
    }

    fn steps(p: &Plan) -> Vec<Action> {
        p.actions
            .iter()
            .copied()
            .filter(|a| !matches!(a, Action::ApplyConsumers { .. }))
            .collect()
    }

    #[test]
    fn a_new_sale_creates_its_row_and_topics_and_waits_for_warm_up() {
        let o = Observed {
            row: None,
            topics_ready: false,
            ..observed(0)
        };
        let p = plan(&timeline(), &wanted(), &o);
        assert_eq!(p.state, SaleState::Scheduled);
        assert_eq!(
            steps(&p),
            vec![Action::SyncSaleRow { stock: 100 }, Action::EnsureTopics]
        );
        assert!(
            p.actions.contains(&Action::ApplyConsumers { replicas: 0 }),
            "no consumers weeks ahead"
        );
        assert_eq!(p.replicas, 0);
        assert_eq!(
            p.wake_in, HEARTBEAT,
            "warm-up is far: the heartbeat comes first"
        );
    }

    #[test]
    fn clock_edges_of_the_lifecycle() {
        let cold = |now| Observed {
            redis: cold_redis(),
            ..observed(now)
        };
        let two = Some(Duration::from_secs(2));
        // (what, observed, state, actions, wake-up, watched every)
        type Row = (
            &'static str,
            Observed,
            SaleState,
            Vec<Action>,
            Duration,
            Option<Duration>,
        );
        let rows: Vec<Row> = vec![
            (
                "one second before warm-up",
                cold(WARM_AT - 1),
                SaleState::Scheduled,
                vec![],
                Duration::from_secs(1),
                None,
            ),
            (
                "at warm-up",
                cold(WARM_AT),
                SaleState::Warming,
                vec![Action::Warm],
                Duration::from_secs(1),
                None,
            ),
            (
                "warm, just before start",
                observed(START - 1),
                SaleState::Warm,
                vec![],
                Duration::from_secs(1),
                None,
            ),
            (
                "at start",
                observed(START),
                SaleState::Live,
                vec![],
                HEARTBEAT,
                two,
            ),
            (
                "just before end",
                observed(END - 1),
                SaleState::Live,
                vec![Action::StartJob(JobKind::Periodic(2))],
                Duration::from_secs(1),
                two,
            ),
            (
                "at end",
                observed(END),
                SaleState::Ended,
                vec![Action::StartJob(JobKind::Final)],
                JOB_POLL,
                None,
            ),
        ];
        for (what, o, state, actions, wake, watch) in rows {
            let p = plan(&timeline(), &wanted(), &o);
            assert_eq!(p.state, state, "{what}");
            assert_eq!(steps(&p), actions, "{what}");
            assert_eq!(p.wake_in, wake, "{what}");
            assert_eq!(
                p.watch_every, watch,
                "{what}: live sales are watched, not polled"
            );
        }
    }

    #[test]
    fn warm_up_waits_for_the_row_and_topics() {
        let o = Observed {
            redis: cold_redis(),
            topics_ready: false,
            ..observed(WARM_AT)
        };
        let p = plan(&timeline(), &wanted(), &o);
        assert_eq!(
            steps(&p),
            vec![Action::EnsureTopics],
            "no warm before the topics exist"
        );
        let o = Observed {
            redis: cold_redis(),
            row: Some(RowFacts {
                matches_spec: false,
                ..row()
            }),
            ..observed(WARM_AT)
        };
        assert_eq!(
            steps(&plan(&timeline(), &wanted(), &o)),
            vec![Action::SyncSaleRow { stock: 100 }]
        );
    }

    #[test]
    fn a_sale_created_late_warms_at_once() {
        let o = Observed {
            redis: cold_redis(),
            ..observed(START + 10)
        };
        let p = plan(&timeline(), &wanted(), &o);
        assert_eq!(
            (p.state, steps(&p)),
            (SaleState::Warming, vec![Action::Warm])
        );
    }

    #[test]
    fn kill_switch_and_backpressure_reach_every_shard() {
        let paused = Wanted {
            paused: true,
            meta: meta(true, false),
            ..wanted()
        };
        let p = plan(&timeline(), &paused, &observed(START + 5));
        assert_eq!(p.state, SaleState::Paused);
        assert_eq!(steps(&p), vec![Action::WriteMeta(meta(true, false))]);
        let busy = Wanted {
            meta: meta(false, true),
            ..wanted()
        };
        assert_eq!(
            steps(&plan(&timeline(), &busy, &observed(START + 5))),
            vec![Action::WriteMeta(meta(false, true))]
        );
        // Paused before the start shows Paused too.
        assert_eq!(
            plan(&timeline(), &paused, &observed(START - 5)).state,
            SaleState::Paused
        );
    }

    #[test]
    fn sold_out_while_live() {
        let o = Observed {
            redis: warm_redis(0),
            ..observed(START + 5)
        };
        assert_eq!(plan(&timeline(), &wanted(), &o).state, SaleState::SoldOut);
    }

    #[test]
    fn restock_and_refused_shrink() {
        // The row moved to generation 2 (restock): Redis must follow.
        let restocked = Observed {
            row: Some(RowFacts {
                stock: 150,
                generation: 2,
                ..row()
            }),
            ..observed(START + 5)
        };
        let p = plan(
            &timeline(),
            &Wanted {
                stock: 150,
                ..wanted()
            },
            &restocked,
        );
        assert_eq!(steps(&p), vec![Action::Restock]);
        // 100 units, 60 left: 40 sold. Shrinking to 30 is refused, to 40 is fine.
        let p = plan(
            &timeline(),
            &Wanted {
                stock: 30,
                ..wanted()
            },
            &observed(START + 5),
        );
        assert_eq!(
            p.refused,
            Some(Refused::StockBelowSold {
                asked: 30,
                sold: 40
            })
        );
        assert_eq!(steps(&p), vec![], "the row keeps its stock");
        let p = plan(
            &timeline(),
            &Wanted {
                stock: 40,
                ..wanted()
            },
            &observed(START + 5),
        );
        assert_eq!(
            (p.refused.clone(), steps(&p)),
            (
                None,
                vec![Action::Shrink {
                    to: 40,
                    generation: 2
                }]
            ),
            "a shrink of a warm sale starts in Redis; the row follows"
        );
        // A shrink to 50 took 10 units out of Redis, then the spec asked 45:
        // the first one is undone, the second one starts.
        let half_way = Observed {
            pending_shrinks: vec![((2, 50), 10)],
            ..observed(START + 5)
        };
        let p = plan(
            &timeline(),
            &Wanted {
                stock: 45,
                ..wanted()
            },
            &half_way,
        );
        assert_eq!(
            steps(&p),
            vec![
                Action::UndoShrink {
                    generation: 2,
                    to: 50
                },
                Action::Shrink {
                    to: 45,
                    generation: 2
                }
            ]
        );
        // The same shrink is resumed, not undone.
        let p = plan(
            &timeline(),
            &Wanted {
                stock: 50,
                ..wanted()
            },
            &half_way,
        );
        assert_eq!(
            steps(&p),
            vec![Action::Shrink {
                to: 50,
                generation: 2
            }]
        );
        // Issue 33 #9: the spec raised the stock instead: the withdrawal is
        // given back first; the restock (the next generation, the shrink's
        // own) waits for the next pass.
        let p = plan(
            &timeline(),
            &Wanted {
                stock: 150,
                ..wanted()
            },
            &half_way,
        );
        assert_eq!(
            steps(&p),
            vec![Action::UndoShrink {
                generation: 2,
                to: 50
            }]
        );
        // Redis recorded a shrink the row never got: the row catches up.
        let mut recorded = observed(START + 5);
        recorded.redis.stock_total = Some(50);
        recorded.redis.generation = Some(2);
        let p = plan(
            &timeline(),
            &Wanted {
                stock: 50,
                ..wanted()
            },
            &recorded,
        );
        assert_eq!(
            steps(&p),
            vec![Action::RecordRowStock {
                stock: 50,
                generation: 2
            }]
        );
    }

    #[test]
    fn periodic_reconciliation_every_interval_one_at_a_time() {
        let at = |now, periodic| Observed {
            periodic_job: periodic,
            periodic_started: None,
            ..observed(now)
        };
        let run = |o: &Observed| steps(&plan(&timeline(), &wanted(), o));
        assert_eq!(
            run(&at(START + 199, None)),
            vec![],
            "not before the first interval"
        );
        assert_eq!(
            run(&at(START + 200, None)),
            vec![Action::StartJob(JobKind::Periodic(1))]
        );
        assert_eq!(run(&at(START + 210, Some((1, JobPhase::Running)))), vec![]);
        assert_eq!(
            run(&at(START + 300, Some((1, JobPhase::Succeeded)))),
            vec![],
            "#1 done, #2 not due"
        );
        assert_eq!(
            run(&at(START + 400, Some((1, JobPhase::Succeeded)))),
            vec![Action::StartJob(JobKind::Periodic(2))]
        );
        assert_eq!(
            run(&at(START + 400, Some((1, JobPhase::Running)))),
            vec![],
            "never two at once"
        );
        let p = plan(
            &timeline(),
            &wanted(),
            &at(START + 399, Some((1, JobPhase::Succeeded))),
        );
        assert_eq!(p.wake_in, Duration::from_secs(1), "wakes for the next one");
    }

    #[test]
    fn after_the_end_final_reconciliation_then_cleanup_once_drained() {
        let after = |now, final_job, cleanup_job, lag| Observed {
            final_job,
            cleanup_job,
            lag,
            ..observed(now)
        };
        let s = |o: &Observed| {
            let p = plan(&timeline(), &wanted(), o);
            (p.state, steps(&p))
        };
        use JobPhase::*;
        assert_eq!(
            s(&after(END + 1, Some(Running), None, Some(5))),
            (SaleState::Ended, vec![])
        );
        assert_eq!(
            s(&after(END + 1, Some(Succeeded), None, Some(0))),
            (SaleState::Ended, vec![])
        );
        assert_eq!(
            s(&after(CLEANUP_AT - 1, Some(Succeeded), None, Some(0))),
            (SaleState::Ended, vec![])
        );
        assert_eq!(
            s(&after(CLEANUP_AT, Some(Succeeded), None, Some(3))),
            (SaleState::Ended, vec![]),
            "not drained"
        );
        let draining = plan(
            &timeline(),
            &wanted(),
            &after(CLEANUP_AT, Some(Succeeded), None, Some(3)),
        );
        assert_eq!(
            draining.watch_every,
            Some(Duration::from_secs(2)),
            "watched until its lag is 0"
        );
        assert_eq!(
            s(&after(CLEANUP_AT, Some(Succeeded), None, None)),
            (SaleState::Ended, vec![]),
            "lag unknown"
        );
        assert_eq!(
            s(&after(CLEANUP_AT, Some(Succeeded), None, Some(0))),
            (
                SaleState::CleaningUp,
                vec![Action::StartJob(JobKind::Cleanup)]
            )
        );
        assert_eq!(
            s(&after(
                CLEANUP_AT + 5,
                Some(Succeeded),
                Some(Running),
                Some(0)
            )),
            (SaleState::CleaningUp, vec![])
        );
        let done = Observed {
            redis: cold_redis(),
            ..after(CLEANUP_AT + 9, Some(Succeeded), Some(Succeeded), Some(0))
        };
        assert_eq!(
            s(&done),
            (SaleState::Completed, vec![Action::DeleteConsumers])
        );
        assert_eq!(
            s(&after(END + 5, Some(Failed), None, Some(0))).0,
            SaleState::Failed
        );
        // Cleanup finished but Redis still holds the sale: not completed.
        assert_eq!(
            s(&after(
                CLEANUP_AT + 9,
                Some(Succeeded),
                Some(Succeeded),
                Some(0)
            ))
            .0,
            SaleState::CleaningUp
        );
    }

    #[test]
    fn a_sale_never_warmed_that_ended_is_cleaned_up_without_reconciliation() {
        let o = Observed {
            redis: cold_redis(),
            ..observed(CLEANUP_AT)
        };
        let p = plan(&timeline(), &wanted(), &o);
        assert_eq!(
            (p.state, steps(&p)),
            (
                SaleState::CleaningUp,
                vec![Action::StartJob(JobKind::Cleanup)]
            )
        );
    }

    #[test]
    fn scaling_revisits_and_wake_ups_are_bounded() {
        let w = Wanted {
            scaling_check: Some(t(START + 30)),
            ..wanted()
        };
        let p = plan(&timeline(), &w, &observed(START - 100));
        assert_eq!(
            p.wake_in,
            Duration::from_secs(60),
            "never sleeps past the heartbeat"
        );
        let p = plan(
            &timeline(),
            &Wanted { replicas: 7, ..w },
            &observed(START + 29),
        );
        assert_eq!(p.wake_in, Duration::from_secs(1));
        assert!(p.actions.contains(&Action::ApplyConsumers { replicas: 7 }));
    }

    #[test]
    fn accepted_units_come_from_redis_once_warmed() {
        assert_eq!(accepted_units(&observed(START)), 40);
        let cold = Observed {
            redis: cold_redis(),
            row: Some(RowFacts { sold: 7, ..row() }),
            ..observed(0)
        };
        assert_eq!(accepted_units(&cold), 7);
    }

    /// Issue 33 #4: a fence that landed after warm.lua loaded the new
    /// incarnation and before the sale was recorded open (the reopening
    /// cleared the record of the loss): the shards still say lost, so the
    /// sale is fenced and recovered again, never left Live selling nothing.
    #[test]
    fn a_fence_the_reopening_cleared_is_noticed_in_the_shards() {
        let mut reopened = observed(START + 5);
        reopened.life.opened = true;
        reopened.redis.fenced = vec![true];
        let p = plan(&timeline(), &wanted(), &reopened);
        assert_eq!(steps(&p), vec![Action::FenceLostState]);
    }

    /// Issue 33 #3: the recovery waits the grace derived from the API's
    /// purchase budget, whatever it is, before reloading.
    #[test]
    fn recovery_waits_the_grace_of_the_purchase_budget() {
        let mut fenced = observed(START + 10);
        fenced.life.opened = true;
        fenced.life.lost_since = Some(t(START + 4));
        fenced.lag = Some(0);
        for (grace, expected) in [
            (Duration::from_secs(2), vec![Action::BeginRecovery]),
            (Duration::from_secs(6), vec![Action::BeginRecovery]),
            (Duration::from_secs(7), vec![]),
            (Duration::from_secs(61), vec![]),
        ] {
            let wanted = Wanted {
                recovery_grace: grace,
                ..wanted()
            };
            let p = plan(&timeline(), &wanted, &fenced);
            assert_eq!(steps(&p), expected, "grace {grace:?}");
        }
    }

    #[test]
    fn a_lost_state_is_fenced_drained_then_reloaded() {
        let mut live = observed(START + 5);
        live.life.opened = true;
        assert_eq!(plan(&timeline(), &wanted(), &live).state, SaleState::Live);
        let run = |o: &Observed| {
            let p = plan(&timeline(), &wanted(), o);
            (p.state, steps(&p))
        };
        // Redis came back empty: fence, nothing else written.
        let empty = Observed {
            redis: cold_redis(),
            ..live.clone()
        };
        assert_eq!(run(&empty), (SaleState::Live, vec![Action::FenceLostState]));
        // Fenced 2 s ago: the orders accepted before may still be producing.
        let fenced = Observed {
            life: RedisLife {
                lost_since: Some(t(START + 3)),
                ..empty.life
            },
            ..empty.clone()
        };
        assert_eq!(run(&fenced), (SaleState::Live, vec![]));
        // Orders in the topic: wait for the consumers.
        let later = Observed {
            now: t(START + 20),
            lag: Some(40),
            ..fenced.clone()
        };
        assert_eq!(run(&later), (SaleState::Live, vec![]));
        // Drained: a new incarnation, then warm-up reloads it.
        let drained = Observed {
            lag: Some(0),
            ..later.clone()
        };
        assert_eq!(
            run(&drained),
            (SaleState::Live, vec![Action::BeginRecovery])
        );
        let reloading = Observed {
            life: RedisLife {
                opened: false,
                ..drained.life
            },
            ..drained
        };
        assert_eq!(run(&reloading), (SaleState::Live, vec![Action::Warm]));
        // Selling through the database when Redis comes back: its orders
        // in the topic are persisted already; the recovery need not wait.
        let through_database = Observed {
            lag: Some(12),
            life: RedisLife {
                through_database_since: Some(t(START + 12)),
                ..later.life
            },
            ..later.clone()
        };
        assert_eq!(
            run(&through_database),
            (SaleState::Live, vec![Action::BeginRecovery])
        );
        // A failover that kept the metadata but dropped writes: a consumer
        // fenced it and recorded the loss; a shrink asked meanwhile waits.
        let failed_over = Observed {
            life: RedisLife {
                lost_since: Some(t(START + 4)),
                ..live.life
            },
            ..live.clone()
        };
        let p = plan(
            &timeline(),
            &Wanted {
                stock: 70,
                ..wanted()
            },
            &failed_over,
        );
        assert_eq!(steps(&p), vec![], "no shrink, no metadata written");
        // A sale cleaned up on purpose (opened cleared first) is no loss.
        let cleaned = Observed {
            now: t(CLEANUP_AT + 5),
            redis: cold_redis(),
            life: RedisLife {
                opened: false,
                ..live.life
            },
            cleanup_job: Some(JobPhase::Succeeded),
            final_job: Some(JobPhase::Succeeded),
            ..live
        };
        assert_eq!(run(&cleaned).0, SaleState::Completed);
    }

    /// A periodic reconciliation's Job is removed an hour after it finished;
    /// the index kept in status stops it from running again.
    #[test]
    fn a_periodic_reconciliation_runs_once_even_after_its_job_is_gone() {
        let gone = Observed {
            periodic_job: None,
            periodic_started: Some(1),
            ..observed(START + 300)
        };
        assert_eq!(steps(&plan(&timeline(), &wanted(), &gone)), vec![]);
        let next = Observed {
            now: t(START + 400),
            ..gone
        };
        assert_eq!(
            steps(&plan(&timeline(), &wanted(), &next)),
            vec![Action::StartJob(JobKind::Periodic(2))]
        );
    }
}
