//! A pod's volumes on the host (seed 003 `volumes`): each a directory below
//! `<run dir>/volumes` (root's, 0700), bind-mounted into the containers that name it.
//!
//! - `Temp`: an empty directory (0777, as Kubernetes' emptyDir), kept across the pod's restarts
//!   and removed with the instance; `medium: Memory` puts a tmpfs of the volume's
//!   `storage.limit` on it (the kernel enforces the size), unmounted when the instance goes.
//! - `Config` / `Secret`: the store's keys as files with their modes, written afresh before
//!   every start (mounted read-only).
//!
//! Containers can write into a Temp volume, so everything below a volume's directory is walked
//! by descriptor without following a symlink: a `subpath` a container turned into a symlink to
//! the host's /etc is refused, not bind-mounted.

use crate::fetch::sys;
use crate::spec::render::pod::{RenderedPod, RenderedVolume, VolumeContent};
use crate::spec::render::InjectionSource;
use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A Memory volume's tmpfs size when its `storage.limit` is not written: seed 003's default
/// limit (10Gi). tmpfs takes memory only as it is filled.
pub const DEFAULT_MEMORY_LIMIT_BYTES: u64 = 10 << 30;

/// A configmap's or secret's data by its kind and name, None when it does not exist.
pub type Lookup<'a> = dyn Fn(InjectionSource, &str) -> Option<BTreeMap<String, String>> + 'a;

/// The directory below the run dir that holds an instance's volumes.
pub fn volumes_dir(run_dir: &Path) -> PathBuf {
    run_dir.join("volumes")
}

/// Makes every volume of `pod` ready for a start: Temp directories (a tmpfs mounted, or
/// resized, for Memory), configmap and secret files written, and every mount's subpath made
/// (Temp) or found (files), with no symlink on the way. Errors name the volume and the store.
pub fn prepare(pod: &RenderedPod, run_dir: &Path, namespace: &str, lookup: &Lookup<'_>) -> Result<(), String> {
    if pod.volumes.is_empty() {
        return Ok(());
    }
    let base = volumes_dir(run_dir);
    crate::safefs::dir_with_mode(&base, 0o700).map_err(|e| format!("volumes: {e}"))?;
    for v in &pod.volumes {
        let made = match &v.content {
            VolumeContent::Temp { memory, limit_bytes } => temp(v, *memory, *limit_bytes, &base),
            VolumeContent::Files { source, store, items, optional } => {
                files(v, *source, store, items, *optional, namespace, lookup)
            }
        };
        made.map_err(|e| format!("volume {:?}: {e}", v.name))?;
    }
    for c in pod.init_containers.iter().chain(&pod.containers) {
        for m in &c.mounts {
            let Some(name) = &m.volume else { continue };
            let Some(v) = pod.volumes.iter().find(|v| &v.name == name) else { continue };
            if m.subpath.is_empty() {
                continue;
            }
            let create = matches!(v.content, VolumeContent::Temp { .. });
            subpath(&v.host_path, &m.subpath, create)
                .map_err(|e| format!("container {}: volume {name:?} subpath {:?}: {e}", c.name, m.subpath))?;
        }
    }
    Ok(())
}

/// Unmounts the instance's Memory volumes (before its run dir is removed): every mount point
/// directly below its volumes directory.
pub fn release(run_dir: &Path) {
    let base = volumes_dir(run_dir);
    let Ok(entries) = std::fs::read_dir(&base) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if is_mount_point(&path, &base) {
            match nix::mount::umount2(&path, nix::mount::MntFlags::MNT_DETACH) {
                Ok(()) => tracing::info!("unmounted the tmpfs volume at {}", path.display()),
                Err(e) => tracing::warn!("cannot unmount the volume at {}: {e}", path.display()),
            }
        }
    }
}

/// Whether `path` is a mount point: its device differs from its parent's.
fn is_mount_point(path: &Path, parent: &Path) -> bool {
    match (std::fs::symlink_metadata(path), std::fs::metadata(parent)) {
        (Ok(m), Ok(p)) => m.is_dir() && m.dev() != p.dev(),
        _ => false,
    }
}

/// A Temp volume: its directory, kept as it is; on Memory, a tmpfs of the limit on it.
fn temp(v: &RenderedVolume, memory: bool, limit: Option<u64>, base: &Path) -> Result<(), String> {
    use nix::mount::{mount, MsFlags};
    let dir = &v.host_path;
    if !memory {
        return crate::safefs::dir_with_mode(dir, 0o777).map_err(|e| e.to_string());
    }
    let size = limit.unwrap_or(DEFAULT_MEMORY_LIMIT_BYTES);
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    let (flags, options) = if is_mount_point(dir, base) {
        // Already there (an earlier run): its contents stay, its size follows the spec.
        (flags | MsFlags::MS_REMOUNT, format!("size={size}"))
    } else {
        crate::safefs::dir_with_mode(dir, 0o755).map_err(|e| e.to_string())?;
        (flags, format!("size={size},mode=0777"))
    };
    mount(Some("tmpfs"), dir, Some("tmpfs"), flags, Some(options.as_str()))
        .map_err(|e| format!("cannot mount a tmpfs of {size} bytes on {}: {e}", dir.display()))
}

