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
//! the host's /etc is refused, not bind-mounted. And since a container can still swap it after
//! the check, the engine is never handed the subpath's path: the opened descriptor is
//! bind-mounted on a point in `<run dir>/mounts` (root's, 0700), and that point is what the
//! container's mount names (as kubelet does since CVE-2017-1002101). Host paths are staged
//! the same way: a workload may own a directory on the way to one.

use crate::fetch::sys;
use crate::runtime::reaper::Reaper;
use crate::spec::render::pod::{RenderedPod, RenderedVolume, VolumeContent, KEPT_IMAGE_FILE};
use crate::spec::render::InjectionSource;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
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
/// resized, for Memory), configmap and secret files written, and every staged mount (a
/// volume's subpath, a host path) opened with no symlink on the way and bind-mounted, by its
/// descriptor, on its point in the root-only staging directory, which is what the engine is
/// handed. Errors name the volume and the store.
pub fn prepare(
    pod: &RenderedPod,
    run_dir: &Path,
    namespace: &str,
    lookup: &Lookup<'_>,
    reaper: Option<&Reaper>,
) -> Result<(), String> {
    prepare_volumes(&pod.volumes, run_dir, namespace, lookup, reaper, None)?;
    for c in pod.init_containers.iter().chain(&pod.containers) {
        for m in c.mounts.iter().filter(|m| m.source.is_some()) {
            let (opened, what) = match (&m.volume, &m.source) {
                (Some(name), _) => {
                    let Some(v) = pod.volumes.iter().find(|v| &v.name == name) else { continue };
                    let create = !matches!(v.content, VolumeContent::Files { .. });
                    // A Static volume's path is the host's: walked with no planted symlink followed.
                    let base = match v.content {
                        VolumeContent::Static { .. } => crate::fetch::open_dir_walk(&v.host_path, None),
                        _ => File::open(&v.host_path)
                            .map(OwnedFd::from)
                            .map_err(|e| crate::safefs::at(&v.host_path, e).to_string()),
                    };
                    let opened = base.and_then(|base| subpath(base, &v.host_path, &m.subpath, create));
                    (opened, format!("volume {name:?} subpath {:?}", m.subpath))
                }
                (None, Some(source)) => (host_source(source), format!("host path {}", source.display())),
                (None, None) => continue,
            };
            opened.and_then(|fd| stage(&fd, &m.host_path)).map_err(|e| format!("container {}: {what}: {e}", c.name))?;
        }
    }
    crate::failpoint::pause("subpath-checked");
    Ok(())
}

/// Makes `volumes` ready for a start (see [`prepare`]). With `owner` (a process instance's
/// user: its processes see the host directories themselves, in the host's mount namespace),
/// the volumes directory is 0711 (reached by name, not listed) and each Temp and kept volume's
/// directory is the owner's (a Temp one 0700): made so, and an existing one's top directory
/// set so at every start (what is in it is left as it is).
pub fn prepare_volumes(
    volumes: &[RenderedVolume],
    run_dir: &Path,
    namespace: &str,
    lookup: &Lookup<'_>,
    reaper: Option<&Reaper>,
    owner: Option<(u32, u32)>,
) -> Result<(), String> {
    if volumes.is_empty() {
        return Ok(());
    }
    let base = volumes_dir(run_dir);
    let base_mode = if owner.is_some() { 0o711 } else { 0o700 };
    crate::safefs::dir_with_mode(&base, base_mode).map_err(|e| format!("volumes: {e}"))?;
    for v in volumes {
        let made = match &v.content {
            VolumeContent::Temp { memory, limit_bytes } => temp(v, *memory, *limit_bytes, &base),
            VolumeContent::Files { source, store, items, optional } => {
                files(v, *source, store, items, *optional, namespace, lookup)
            }
            VolumeContent::Kept { limit_bytes: None, .. } => kept(&v.host_path),
            VolumeContent::Kept { limit_bytes: Some(bytes), .. } => kept_image(&v.host_path, *bytes, reaper),
            VolumeContent::Static { owner, mode, .. } => static_dir(&v.host_path, owner, *mode),
        };
        let owned = match (&v.content, owner) {
            (VolumeContent::Temp { .. }, Some(ids)) => own(&v.host_path, ids, Some(0o700)),
            (VolumeContent::Kept { .. }, Some(ids)) => own(&v.host_path, ids, None),
            _ => Ok(()),
        };
        made.and(owned).map_err(|e| format!("volume {:?}: {e}", v.name))?;
    }
    Ok(())
}

