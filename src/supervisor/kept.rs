//! Kept volumes (seed 003 Dynamic, Isolated; issue 47): listed, and removed at the operator's
//! word or with their instance as their policy says (`whenDeleted`, `whenScaled`). They are made by an ordinal's first start (runtime/volumes.rs) and outlive its
//! instance: `<volume_root>/<namespace>/<app>/<ordinal>/<volume>`.

use super::{Shared, Supervisor, SupervisorError};
use crate::protocol::{DaemonEvent, EventBody, KeptVolume};
use crate::spec::pod::{DeleteCause, RenderedVolume, VolumeContent};
use crate::spec::render::pod::kept_volumes_of;
use crate::spec::render::InstanceId;
use crate::store::{Batch, Table};
use std::path::{Path, PathBuf};

/// What a volume being removed is renamed to first (below `volume_root`, never listed).
const ASIDE: &str = ".removing";

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

/// Every ordinal's directory below `volume_root` (`NS/APP/ORDINAL`; removals aside and named
/// Static volumes, whose names are no ordinal's, left out): three levels of directories read.
fn ordinal_dirs(root: &Path) -> Vec<(InstanceId, PathBuf)> {
    let mut out = Vec::new();
    for (namespace, ns_dir) in subdirs(root).into_iter().filter(|(ns, _)| ns != ASIDE) {
        for (name, app_dir) in subdirs(&ns_dir) {
            for (ordinal, dir) in subdirs(&app_dir) {
                let Ok(index) = ordinal.parse::<u32>() else { continue };
                out.push((InstanceId { namespace: namespace.clone(), name: name.clone(), index }, dir));
            }
        }
    }
    out
}

/// The disk the files below `dir` take, symlinks not followed and mounts not entered (a limited
/// volume's image counts as the blocks it has, not its size).
fn bytes_below(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(dev) = std::fs::symlink_metadata(dir).map(|m| m.dev()) else { return 0 };
    let mut total = 0;
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() && meta.dev() == dev {
                todo.push(entry.path());
            } else if meta.is_file() {
                total += meta.blocks() * 512;
            }
        }
    }
    total
}

impl Supervisor {
    /// Every kept volume below `volume_root` (of `namespace` only, when given), with the
    /// instance using it now. Walks the disk: call it off the runtime's threads.
    pub fn kept_volumes(&self, namespace: Option<&str>) -> Vec<KeptVolume> {
        let mut out = Vec::new();
        for (id, ordinal_dir) in ordinal_dirs(&self.shared.roots.volume_root) {
            if namespace.is_some_and(|n| n != id.namespace) {
                continue;
            }
            let instance = self.instances.lock().expect("instances lock").contains_key(&id).then(|| id.to_string());
            for (volume, path) in subdirs(&ordinal_dir) {
                out.push(KeptVolume {
                    namespace: id.namespace.clone(),
                    name: id.name.clone(),
                    ordinal: id.index,
                    bytes: bytes_below(&path),
                    path: path.display().to_string(),
                    volume,
                    instance: instance.clone(),
                });
            }
        }
        out
    }

    /// The ordinals with at least one kept volume here, as `namespace/name/ordinal`: what a
    /// scheduler pins each to this host by.
    pub fn kept_ordinals(&self) -> Vec<String> {
        self.shared.kept_ordinals.lock().expect("kept ordinals lock").iter().cloned().collect()
    }

    /// The ordinals with a kept volume on disk: at start.
    fn walk_kept_ordinals(root: &Path) -> std::collections::BTreeSet<String> {
        let ordinals = ordinal_dirs(root).into_iter().filter(|(_, dir)| !subdirs(dir).is_empty());
        ordinals.map(|(id, _)| ordinal_key(&id)).collect()
    }