/// A Config or Secret volume: the directory emptied and the keys written (every key at its
/// own name when the items are one with no key), missing optional keys and stores left out.
#[allow(clippy::too_many_arguments)]
fn files(
    v: &RenderedVolume,
    source: InjectionSource,
    store: &str,
    items: &[crate::spec::render::pod::RenderedVolumeItem],
    optional: bool,
    namespace: &str,
    lookup: &Lookup<'_>,
) -> Result<(), String> {
    let dir = &v.host_path;
    let word = match source {
        InjectionSource::Secret => "secret",
        InjectionSource::ConfigMap => "configmap",
    };
    if dir.parent().is_some_and(|base| is_mount_point(dir, base)) {
        // A Memory volume of an earlier spec by the same name.
        let _ = nix::mount::umount2(dir.as_path(), nix::mount::MntFlags::MNT_DETACH);
    }
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(dir),
        Ok(_) => std::fs::remove_file(dir),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
    .map_err(|e| format!("cannot empty {}: {e}", dir.display()))?;
    crate::safefs::dir_with_mode(dir, 0o755).map_err(|e| e.to_string())?;
    let data = match lookup(source, store) {
        Some(data) => data,
        None if optional => return Ok(()),
        None => return Err(format!("{word} {namespace}/{store} does not exist")),
    };
    let mut wanted: Vec<(&str, &str, u32)> = Vec::new();
    for item in items {
        if item.key.is_empty() {
            // Every key; one that is no plain file name is left out (as Kubernetes does).
            wanted.extend(
                data.keys()
                    .filter(|k| !k.contains('/') && *k != "." && *k != "..")
                    .map(|k| (k.as_str(), k.as_str(), item.mode)),
            );
        } else if data.contains_key(&item.key) {
            wanted.push((item.key.as_str(), item.path.as_str(), item.mode));
        } else if !optional {
            return Err(format!("{word} {namespace}/{store} has no key {:?}", item.key));
        }
    }
    for (key, path, mode) in wanted {
        let file = dir.join(path.trim_matches('/'));
        if let Some(parent) = file.parent().filter(|p| *p != dir.as_path()) {
            crate::safefs::create_dirs(dir, parent, 0, 0).map_err(|e| e.to_string())?;
        }
        let value = data.get(key).map(String::as_bytes).unwrap_or_default();
        crate::safefs::replace_file(&file, value, mode, 0, 0)
            .map_err(|e| format!("cannot write {word} {namespace}/{store} key {key:?}: {e}"))?;
    }
    Ok(())
}

/// Walks `subpath` below the volume's directory by descriptor, never through a symlink:
/// missing directories are made (0777, in a Temp volume) when `create`, else it must exist (a
/// file or directory the volume's files hold).
fn subpath(volume: &Path, subpath: &str, create: bool) -> Result<(), String> {
    let mut cur: OwnedFd = File::open(volume).map_err(|e| crate::safefs::at(volume, e).to_string())?.into();
    let mut shown = volume.to_path_buf();
    let parts: Vec<&str> = subpath.split('/').filter(|p| !p.is_empty() && *p != ".").collect();
    for (i, part) in parts.iter().enumerate() {
        shown.push(part);
        let name = sys::name(part.as_bytes()).map_err(|e| e.to_string())?;
        let last = i + 1 == parts.len();
        let st = match sys::stat_at(cur.as_fd(), &name) {
            Ok(st) => Some(st),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(crate::safefs::at(&shown, e).to_string()),
        };
        let kind = st.map(|s| s.st_mode & libc::S_IFMT);
        match kind {
            Some(libc::S_IFLNK) => return Err(format!("{} is a symlink; refusing to mount it", shown.display())),
            Some(libc::S_IFDIR) => {}
            Some(_) if last && !create => return Ok(()),
            Some(_) => return Err(format!("{} is not a directory", shown.display())),
            None if !create => return Err(format!("{} does not exist in the volume", shown.display())),
            None => {
                sys::mkdir(cur.as_fd(), &name, 0o777).map_err(|e| crate::safefs::at(&shown, e).to_string())?;
            }
        }
        let next = sys::open_dir(cur.as_fd(), &name).map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) | Some(libc::ENOTDIR) => {
                format!("{} is a symlink; refusing to mount it", shown.display())
            }
            _ => crate::safefs::at(&shown, e).to_string(),
        })?;
        if kind.is_none() {
            // The umask took bits off: a Temp volume's directories are everyone's, as the volume.
            sys::chmod_fd(next.as_fd(), 0o777).map_err(|e| crate::safefs::at(&shown, e).to_string())?;
        }
        cur = next;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_subpath_through_a_symlink_is_refused_and_missing_ones_made() {
        let dir = tempfile::tempdir().unwrap();
        let volume = dir.path().join("v");
        std::fs::create_dir(&volume).unwrap();
        std::os::unix::fs::symlink("/etc", volume.join("evil")).unwrap();
        let err = subpath(&volume, "evil", true).unwrap_err();
        assert!(err.contains("is a symlink"), "{err}");
        let err = subpath(&volume, "evil/x", true).unwrap_err();
        assert!(err.contains("is a symlink"), "{err}");
        subpath(&volume, "a/b/c", true).unwrap();
        let mode = std::fs::metadata(volume.join("a/b/c")).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o777);
        let err = subpath(&volume, "nope", false).unwrap_err();
        assert!(err.contains("does not exist"), "{err}");
        std::fs::write(volume.join("file"), "x").unwrap();
        subpath(&volume, "file", false).unwrap();
        assert!(subpath(&volume, "file", true).unwrap_err().contains("not a directory"));
    }
}
