//! The lag of each sale's consumer group, one [`LagReader`] per sale made on
//! first use and shared by an API process's janitor and its order lookups.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use uuid::Uuid;

use super::lag::{GroupLag, LagError, LagReader};
use super::topics;
use crate::domain::sale::SaleRef;

/// The sales' lag readers, and each sale's last total for callers that can
/// use a reading a moment old.
pub struct SaleLags {
    bootstrap: String,
    readers: Mutex<HashMap<Uuid, Arc<LagReader>>>,
    totals: Mutex<HashMap<Uuid, (Instant, i64)>>,
}

impl SaleLags {
    /// Readers for the cluster at `bootstrap`.
    pub fn new(bootstrap: &str) -> Self {
        Self {
            bootstrap: bootstrap.to_string(),
            readers: Mutex::default(),
            totals: Mutex::default(),
        }
    }

    /// The lag of the consumer group of sale `id` (named `sale`) now.
    pub async fn read(&self, id: Uuid, sale: &SaleRef) -> Result<GroupLag, LagError> {
        let reader = {
            let mut readers = self.readers.lock().unwrap_or_else(|p| p.into_inner());
            match readers.get(&id) {
                Some(reader) => reader.clone(),
                None => {
                    let reader = Arc::new(LagReader::new(
                        &self.bootstrap,
                        &topics::consumer_group(sale),
                    )?);
                    readers.insert(id, reader.clone());
                    reader
                }
            }
        };
        let lag = reader.read(&topics::orders_topic(sale)).await?;
        self.totals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, (Instant::now(), lag.total()));
        Ok(lag)
    }

    /// Messages of sale `id` its consumers have not persisted yet, as read
    /// at most `max_age` ago (read now if the last reading is older).
    pub async fn unread(
        &self,
        id: Uuid,
        sale: &SaleRef,
        max_age: Duration,
    ) -> Result<i64, LagError> {
        let recent = self
            .totals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .filter(|(at, _)| at.elapsed() <= max_age)
            .map(|(_, total)| *total);
        match recent {
            Some(total) => Ok(total),
            None => Ok(self.read(id, sale).await?.total()),
        }
    }
}
