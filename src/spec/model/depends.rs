//! `dependencies`: other apps an app needs beside it (seed 002's dependency pods). steward-sched
//! starts a dependency on a host when the first dependent instance arrives there, shares it by
//! reference count, and removes it a grace period after the last dependent left. stewardd
//! itself reads the field and ignores it: placing is the scheduler's.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct DependencyRef {
    /// The dependency as stored by `steward-sched depend apply`: `namespace/name`, or `name`
    /// in the app's own namespace.
    pub name: String,
    pub scope: DependencyScope,
}

/// Who shares one copy of a dependency (seed 002's DependencyPolicy).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum DependencyScope {
    /// Every dependent on the host shares one copy, in the dependency's own namespace.
    #[default]
    Node,
    /// The dependents of one namespace on the host share one copy, run in that namespace.
    Namespace,
}

impl DependencyRef {
    /// The dependency's `namespace/name`, for an app in `namespace`.
    pub fn key(&self, namespace: &str) -> String {
        match self.name.split_once('/') {
            Some(_) => self.name.clone(),
            None => format!("{namespace}/{}", self.name),
        }
    }
}
