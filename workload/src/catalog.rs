//! The sales an API process serves: the namespace's sale rows and what Redis
//! says about each, refreshed once a second by one background task. Requests
//! read the latest snapshot and never query PostgreSQL themselves, so unknown
//! sale names cost the database nothing, whatever their rate.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

use crate::domain::order::{ORDER_TIME_SLACK, may_name_an_order};
use crate::domain::sale::{SaleConfig, SaleMeta};
use crate::orders::sales::{self, RedisLife};
use crate::redis::store::SaleStore;

/// One sale as the API sees it.
#[derive(Debug, Clone)]
pub struct SaleView {
    /// Its configuration (database).
    pub config: SaleConfig,
    /// Its Redis metadata; `None` until warmed or when Redis was unreachable.
    pub meta: Option<SaleMeta>,
    /// Units left over all shards (Redis).
    pub remaining: i64,
    /// What the database knows of the sale's Redis state: whether it was
    /// opened, and whether it is lost (then purchases are refused at once).
    pub life: RedisLife,
}

#[derive(Default)]
struct Snapshot {
    sales: HashMap<String, Arc<SaleView>>,
    /// The windows of every sale of the namespace, deleted ones too.
    windows: Vec<(DateTime<Utc>, DateTime<Utc>)>,
    refreshed_at: Option<Instant>,
}

/// The namespace's sales, refreshed in the background.
pub struct Catalog {
    namespace: String,
    db: PgPool,
    store: SaleStore,
    snapshot: RwLock<Arc<Snapshot>>,
    /// Sales found sold out, with the generation they were found at: answered
    /// SOLD_OUT without Redis until a refresh sees stock or a new generation.
    sold_out: Mutex<HashMap<Uuid, i64>>,
}

/// How often the catalog is refreshed (also the sale-info cache lifetime).
pub const REFRESH_EVERY: Duration = Duration::from_secs(1);

impl Catalog {
    /// An empty catalog of `namespace`; call [`Catalog::refresh`] or
    /// [`Catalog::spawn_refresher`].
    pub fn new(namespace: &str, db: PgPool, store: SaleStore) -> Self {
        Self {
            namespace: namespace.to_string(),
            db,
            store,
            snapshot: RwLock::new(Arc::new(Snapshot::default())),
            sold_out: Mutex::new(HashMap::new()),
        }
    }

    /// The namespace served.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The sale named `name`, as of the last refresh.
    pub fn get(&self, name: &str) -> Option<Arc<SaleView>> {
        self.read().sales.get(name).cloned()
    }

    /// Every sale, as of the last refresh.
    pub fn all(&self) -> Vec<Arc<SaleView>> {
        self.read().sales.values().cloned().collect()
    }

    /// Whether `id` can name an order of one of the namespace's sales, ever
    /// (see [`may_name_an_order`]): made-up ids are answered without I/O.
    pub fn may_hold_order(&self, id: Uuid) -> bool {
        may_name_an_order(id, &self.read().windows, ORDER_TIME_SLACK)
    }

    /// Whether a refresh ever succeeded (readiness).
    pub fn is_loaded(&self) -> bool {
        self.read().refreshed_at.is_some()
    }

    fn read(&self) -> Arc<Snapshot> {
        self.snapshot
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Whether the sale was found sold out at its current generation (never
    /// while it sells through the database: that decides every purchase, and
    /// what was found in Redis is stale).
    pub fn is_sold_out(&self, view: &SaleView) -> bool {
        view.life.through_database_since.is_none()
            && self.sold_out_flags().get(&view.config.id) == Some(&view.config.generation)
    }

    /// Units left in `view`'s sale as this API knows it: none once a
    /// purchase found every shard empty, before the next refresh says so.
    pub fn remaining(&self, view: &SaleView) -> i64 {
        if self.is_sold_out(view) {
            0
        } else {
            view.remaining
        }
    }

    /// Remembers that every shard of the sale was found empty.
    pub fn mark_sold_out(&self, view: &SaleView) {
        self.sold_out_flags()
            .insert(view.config.id, view.config.generation);
    }

    fn sold_out_flags(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, i64>> {
        self.sold_out.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reloads the sale rows, then each sale's Redis metadata and stock. A
    /// database failure keeps the previous snapshot; a Redis failure keeps a
    /// sale's previous Redis view.
    pub async fn refresh(&self) -> sqlx::Result<()> {
        let configs = sales::list_current_with_life(&self.db, &self.namespace).await?;
        let windows = sales::windows(&self.db, &self.namespace).await?;
        let previous = self.read();
        let mut next = HashMap::with_capacity(configs.len());
        for (config, life) in configs {
            let redis_view = async {
                let meta = self.store.meta(&config.sale, 0).await?;
                let stocks = self.store.shard_stocks(&config.sale, config.shards).await?;
                Ok::<_, crate::redis::store::StoreError>((meta, stocks.iter().sum::<i64>()))
            }
            .await;
            let (meta, remaining) = match redis_view {
                Ok(view) => view,
                Err(e) => {
                    tracing::warn!(sale = %config.sale, error = %e, "catalog: redis view unavailable");
                    previous
                        .sales
                        .get(&config.sale.name)
                        .map_or((None, 0), |v| (v.meta, v.remaining))
                }
            };
            next.insert(
                config.sale.name.clone(),
                Arc::new(SaleView {
                    config,
                    meta,
                    remaining,
                    life,
                }),
            );
        }
        self.sold_out_flags().retain(|id, generation| {
            next.values().any(|v| {
                v.config.id == *id && v.config.generation == *generation && v.remaining <= 0
            })
        });
        *self.snapshot.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(Snapshot {
            sales: next,
            windows,
            refreshed_at: Some(Instant::now()),
        });
        Ok(())
    }

    /// Refreshes every [`REFRESH_EVERY`] until the process ends.
    pub fn spawn_refresher(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let catalog = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(REFRESH_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if let Err(e) = catalog.refresh().await {
                    tracing::warn!(error = %e, "catalog: sales unavailable, keeping the last snapshot");
                }
            }
        })
    }
}