/// Gives directory `path` (opened with no symlink followed) to `(uid, gid)`, and `mode` when
/// given; nothing below it is touched (a recursive chown could be led by the workload's links).
fn own(path: &Path, (uid, gid): (u32, u32), mode: Option<u32>) -> Result<(), String> {
    let at = |e| crate::safefs::at(path, e).to_string();
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(format!("{} is not a directory below another", path.display()));
    };
    let parent = File::open(parent).map(OwnedFd::from).map_err(|e| crate::safefs::at(parent, e).to_string())?;
    let name = sys::name(name.as_encoded_bytes()).map_err(|e| e.to_string())?;
    let dir = sys::open_dir(parent.as_fd(), &name).map_err(at)?;
    let st = sys::stat_fd(dir.as_fd()).map_err(at)?;
    if (st.st_uid, st.st_gid) != (uid, gid) {
        sys::chown_fd(dir.as_fd(), uid, gid).map_err(at)?;
        tracing::info!("volume {} given to {uid}:{gid}", path.display());
    }
    match mode {
        Some(mode) if st.st_mode & 0o7777 != mode => sys::chmod_fd(dir.as_fd(), mode).map_err(at),
        _ => Ok(()),
    }
}

/// Unmounts everything mounted below the instance's run dir (its Memory volumes' tmpfs, its
/// staged mounts), deepest first, before the run dir is removed. False when a mount is still
/// there: the run dir must then be left alone, or its removal would reach into what is mounted
/// (a host path, a volume shared with nothing of the instance's).
pub fn release(run_dir: &Path) -> bool {
    let mut mounts = mounts_below(run_dir);
    mounts.sort_by_key(|m| std::cmp::Reverse(m.as_os_str().len()));
    for path in &mounts {
        match nix::mount::umount2(path, nix::mount::MntFlags::MNT_DETACH) {
            Ok(()) => tracing::info!("unmounted {}", path.display()),
            Err(e) => tracing::warn!("cannot unmount {}: {e}", path.display()),
        }
    }
    let left = mounts_below(run_dir);
    for path in &left {
        tracing::error!("{} is still mounted; leaving {} in place", path.display(), run_dir.display());
    }
    left.is_empty()
}

/// Mount points at or below `dir` in the daemon's mount table (the host's).
pub fn mounts_below(dir: &Path) -> Vec<PathBuf> {
    let Ok(table) = std::fs::read_to_string("/proc/self/mountinfo") else { return Vec::new() };
    crate::cgroups::common::parse_mountinfo(&table)
        .into_iter()
        .map(|m| m.mount_point)
        .filter(|m| m.starts_with(dir))
        .collect()
}

