//! The scheduler's own settings, read and changed at run time (seed 002's engine config:
//! `GET`/`PATCH /api/engine/config`): `steward-sched config get [KEY]`, `config set KEY VALUE`.
//! Kept in the cluster's settings record (compare-and-swap, journaled); the leading `run` reads
//! them again every second, so a change takes effect without a restart.

use super::Scheduler;
pub use crate::protocol::sched_answers::ConfigEntry;
pub use crate::protocol::sched_records::{key_of, EngineConfig};
use crate::protocol::DesiredChange;
use crate::sched::SchedError;

impl Scheduler {
    /// `config get [KEY]`.
    pub async fn config(&self, key: Option<&str>) -> Result<Vec<ConfigEntry>, SchedError> {
        if let Some(k) = key {
            key_of(k).map_err(SchedError::Config)?;
        }
        let all = self.store.settings().await?.config.listing();
        Ok(all.into_iter().filter(|e| key.is_none_or(|k| e.key == k)).collect())
    }

    /// `config set KEY VALUE` (`default` puts a key back to its default).
    pub async fn set_config(&self, key: &str, text: &str) -> Result<Vec<ConfigEntry>, SchedError> {
        let mut check = self.store.settings().await?.config;
        let value = check.set(key, text).map_err(SchedError::Config)?;
        let why = DesiredChange::ConfigChanged { key: key.to_string(), value };
        self.update_settings(&why, |s| {
            let _ = s.config.set(key, text);
        })
        .await?;
        self.config(Some(key)).await
    }
}
