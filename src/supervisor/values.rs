//! Secrets and configmaps: namespace-scoped key/value stores kept in the daemon's store and
//! injected into instances as environment variables or files when they (re)start. Values are
//! never listed back: listings show names and keys only.

use crate::spec::render::{Injection, InjectionSource, InjectionTarget};
use crate::store::Table;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// Which store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ValueKind {
    Secret,
    ConfigMap,
}

impl ValueKind {
    pub fn table(self) -> Table {
        match self {
            ValueKind::Secret => Table::Secrets,
            ValueKind::ConfigMap => Table::ConfigMaps,
        }
    }
    pub fn word(self) -> &'static str {
        match self {
            ValueKind::Secret => "secret",
            ValueKind::ConfigMap => "configmap",
        }
    }
    pub fn of(source: InjectionSource) -> ValueKind {
        match source {
            InjectionSource::Secret => ValueKind::Secret,
            InjectionSource::ConfigMap => ValueKind::ConfigMap,
        }
    }
}

/// One secret or configmap as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Values {
    pub namespace: String,
    pub name: String,
    pub data: BTreeMap<String, String>,
    pub updated_ms: u64,
}

/// What a listing shows (never the values): a wire type.
pub use crate::protocol::ValuesSummary;

impl Values {
    pub fn key(namespace: &str, name: &str) -> String {
        format!("{namespace}/{name}")
    }
    pub fn summary(&self) -> ValuesSummary {
        ValuesSummary {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            keys: self.data.keys().cloned().collect(),
            updated_ms: self.updated_ms,
        }
    }
}

/// Checks a store's name and keys; the message names what is wrong.
pub fn check(kind: ValueKind, namespace: &str, name: &str, data: &BTreeMap<String, String>) -> Result<(), String> {
    if namespace != crate::spec::model::DEFAULT_NAMESPACE {
        crate::spec::validate::check_name(namespace).map_err(|e| format!("namespace {e}"))?;
    }
    if name.is_empty() || name.len() > 253 || !name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
        return Err(format!("{} name {name:?} must be 1-253 letters, digits, '-', '_' or '.'", kind.word()));
    }
    if data.is_empty() {
        return Err(format!("{} {namespace}/{name} has no data", kind.word()));
    }
    for k in data.keys() {
        if k.is_empty() || !k.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
            return Err(format!("key {k:?} must be letters, digits, '-', '_' or '.'"));
        }
    }
    Ok(())
}

/// Resolves an instance's injections against the stores: env vars to add, and files written
/// (atomically, with their mode and owner). Errors name the store and key, never a value.
pub fn inject(
    injections: &[Injection],
    namespace: &str,
    lookup: impl Fn(ValueKind, &str) -> Option<Values>,
    work_path: &Path,
    process_user: &crate::runtime::process::ResolvedUser,
) -> Result<Vec<(String, String)>, String> {
    let mut env = Vec::new();
    for inj in injections {
        let kind = ValueKind::of(inj.source);
        let store = lookup(kind, &Values::key(namespace, &inj.store));
        let missing = || format!("{} {namespace}/{} does not exist", kind.word(), inj.store);
        if let InjectionTarget::AllEnv { prefix } = &inj.target {
            match store {
                // Keys that are no env var name are left out (as Kubernetes does).
                Some(s) => env.extend(
                    s.data.iter().filter(|(k, _)| is_env_name(k)).map(|(k, v)| (format!("{prefix}{k}"), v.clone())),
                ),
                None if inj.optional => {}
                None => return Err(format!("envFrom: {}", missing())),
            }
            continue;
        }
        // Optional and missing (the store or its key): no env var, an empty file (a mount must
        // find one).
        let found = match store.as_ref().map(|s| s.data.get(&inj.data_key)) {
            Some(Some(v)) => Some(v.as_str()),
            _ if inj.optional => None,
            None => return Err(missing()),
            Some(None) => {
                return Err(format!("{} {namespace}/{} has no key {:?}", kind.word(), inj.store, inj.data_key))
            }
        };
        match &inj.target {
            InjectionTarget::AllEnv { .. } => {}
            InjectionTarget::Env { name } => env.extend(found.map(|v| (name.clone(), v.to_string()))),
            InjectionTarget::File { path, mode, owner } => {
                let value = found.unwrap_or_default();
                // Directories inside workPath belong to the process's user, like workPath itself.
                if let Some(dir) = path.parent().filter(|d| d.starts_with(work_path)) {
                    crate::runtime::process::create_owned_dirs(work_path, dir, process_user)
                        .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
                } else if let Some(dir) = path.parent() {
                    // Below the run directory, which is root's (checked when it was made).
                    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
                }
                write_file(path, value.as_bytes(), *mode, owner).map_err(|e| {
                    format!(
                        "cannot write {} {namespace}/{} key {:?} to {}: {e}",
                        kind.word(),
                        inj.store,
                        inj.data_key,
                        path.display()
                    )
                })?;
            }
        }
    }
    Ok(env)
}

/// Whether `key` may be an env var's name: a letter or `_` first, then letters, digits, `_`.
fn is_env_name(key: &str) -> bool {
    let mut chars = key.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Creates `dir` and its parent as root's, mode 0700 (an existing one is made so): a pod's
/// secret files are mounted into containers file by file, so nobody on the host needs to get
/// through these directories.
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    for d in [dir.parent(), Some(dir)].into_iter().flatten() {
        crate::safefs::dir_with_mode(d, 0o700)?;
        std::os::unix::fs::lchown(d, Some(0), Some(0)).map_err(|e| crate::safefs::at(d, e))?;
    }
    Ok(())
}

/// A file owner: a user name on this host, or a numeric `uid[:gid]` (a container's user, which
/// need not exist on the host; the gid defaults to the uid).
pub fn resolve_owner(owner: &str) -> Result<(u32, u32), String> {
    let numeric = |s: &str| s.parse::<u32>().ok();
    match owner.split_once(':') {
        None if owner.bytes().all(|b| b.is_ascii_digit()) && !owner.is_empty() => {
            let uid = numeric(owner).ok_or_else(|| format!("uid {owner:?} is out of range"))?;
            Ok((uid, uid))
        }
        Some((u, g)) => match (numeric(u), numeric(g)) {
            (Some(uid), Some(gid)) => Ok((uid, gid)),
            _ => Err(format!("owner {owner:?} is not uid:gid (numbers)")),
        },
        None => crate::runtime::process::ResolvedUser::lookup(owner).map(|u| (u.uid, u.gid)),
    }
}

/// Writes `data` to `path` atomically: a new temp file beside it (never through a symlink),
/// mode and owner set before the data goes in, fsync, rename over the target; the directory is
/// reached without following a symlink the workload planted (see [`crate::safefs::replace_file`]).
fn write_file(path: &Path, data: &[u8], mode: u32, owner: &str) -> std::io::Result<()> {
    let (uid, gid) = resolve_owner(owner).map_err(std::io::Error::other)?;
    crate::safefs::replace_file(path, data, mode, uid, gid)
}