/// Bind-mounts what `source` refers to on `point` (made, in root-only directories, as a
/// directory or an empty file to match), after unmounting an earlier start's mount there.
/// The mount goes through the descriptor's /proc link: the kernel mounts the very object that
/// was opened and checked, whatever its path has become since.
fn stage(source: &OwnedFd, point: &Path) -> Result<(), String> {
    use nix::mount::{mount, umount2, MntFlags, MsFlags};
    let st = sys::stat_fd(source.as_fd()).map_err(|e| e.to_string())?;
    let is_dir = st.st_mode & libc::S_IFMT == libc::S_IFDIR;
    let parent = point.parent().ok_or("a staging point without a directory")?;
    if let Some(staging) = parent.parent() {
        crate::safefs::dir_with_mode(staging, 0o700).map_err(|e| e.to_string())?;
    }
    crate::safefs::dir_with_mode(parent, 0o700).map_err(|e| e.to_string())?;
    for _ in 0..16 {
        if !mounts_below(point).iter().any(|m| m == point) {
            break;
        }
        umount2(point, MntFlags::MNT_DETACH).map_err(|e| format!("cannot unmount {}: {e}", point.display()))?;
    }
    match std::fs::symlink_metadata(point) {
        Ok(m) if m.is_dir() => std::fs::remove_dir(point),
        Ok(_) => std::fs::remove_file(point),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
    .map_err(|e| crate::safefs::at(point, e).to_string())?;
    let made = if is_dir {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().mode(0o700).create(point)
    } else {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(point).map(drop)
    };
    made.map_err(|e| crate::safefs::at(point, e).to_string())?;
    let from = PathBuf::from(format!("/proc/self/fd/{}", source.as_raw_fd()));
    mount(Some(&from), point, None::<&str>, MsFlags::MS_BIND | MsFlags::MS_REC, None::<&str>)
        .map_err(|e| format!("cannot bind-mount it on {}: {e}", point.display()))
}

/// Opens a container's host path (seed 001 `volumes[].hostPath`, below the work or run root):
/// its directories walked one at a time, a symlink followed only if root owns it (one a
/// workload planted is refused); missing ones made, root's, as the engine would have made them.
fn host_source(path: &Path) -> Result<OwnedFd, String> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err("is not a path below a directory".into());
    };
    let dir = crate::fetch::open_dir_walk(parent, Some((0, 0)))?;
    let name = sys::name(name.as_encoded_bytes()).map_err(|e| e.to_string())?;
    match sys::open_path(dir.as_fd(), &name) {
        Ok(fd) => {
            let st = sys::stat_fd(fd.as_fd()).map_err(|e| e.to_string())?;
            if st.st_mode & libc::S_IFMT == libc::S_IFLNK {
                // Followed as the walk follows one: only an administrator's (root's).
                return crate::fetch::open_dir_walk(path, None);
            }
            Ok(fd)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            sys::mkdir(dir.as_fd(), &name, 0o755).map_err(|e| e.to_string())?;
            sys::open_dir(dir.as_fd(), &name).map_err(|e| e.to_string())
        }
        Err(e) => Err(e.to_string()),
    }
}

/// A Static volume's host directory (seed 003), made when missing with `owner` (empty: root)
/// and `mode`, the directories above it root's (0755) as an administrator would make them; an
/// existing one is left as it is. The way to it is walked with no planted symlink followed.
fn static_dir(path: &Path, owner: &str, mode: u32) -> Result<(), String> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(format!("{} is not a directory below another", path.display()));
    };
    let (uid, gid) = match owner.is_empty() {
        true => (0, 0),
        false => crate::supervisor::values::resolve_owner(owner).map_err(|e| format!("source.owner: {e}"))?,
    };
    let dir = crate::fetch::open_dir_walk(parent, Some((0, 0)))?;
    let name = sys::name(name.as_encoded_bytes()).map_err(|e| e.to_string())?;
    match sys::mkdir(dir.as_fd(), &name, mode) {
        Ok(()) => {
            let made = sys::open_dir(dir.as_fd(), &name).map_err(|e| crate::safefs::at(path, e).to_string())?;
            // The umask took bits off, and the owner is the spec's.
            sys::chmod_fd(made.as_fd(), mode).map_err(|e| crate::safefs::at(path, e).to_string())?;
            sys::chown_fd(made.as_fd(), uid, gid).map_err(|e| crate::safefs::at(path, e).to_string())?;
            tracing::info!("made Static volume directory {} ({uid}:{gid}, {mode:04o})", path.display());
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(crate::safefs::at(path, e).to_string()),
    }
}