    /// Removes ordinal `id`'s kept volume `volume`, with what it holds, exactly once across a
    /// kill -9: refused while the instance exists here (it mounts the volume), the directory is
    /// moved aside under the instances' lock (an instance applied meanwhile starts on an empty
    /// one), the removal is journaled with a record of what is owed, what it holds is deleted,
    /// and the record goes. A daemon killed on the way is finished by [`Self::settle_kept_removals`].
    pub async fn remove_kept_volume(&self, id: &InstanceId, volume: &str) -> Result<(), SupervisorError> {
        let root = self.shared.roots.volume_root.clone();
        let ordinal_dir = kept_volumes_of(&root, id);
        let path = ordinal_dir.join(volume);
        let removal = Removal::of(id, volume, false);
        let aside = removal.aside(&root);
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
            move_aside(&path, &aside)?;
        }
        forget_ordinal_if_empty(&self.shared, id);
        crate::failpoint::hit("volume-aside");
        let mut batch = Batch::new();
        removal.journal_into(&mut batch);
        self.commit(batch).await?;
        crate::failpoint::hit("volume-journaled");
        finish_removal(&self.shared, removal).await
    }

    /// At start, before any instance: each removal a kill -9 cut short is finished as far as
    /// it got. Journaled (its record stored): what it moved aside is deleted. Not journaled
    /// (moved aside only): the removal did not happen, and the volume goes back where it was;
    /// if a new one was made there meanwhile, the old one's removal is journaled now.
    pub(super) async fn settle_kept_removals(&self, snapshot: &crate::store::Snapshot) -> Result<(), SupervisorError> {
        let root = self.shared.roots.volume_root.clone();
        let owed: Vec<Removal> = snapshot
            .table(Table::Meta)
            .filter(|(key, _)| key.starts_with(REMOVAL_KEY))
            .filter_map(|(key, value)| match serde_json::from_value::<Removal>(value.clone()) {
                Ok(r) => Some(r),
                Err(e) => {
                    tracing::error!("stored kept volume removal {key} is unreadable: {e}");
                    None
                }
            })
            .collect();
        for mut removal in owed {
            if removal.in_place && snapshot.get(Table::Instances, &removal.id().to_string()).is_some() {
                // Its instance is back (applied again before the kill): its data is its own now.
                tracing::warn!("kept volume {} is in use again: its removal is dropped", removal.describe());
                removal.in_place = false;
            }
            tracing::info!("finishing the removal of kept volume {}", removal.describe());
            finish_removal(&self.shared, removal).await?;
        }
        for (file_name, aside) in subdirs(&root.join(ASIDE)) {
            let Some(removal) = Removal::from_aside(&file_name) else {
                tracing::warn!("{} is not a kept volume's; left alone", aside.display());
                continue;
            };
            let place = kept_volumes_of(&root, &removal.id()).join(&removal.volume);
            if std::fs::symlink_metadata(&place).is_err() {
                let parent = place.parent().expect("a volume's ordinal directory");
                crate::safefs::dir_with_mode(parent, 0o755).map_err(|e| SupervisorError::Failed(e.to_string()))?;
                std::fs::rename(&aside, &place).map_err(|e| crate::safefs::at(&aside, e))?;
                tracing::info!(
                    "kept volume {} was not removed (the daemon died first): back in place",
                    removal.describe()
                );
            } else {
                let mut batch = Batch::new();
                removal.journal_into(&mut batch);
                self.commit(batch).await?;
                finish_removal(&self.shared, removal).await?;
            }
        }
        *self.shared.kept_ordinals.lock().expect("kept ordinals lock") = Self::walk_kept_ordinals(&root);
        Ok(())
    }

    /// Notes that ordinal `id` keeps a volume here (made by its start).
    pub(crate) fn note_kept_ordinal(shared: &super::Shared, id: &InstanceId) {
        shared.kept_ordinals.lock().expect("kept ordinals lock").insert(ordinal_key(id));
    }
}

/// The removals of instance `id`'s kept volumes that its policy removes when it is deleted for
/// `cause` (`whenDeleted`, `whenScaled`), each to be journaled with the instance's removal and
/// finished once it is gone.
pub(crate) fn volumes_going(id: &InstanceId, volumes: &[RenderedVolume], cause: DeleteCause) -> Vec<Removal> {
    let going = volumes.iter().filter(|v| match &v.content {
        VolumeContent::Kept { removed_when, .. } => removed_when.contains(&cause),
        _ => false,
    });
    going.map(|v| Removal::of(id, &v.name, true)).collect()
}

/// Finishes a journaled removal: deletes what it moved aside (an in-place one's volume is moved
/// aside first, its image unmounted), then its record.
pub(crate) async fn finish_removal(shared: &Shared, removal: Removal) -> Result<(), SupervisorError> {
    let root = shared.roots.volume_root.clone();
    let aside = removal.aside(&root);
    let place = kept_volumes_of(&root, &removal.id()).join(&removal.volume);
    let in_place = removal.in_place;
    tokio::task::spawn_blocking(move || {
        if in_place && std::fs::symlink_metadata(&place).is_ok() {
            move_aside(&place, &aside)?;
        }
        match std::fs::remove_dir_all(&aside) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(SupervisorError::from(crate::safefs::at(&aside, e)))
            }
            _ => Ok(()),
        }
    })
    .await
    .map_err(|e| SupervisorError::Failed(e.to_string()))??;
    if in_place {
        forget_ordinal_if_empty(shared, &removal.id());
    }
    shared.store.commit(Batch::new().delete(Table::Meta, &removal.key())).await?;
    Ok(())
}

