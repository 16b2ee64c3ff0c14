//! The scheduler's own settings, read and changed at run time (seed 002's engine config:
//! `GET`/`PATCH /api/engine/config`): `steward-sched config get [KEY]`, `config set KEY VALUE`.
//! Kept in the cluster's settings record (compare-and-swap, journaled); the leading `run` reads
//! them again every second, so a change takes effect without a restart.

use super::Scheduler;
use crate::protocol::DesiredChange;
use crate::sched::SchedError;
use serde::{Deserialize, Serialize};

/// Every key with its default, range and meaning (what `config get` lists).
pub const KEYS: &[(&str, u64, u64, u64, &str)] = &[
    (
        "reconcileSecs",
        10,
        1,
        3600,
        "seconds between the leader's reconcile passes (also where held instances look for room)",
    ),
    ("notifyRestartLimit", 3, 1, 1000, "restarts within the window beyond which a `restarts` notification is sent"),
    ("notifyRestartWindowSecs", 300, 1, 86_400, "the window of notifyRestartLimit, in seconds"),
    (
        "dependencyGraceSecs",
        300,
        0,
        86_400,
        "seconds an idle dependency copy stays, for `depend apply` without --grace",
    ),
];

/// The values set; a key left out has its default (an unchanged record stays empty).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct EngineConfig(std::collections::BTreeMap<String, u64>);

/// The key's default, range and meaning; Err: no such key (the known ones named).
fn key_of(key: &str) -> Result<&'static (&'static str, u64, u64, u64, &'static str), String> {
    KEYS.iter().find(|k| k.0 == key).ok_or_else(|| {
        let known: Vec<&str> = KEYS.iter().map(|k| k.0).collect();
        format!("no setting {key:?} (known: {})", known.join(", "))
    })
}

impl EngineConfig {
    pub fn is_default(&self) -> bool {
        self.0.is_empty()
    }

    /// The value of `key` in force (its default when not set).
    pub fn get(&self, key: &str) -> Option<u64> {
        let (_, default, ..) = key_of(key).ok()?;
        Some(self.0.get(key).copied().unwrap_or(*default))
    }

    pub fn reconcile_every(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.get("reconcileSecs").unwrap_or(10))
    }

    /// Sets `key` from the operator's text: Err names the key and what it takes.
    pub fn set(&mut self, key: &str, text: &str) -> Result<u64, String> {
        let (key, default, min, max, _) = *key_of(key)?;
        let value = match text.trim() {
            "default" => default,
            t => t.parse::<u64>().map_err(|_| format!("{key}: {text:?} is not a whole number"))?,
        };
        if !(min..=max).contains(&value) {
            return Err(format!("{key}: {value} is out of range {min}-{max}"));
        }
        match value == default {
            true => self.0.remove(key),
            false => self.0.insert(key.to_string(), value),
        };
        Ok(value)
    }

    /// Every key with its value in force and whether it is the default.
    pub fn listing(&self) -> Vec<ConfigEntry> {
        KEYS.iter()
            .map(|(key, default, min, max, about)| ConfigEntry {
                key: key.to_string(),
                value: self.get(key).unwrap_or(*default),
                default: *default,
                range: format!("{min}-{max}"),
                about: about.to_string(),
            })
            .collect()
    }
}

/// One line of `config get`.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigEntry {
    pub key: String,
    pub value: u64,
    pub default: u64,
    pub range: String,
    pub about: String,
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_default_parse_and_range_check() {
        let mut c = EngineConfig::default();
        assert_eq!(c.get("reconcileSecs"), Some(10));
        assert_eq!(c.set("reconcileSecs", "3"), Ok(3));
        assert_eq!(c.reconcile_every(), std::time::Duration::from_secs(3));
        assert_eq!(serde_json::to_value(&c).unwrap(), serde_json::json!({"reconcileSecs": 3}));
        assert_eq!(c.set("reconcileSecs", "default"), Ok(10));
        assert!(c.is_default(), "a default is not stored: {c:?}");
        assert_eq!(c.set("reconcileSecs", "0").unwrap_err(), "reconcileSecs: 0 is out of range 1-3600");
        assert_eq!(c.set("notifyRestartLimit", "x").unwrap_err(), "notifyRestartLimit: \"x\" is not a whole number");
        assert!(c.set("nope", "1").unwrap_err().starts_with("no setting \"nope\" (known: reconcileSecs,"));
        assert_eq!(c.listing().len(), KEYS.len());
    }
}