/// Whether `path` is a mount point: its device differs from its parent's.
fn is_mount_point(path: &Path, parent: &Path) -> bool {
    match (std::fs::symlink_metadata(path), std::fs::metadata(parent)) {
        (Ok(m), Ok(p)) => m.is_dir() && m.dev() != p.dev(),
        _ => false,
    }
}

/// A kept volume's directory, made (root's, 0755) at its first start and found again after: the
/// directories above it are the daemon's own, made here with no symlink followed; what is in it
/// is the workload's. One made with a limit (its image in it) is not taken for a plain one.
fn kept(dir: &Path) -> Result<(), String> {
    make_kept_dir(dir)?;
    if dir.join(KEPT_IMAGE_FILE).exists() {
        return Err(format!(
            "{} holds a filesystem image (it was made with a storage limit, class \"image\"): keep the \
             limit, or remove the volume (steward volume rm) to start it anew",
            dir.display()
        ));
    }
    Ok(())
}

fn make_kept_dir(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::DirBuilderExt;
    let parent = dir.parent().ok_or_else(|| format!("{} has no parent", dir.display()))?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(parent)
        .map_err(|e| crate::safefs::at(parent, e).to_string())?;
    match std::fs::DirBuilder::new().mode(0o755).create(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => match std::fs::symlink_metadata(dir) {
            Ok(m) if m.is_dir() => Ok(()),
            Ok(_) => Err(format!("{} is not a directory", dir.display())),
            Err(e) => Err(crate::safefs::at(dir, e).to_string()),
        },
        Err(e) => Err(crate::safefs::at(dir, e).to_string()),
    }
}

/// A kept volume with a size limit (class `image`): its directory holds an ext4 image of
/// `bytes` (sparse: disk is used as it is filled) loop-mounted (nosuid, nodev) on `mount`,
/// which the containers see; the kernel refuses writes past it (`No space left on device`).
/// Made at the first start; mounted again when it is not (after a reboot, or its instance's
/// delete); grown when the limit grows, at a start (unmounted, checked and resized offline:
/// online growth needs CAP_SYS_RESOURCE, which a daemon in a container may lack). A smaller
/// limit is refused: an ext4 is not shrunk in place.
fn kept_image(mount: &Path, bytes: u64, reaper: Option<&Reaper>) -> Result<(), String> {
    let dir = mount.parent().ok_or_else(|| format!("{} has no parent", mount.display()))?;
    make_kept_dir(dir)?;
    let image = dir.join(KEPT_IMAGE_FILE);
    match std::fs::symlink_metadata(&image) {
        Ok(m) if m.is_file() && m.len() > bytes => {
            return Err(format!(
                "storage.limit {} is below its filesystem image's {} ({}): an image is grown, never shrunk",
                human_bytes(bytes),
                human_bytes(m.len()),
                image.display()
            ));
        }
        Ok(m) if m.is_file() && m.len() < bytes => grow_image(&image, mount, bytes, reaper)?,
        Ok(m) if m.is_file() => {}
        Ok(_) => return Err(format!("{} is not a file", image.display())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            // A plain volume's data, not a start cut short before its image was whole.
            let entries = std::fs::read_dir(dir).map_err(|e| crate::safefs::at(dir, e).to_string())?;
            let part = image.with_extension("img.part");
            let mount_point = |p: &Path| p == mount && std::fs::read_dir(p).is_ok_and(|mut d| d.next().is_none());
            let held = entries.flatten().map(|e| e.path()).any(|p| p != part && !mount_point(&p));
            if held {
                return Err(format!(
                    "{} was made without a storage limit (a plain directory with data): drop the limit, or \
                     remove the volume (steward volume rm) to start it anew in an image",
                    dir.display()
                ));
            }
            make_image(&image, bytes, reaper)?;
        }
        Err(e) => return Err(crate::safefs::at(&image, e).to_string()),
    }
    if !is_mount_point(mount, dir) {
        crate::safefs::dir_with_mode(mount, 0o755).map_err(|e| e.to_string())?;
        let args = ["-t", "ext4", "-o", "loop,nosuid,nodev"].map(OsStr::new);
        tool(reaper, "mount", &[&args[..], &[image.as_os_str(), mount.as_os_str()]].concat(), &[])?;
        tracing::info!("mounted the filesystem image {} on {}", image.display(), mount.display());
    }
    Ok(())
}