/// Moves the kept volume at `place` to `aside` (where a removal deletes it), a leftover there
/// replaced; a limited volume's image is unmounted first (its instance's delete did, unless cut
/// short).
fn move_aside(place: &Path, aside: &Path) -> Result<(), SupervisorError> {
    crate::runtime::volumes::unmount_image(&place.join(crate::spec::render::pod::KEPT_IMAGE_MOUNT));
    let parent = aside.parent().expect("aside below the root");
    crate::safefs::dir_with_mode(parent, 0o700).map_err(|e| SupervisorError::Failed(e.to_string()))?;
    if aside.exists() {
        std::fs::remove_dir_all(aside).map_err(|e| crate::safefs::at(aside, e))?;
    }
    std::fs::rename(place, aside).map_err(|e| crate::safefs::at(place, e))?;
    Ok(())
}

/// Forgets ordinal `id` as one keeping volumes here once it keeps none; its directory and its
/// app's and namespace's go once empty (a failure leaves them: harmless).
fn forget_ordinal_if_empty(shared: &Shared, id: &InstanceId) {
    let root = &shared.roots.volume_root;
    let ordinal_dir = kept_volumes_of(root, id);
    if !subdirs(&ordinal_dir).is_empty() {
        return;
    }
    shared.kept_ordinals.lock().expect("kept ordinals lock").remove(&ordinal_key(id));
    for dir in [&ordinal_dir, &root.join(&id.namespace).join(&id.name), &root.join(&id.namespace)] {
        let _ = std::fs::remove_dir(dir);
    }
}

/// How an ordinal with a kept volume is named to a scheduler: `namespace/name/ordinal`.
fn ordinal_key(id: &InstanceId) -> String {
    format!("{}/{}/{}", id.namespace, id.name, id.index)
}

/// The store's record of a kept volume's removal journaled and not yet finished (table meta).
const REMOVAL_KEY: &str = "volume-removal/";

/// One kept volume being removed.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct Removal {
    namespace: String,
    name: String,
    ordinal: u32,
    volume: String,
    /// Journaled before its volume was moved aside (by its instance's delete, whose ordinal
    /// nothing else takes meanwhile): finishing it moves the volume aside first. An operator's
    /// (`steward volume rm`) moves it aside first, and an instance applied after that may have
    /// made a new one in its place.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    in_place: bool,
}

impl Removal {
    fn of(id: &InstanceId, volume: &str, in_place: bool) -> Removal {
        Removal {
            namespace: id.namespace.clone(),
            name: id.name.clone(),
            ordinal: id.index,
            volume: volume.into(),
            in_place,
        }
    }

    fn id(&self) -> InstanceId {
        InstanceId { namespace: self.namespace.clone(), name: self.name.clone(), index: self.ordinal }
    }

    fn describe(&self) -> String {
        format!("{:?} of {}", self.volume, self.id())
    }

    fn key(&self) -> String {
        format!("{REMOVAL_KEY}{}/{}/{}/{}", self.namespace, self.name, self.ordinal, self.volume)
    }

    /// Where it waits to be deleted: `<volume_root>/.removing/NS.APP.ORDINAL.VOLUME` (the
    /// names hold no '.', so the file name says whose it is).
    fn aside(&self, root: &Path) -> PathBuf {
        root.join(ASIDE).join(format!("{}.{}.{}.{}", self.namespace, self.name, self.ordinal, self.volume))
    }

    fn from_aside(file_name: &str) -> Option<Removal> {
        let mut parts = file_name.split('.');
        let (namespace, name, ordinal, volume) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() {
            return None;
        }
        Some(Removal {
            namespace: namespace.into(),
            name: name.into(),
            ordinal: ordinal.parse().ok()?,
            volume: volume.into(),
            in_place: false,
        })
    }

    /// Journals it into `batch`: its event and the record of what is owed.
    pub(crate) fn journal_into(&self, batch: &mut Batch) {
        let body = EventBody::Daemon(DaemonEvent::VolumeRemoved {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            ordinal: self.ordinal,
            volume: self.volume.clone(),
        });
        let record = serde_json::to_value(self).expect("a removal serializes");
        batch.push_event(body.to_value());
        batch.push_put(Table::Meta, &self.key(), &record);
    }
}
