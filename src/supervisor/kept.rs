//! Kept volumes (seed 003 Dynamic, Isolated; issue 47): listed, and removed at the operator's
//! word. They are made by an ordinal's first start (runtime/volumes.rs) and outlive its
//! instance: `<volume_root>/<namespace>/<app>/<ordinal>/<volume>`.

use super::{Supervisor, SupervisorError};
use crate::protocol::{DaemonEvent, EventBody, KeptVolume};
use crate::spec::render::InstanceId;
use crate::store::Batch;
use std::path::{Path, PathBuf};

/// What a volume being removed is renamed to first (below `volume_root`, never listed).
const ASIDE: &str = ".removing-";

/// The subdirectories of `dir` (symlinks and files left out), by name.
fn subdirs(dir: &Path) -> Vec<(String, PathBuf)> {
    let mut dirs: Vec<(String, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| Some((e.file_name().into_string().ok()?, e.path())))
        .collect();
    dirs.sort();
    dirs
}

/// What the files below `dir` hold, symlinks not followed.
fn bytes_below(dir: &Path) -> u64 {
    let mut total = 0;
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            match entry.file_type() {
                Ok(t) if t.is_dir() => todo.push(entry.path()),
                Ok(t) if t.is_file() => total += entry.metadata().map_or(0, |m| m.len()),
                _ => {}
            }
        }
    }
    total
}

impl Supervisor {
    /// Every kept volume below `volume_root` (of `namespace` only, when given), with the
    /// instance using it now. Walks the disk: call it off the runtime's threads.
    pub fn kept_volumes(&self, namespace: Option<&str>) -> Vec<KeptVolume> {
        let root = &self.shared.roots.volume_root;
        let mut out = Vec::new();
        let listed = |ns: &String| !ns.starts_with(ASIDE) && namespace.is_none_or(|n| n == ns);
        for (ns, ns_dir) in subdirs(root).into_iter().filter(|(ns, _)| listed(ns)) {
            for (app, app_dir) in subdirs(&ns_dir) {
                for (ordinal, ordinal_dir) in subdirs(&app_dir) {
                    let Ok(index) = ordinal.parse::<u32>() else { continue };
                    let id = InstanceId { namespace: ns.clone(), name: app.clone(), index };
                    let instance =
                        self.instances.lock().expect("instances lock").contains_key(&id).then(|| id.to_string());
                    for (volume, path) in subdirs(&ordinal_dir) {
                        out.push(KeptVolume {
                            namespace: ns.clone(),
                            name: app.clone(),
                            ordinal: index,
                            bytes: bytes_below(&path),
                            path: path.display().to_string(),
                            volume,
                            instance: instance.clone(),
                        });
                    }
                }
            }
        }
        out
    }

    /// The ordinals with at least one kept volume here, as `namespace/name/ordinal`: what a
    /// scheduler pins each to this host by (a read of three levels of directories).
    pub fn kept_ordinals(&self) -> Vec<String> {
        let root = &self.shared.roots.volume_root;
        let mut out = Vec::new();
        for (ns, ns_dir) in subdirs(root).into_iter().filter(|(ns, _)| !ns.starts_with(ASIDE)) {
            for (app, app_dir) in subdirs(&ns_dir) {
                for (ordinal, ordinal_dir) in subdirs(&app_dir) {
                    if ordinal.parse::<u32>().is_ok() && !subdirs(&ordinal_dir).is_empty() {
                        out.push(format!("{ns}/{app}/{ordinal}"));
                    }
                }
            }
        }
        out
    }

    /// Removes ordinal `id`'s kept volume `volume`, with what it holds, and journals it.
    /// Refused while the instance exists here (it mounts the volume). The directory is moved
    /// aside under the instances' lock (an instance applied meanwhile starts on an empty one)
    /// and journaled removed, then what it holds is deleted; what a daemon killed meanwhile
    /// left aside goes with the next removal.
    pub async fn remove_kept_volume(&self, id: &InstanceId, volume: &str) -> Result<(), SupervisorError> {
        let root = self.shared.roots.volume_root.clone();
        let ordinal_dir = crate::spec::render::pod::kept_volumes_of(&root, id);
        let path = ordinal_dir.join(volume);
        let aside = root.join(format!("{ASIDE}{}-{}-{}-{volume}", id.namespace, id.name, id.index));
        {
            let instances = self.instances.lock().expect("instances lock");
            if instances.contains_key(id) {
                return Err(SupervisorError::Conflict(format!(
                    "volume {volume:?} of {id} is in use by instance {id}: delete it (or scale it away) first"
                )));
            }
            match std::fs::symlink_metadata(&path) {
                Ok(m) if m.is_dir() => {}
                _ => return Err(SupervisorError::NotFound(format!("kept volume {volume:?} of {id}"))),
            }
            if aside.exists() {
                std::fs::remove_dir_all(&aside).map_err(|e| crate::safefs::at(&aside, e))?;
            }
            std::fs::rename(&path, &aside).map_err(|e| crate::safefs::at(&path, e))?;
        }
        // The ordinal's and the app's directories go once empty (a failure leaves them: harmless).
        for dir in [&ordinal_dir, &root.join(&id.namespace).join(&id.name), &root.join(&id.namespace)] {
            let _ = std::fs::remove_dir(dir);
        }
        let body = EventBody::Daemon(DaemonEvent::VolumeRemoved {
            namespace: id.namespace.clone(),
            name: id.name.clone(),
            ordinal: id.index,
            volume: volume.to_string(),
        });
        self.commit(Batch::new().event(body.to_value())).await?;
        tokio::task::spawn_blocking(move || {
            for (name, dir) in subdirs(&root).into_iter().filter(|(n, _)| n.starts_with(ASIDE)) {
                if let Err(e) = std::fs::remove_dir_all(&dir) {
                    tracing::warn!("removing kept volume {name}: {}", crate::safefs::at(&dir, e));
                }
            }
        })
        .await
        .map_err(|e| SupervisorError::Failed(e.to_string()))
    }
}