/// How long a host tool an image takes (util-linux's, e2fsprogs') may run.
const IMAGE_TOOL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(300);

fn tool(reaper: Option<&Reaper>, program: &str, args: &[&OsStr], ok: &[i32]) -> Result<String, String> {
    crate::runtime::program::tool_blocking(reaper, program, args, ok, IMAGE_TOOL_TIMEOUT)
}

/// A new sparse file of `bytes` with an ext4 on it (no reserved blocks: the volume's all
/// its user's), written to a temporary name first so a crash never leaves half an image.
fn make_image(image: &Path, bytes: u64, reaper: Option<&Reaper>) -> Result<(), String> {
    let part = image.with_extension("img.part");
    let _ = std::fs::remove_file(&part);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&part)
        .map_err(|e| crate::safefs::at(&part, e).to_string())?;
    file.set_len(bytes).map_err(|e| crate::safefs::at(&part, e).to_string())?;
    drop(file);
    let args = ["-q", "-F", "-m", "0", "-L", "steward"].map(OsStr::new);
    tool(reaper, "mkfs.ext4", &[&args[..], &[part.as_os_str()]].concat(), &[])?;
    std::fs::rename(&part, image).map_err(|e| crate::safefs::at(image, e).to_string())?;
    tracing::info!("made a filesystem image of {} at {}", human_bytes(bytes), image.display());
    Ok(())
}

