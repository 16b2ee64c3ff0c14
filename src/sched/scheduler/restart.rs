//! `restart APP [--instance N]` (seed 002's PATCH operation restart): the whole app by the
//! rollout rules, node by node within its strategy's budget, as `kubectl rollout restart`
//! does — the app's spec gets the `steward/restartedAt` label `steward rollout restart` sets on
//! one host, a change of what runs, which each node rolls out by its strategy (surge 1 by
//! default: a new instance ready before an old one goes). One instance: restarted in place on
//! its node.

use super::{check_spec, instance_id, PlacedInstance, Scheduler};
use crate::client::ClientError;
use crate::protocol::{DeployCause, DesiredChange};
use crate::sched::SchedError;
use crate::spec::AppId;

use crate::supervisor::rollout::RESTARTED_AT_LABEL;

/// How long one instance's restart may take on its node.
const RESTART_TIMEOUT_SECS: f64 = 120.0;

impl Scheduler {
    /// `restart APP [--instance N]`.
    pub async fn restart(&self, key: &AppId, index: Option<u32>) -> Result<Vec<PlacedInstance>, SchedError> {
        let app = self.stored(key).await?;
        let refuse = |message: String| SchedError::Apply { app: key.to_string(), message };
        let Some(i) = index else {
            let mut doc = app.spec.clone();
            doc["metadata"]["labels"][RESTARTED_AT_LABEL] =
                serde_json::json!(crate::clock::rfc3339_utc(crate::clock::now_ms()));
            let spec = check_spec(&doc).map_err(|errors| SchedError::Spec { path: "(stored spec)".into(), errors })?;
            return self.deploy_and_roll_out(doc, &spec, DeployCause::Restarted, None).await;
        };
        let placement = app
            .placements
            .get(&i)
            .ok_or_else(|| refuse(format!("no instance {i} (it has {})", app.placements.len())))?;
        if app.stopped.contains(&i) {
            return Err(refuse(format!("instance {i} is stopped by the operator: `start` it")));
        }
        let node = placement.node.clone();
        let client =
            self.client(&node).ok_or_else(|| refuse(format!("instance {i} is on {node}, no longer in the cluster")))?;
        let why = DesiredChange::Restarted { app: key.to_string(), instance: Some(i) };
        self.update_app(key, &why, |_| true).await?;
        match client.action(&instance_id(key, i), "restart", Some(RESTART_TIMEOUT_SECS)).await {
            Ok(_) => {}
            Err(e @ ClientError::Api { .. }) => {
                return Err(SchedError::Node { node, message: format!("restart {key}/{i}: {e}") })
            }
            Err(e) => {
                self.note_unreachable(&node, &e.to_string());
                return Err(SchedError::Node { node, message: format!("restart {key}/{i}: {e}") });
            }
        }
        let (views, _) = self.read_nodes().await;
        Ok(self.describe(&self.stored(key).await?, &views).await)
    }
}

impl Scheduler {
    /// `cp FILE APP/INDEX:PATH`: the file into the instance on whichever node runs it (the
    /// daemon's PUT .../files), with the same rules as `steward cp` there.
    pub async fn copy_in(
        &self,
        key: &AppId,
        index: u32,
        path: &str,
        data: Vec<u8>,
        how: (bool, Option<&str>, Option<&str>),
    ) -> Result<(String, crate::protocol::FileCopied), SchedError> {
        let app = self.stored(key).await?;
        let refuse = |message: String| SchedError::Apply { app: key.to_string(), message };
        let placement = app
            .placements
            .get(&index)
            .ok_or_else(|| refuse(format!("no instance {index} (it has {})", app.placements.len())))?;
        let node = placement.node.clone();
        let client = self
            .client(&node)
            .ok_or_else(|| refuse(format!("instance {index} is on {node}, no longer in the cluster")))?;
        let (writable, user, container) = how;
        match client.copy_in(&instance_id(key, index), path, data, writable, user, container).await {
            Ok(copied) => Ok((node, copied)),
            Err(e) => {
                if !matches!(e, ClientError::Api { .. }) {
                    self.note_unreachable(&node, &e.to_string());
                }
                Err(SchedError::Node { node, message: format!("cp to {key}/{index}: {e}") })
            }
        }
    }
}