/// Grows an image to `bytes` offline: unmounted (refused while anything holds it: resizing a
/// mounted filesystem from outside would corrupt it), checked, the file and then its ext4
/// grown. Mounted again by the caller.
fn grow_image(image: &Path, mount: &Path, bytes: u64, reaper: Option<&Reaper>) -> Result<(), String> {
    if let Some(dir) = mount.parent().filter(|dir| is_mount_point(mount, dir)) {
        nix::mount::umount(mount).map_err(|e| format!("cannot unmount {} to grow it: {e}", mount.display()))?;
        // `mount -o loop` frees its loop device at the unmount; wait for it.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !loop_devices(image).is_empty() {
            if std::time::Instant::now() > deadline || is_mount_point(mount, dir) {
                return Err(format!("{} is still held by a loop device: not grown", image.display()));
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
    // Exit 1: errors found and corrected (an image whose daemon or host died while it was mounted).
    tool(reaper, "e2fsck", &[OsStr::new("-f"), OsStr::new("-p"), image.as_os_str()], &[1])?;
    let file =
        std::fs::OpenOptions::new().write(true).open(image).map_err(|e| crate::safefs::at(image, e).to_string())?;
    file.set_len(bytes).map_err(|e| crate::safefs::at(image, e).to_string())?;
    drop(file);
    tool(reaper, "resize2fs", &[image.as_os_str()], &[])?;
    tracing::info!("grew the filesystem image {} to {}", image.display(), human_bytes(bytes));
    Ok(())
}

/// The loop devices attached to `image`, read from sysfs (a bound device has a `loop`
/// directory naming its backing file, as `losetup -j` reads it, with no tool to run).
fn loop_devices(image: &Path) -> Vec<String> {
    let image = std::fs::canonicalize(image).unwrap_or_else(|_| image.to_path_buf());
    let Ok(devices) = std::fs::read_dir("/sys/block") else { return Vec::new() };
    devices
        .flatten()
        .filter(|d| d.file_name().to_string_lossy().starts_with("loop"))
        .filter(|d| {
            std::fs::read_to_string(d.path().join("loop/backing_file"))
                .is_ok_and(|backing| Path::new(backing.trim_end_matches('\n')) == image)
        })
        .map(|d| d.file_name().to_string_lossy().into_owned())
        .collect()
}

/// Waits till no loop device holds `image`: the kernel clears an auto-clearing device after
/// the last reference to its filesystem goes, which a lazy unmount and a container's dying
/// mount namespace leave to later. Bounded: a device still held is said, not waited on forever.
async fn loop_devices_freed(image: &Path) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let held = loop_devices(image);
        if held.is_empty() {
            return;
        }
        if tokio::time::Instant::now() > deadline {
            tracing::warn!("{} is still held by {}", image.display(), held.join(", "));
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

fn human_bytes(bytes: u64) -> String {
    match bytes {
        b if b % (1 << 30) == 0 => format!("{}Gi", b >> 30),
        b if b % (1 << 20) == 0 => format!("{}Mi", b >> 20),
        b => format!("{b} bytes"),
    }
}

/// Unmounts the filesystem images of an instance's limited kept volumes (it is gone: the
/// image and its data stay, mounted again by the ordinal's next start) and waits for their
/// loop devices to be freed, so an instance gone leaves its image free.
pub async fn release_kept(volumes: &[RenderedVolume]) {
    for v in volumes {
        if let VolumeContent::Kept { limit_bytes: Some(_), .. } = v.content {
            unmount_image(&v.host_path);
            if let Some(dir) = v.host_path.parent() {
                loop_devices_freed(&dir.join(KEPT_IMAGE_FILE)).await;
            }
        }
    }
}

/// Unmounts what is mounted on a kept volume's image mount point, if anything (the loop device
/// goes with it: `mount -o loop` sets it to clear itself).
pub fn unmount_image(mount: &Path) {
    let Some(dir) = mount.parent() else { return };
    for _ in 0..4 {
        if !is_mount_point(mount, dir) {
            return;
        }
        match nix::mount::umount2(mount, nix::mount::MntFlags::MNT_DETACH) {
            Ok(()) => tracing::info!("unmounted {}", mount.display()),
            Err(e) => tracing::warn!("cannot unmount {}: {e}", mount.display()),
        }
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

/// Walks `subpath` below the volume's directory by descriptor, never through a symlink, and
/// returns what it names, opened: missing directories are made (0777, in a Temp volume) when
/// `create`, else it must exist (a file or directory the volume's files hold).
fn subpath(base: OwnedFd, volume: &Path, subpath: &str, create: bool) -> Result<OwnedFd, String> {
    let mut cur = base;
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
            Some(_) if last && !create => {
                let file = sys::open_path(cur.as_fd(), &name).map_err(|e| crate::safefs::at(&shown, e).to_string())?;
                // Swapped since the stat: what was opened is what is checked.
                let st = sys::stat_fd(file.as_fd()).map_err(|e| crate::safefs::at(&shown, e).to_string())?;
                if matches!(st.st_mode & libc::S_IFMT, libc::S_IFLNK | libc::S_IFDIR) {
                    return Err(format!("{} changed while it was checked; refusing to mount it", shown.display()));
                }
                return Ok(file);
            }
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
    Ok(cur)
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
        let base = || OwnedFd::from(File::open(&volume).unwrap());
        let err = subpath(base(), &volume, "evil", true).unwrap_err();
        assert!(err.contains("is a symlink"), "{err}");
        let err = subpath(base(), &volume, "evil/x", true).unwrap_err();
        assert!(err.contains("is a symlink"), "{err}");
        subpath(base(), &volume, "a/b/c", true).unwrap();
        let mode = std::fs::metadata(volume.join("a/b/c")).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o777);
        let err = subpath(base(), &volume, "nope", false).unwrap_err();
        assert!(err.contains("does not exist"), "{err}");
        std::fs::write(volume.join("file"), "x").unwrap();
        subpath(base(), &volume, "file", false).unwrap();
        assert!(subpath(base(), &volume, "file", true).unwrap_err().contains("not a directory"));
    }
}
