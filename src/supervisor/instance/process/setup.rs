//! Staging a process instance: its users, its directories as they must be owned, its secrets
//! and configmaps, its cgroup and limits.

use super::Processes;
use crate::runtime::process::ResolvedUser;
use crate::spec::RenderedInstance;
use crate::supervisor::instance::workload::Cx;
use crate::supervisor::values;
use std::sync::atomic::Ordering;

impl Processes {
    pub(super) fn set_up(
        &mut self,
        cx: &mut Cx<'_>,
        rendered: &RenderedInstance,
        run_dir: &std::os::fd::OwnedFd,
    ) -> Result<(), String> {
        // Each process's user, looked up once per start (passwd and group files are read).
        self.users = rendered.processes.iter().map(|p| ResolvedUser::lookup(&p.user)).collect::<Result<_, _>>()?;
        run_dir_access(run_dir, rendered, &self.users).map_err(|e| format!("run directory {e}"))?;
        let mut made = std::mem::take(&mut self.made_dirs);
        made.retain(|d| d.is_still_there());
        for (p, owner) in rendered.processes.iter().zip(&self.users) {
            let pid_dir = p.pid_file.as_ref().and_then(|f| f.parent());
            for (dir, what) in [(Some(p.work_path.as_path()), "workPath"), (pid_dir, "pidfile directory")] {
                let Some(dir) = dir.filter(|d| !made.iter().any(|m| m.path == *d)) else { continue };
                crate::safefs::create_dirs_under(cx.shared.root_dirs.of_dir(dir), dir, owner.uid, owner.gid)
                    .map_err(|e| format!("cannot create {what} {}: {e}", dir.display()))?;
                made.extend(MadeDir::of(dir));
            }
        }
        self.made_dirs = made;
        // Its volumes, the first process's user's (a process is not root, and sees them as they are).
        if !rendered.volumes.is_empty() {
            let owner = self.users.first().map(|u| (u.uid, u.gid)).unwrap_or((0, 0));
            let (run_dir, namespace) = (&rendered.run_dir, &cx.rec.id.namespace);
            let reaper = Some(&cx.shared.reaper);
            crate::runtime::volumes::prepare_volumes(
                &rendered.volumes,
                run_dir,
                namespace,
                &|_, _| None,
                reaper,
                Some(owner),
            )?;
            if rendered.volumes.iter().any(|v| matches!(v.content, crate::spec::pod::VolumeContent::Kept { .. })) {
                crate::supervisor::Supervisor::note_kept_ordinal(cx.shared, &cx.rec.id);
            }
        }
        // Secrets and configmaps as they are now: a change applies at the next (re)start.
        self.injected_env.clear();
        for (p, user) in rendered.processes.iter().zip(&self.users) {
            let lookup =
                |kind, key: &str| cx.shared.values.lock().expect("values lock").get(&(kind, key.to_string())).cloned();
            let env = values::inject(&p.injections, &cx.rec.id.namespace, lookup, &p.work_path, user)?;
            self.injected_env.push(env);
        }
        // The cgroup is made and limited once; again only when the limits change.
        let limits = instance_limits(rendered, cx.shared.default_tasks_max);
        if self.cgroup_limits.as_ref() != Some(&limits) {
            let fresh = self.cgroup.create().map_err(|e| format!("cannot create cgroup: {e}"))?;
            if fresh {
                // Nothing can be in a cgroup made just now.
                self.cgroup_clear.store(true, Ordering::Relaxed);
            }
            // A cgroup made just now has the kernel's defaults: unlimited, no OOM kill yet.
            self.cgroup.set_limits(&limits, fresh).map_err(|e| format!("cannot set resource limits: {e}"))?;
            self.cgroup_limits = Some(limits);
            self.oom_kills_at_start = fresh.then_some(0);
        }
        // Known already when the last run's end was just examined (`oom_killed`).
        if self.oom_kills_at_start.is_none() {
            self.oom_kills_at_start = Some(self.cgroup.oom_kills().unwrap_or(0));
        }
        Ok(())
    }
}

/// A directory a start made (or found) for a process, as it was then: the next start of the
/// same instance checks it by one stat, not a walk from the root, and walks again only when
/// it was removed or replaced (another inode at the path).
#[derive(Debug)]
pub(super) struct MadeDir {
    path: std::path::PathBuf,
    dev: u64,
    ino: u64,
}

impl MadeDir {
    fn of(path: &std::path::Path) -> Option<MadeDir> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::symlink_metadata(path).ok().filter(|m| m.is_dir())?;
        Some(MadeDir { path: path.to_path_buf(), dev: m.dev(), ino: m.ino() })
    }

    fn is_still_there(&self) -> bool {
        MadeDir::of(&self.path).is_some_and(|now| (now.dev, now.ino) == (self.dev, self.ino))
    }
}

/// Who may write the run directory. It stays root's (the daemon's logs are there), but a
/// process whose pidfile lies directly in it (a forking daemon that drops to its own user
/// writes its pidfile itself) must be able to create that file: the directory then gets that
/// user's group and mode 1770, the sticky bit keeping the daemon's files from being removed or
/// renamed by it, and nobody else gets in. Otherwise it is root's own, 0755. A pidfile in a
/// subdirectory (the seed's `.../pid/app.pid`) needs none of this: the subdirectory is made the
/// user's.
pub(in crate::supervisor::instance) fn run_dir_access(
    dir: &std::os::fd::OwnedFd,
    rendered: &RenderedInstance,
    users: &[ResolvedUser],
) -> Result<(), String> {
    use std::os::fd::{AsFd, AsRawFd};
    let shown = rendered.run_dir.display();
    let mut groups = std::collections::BTreeSet::new();
    for (p, user) in rendered.processes.iter().zip(users) {
        if user.uid != 0 && p.pid_file.as_ref().and_then(|f| f.parent()) == Some(rendered.run_dir.as_path()) {
            groups.insert(user.gid);
        }
    }
    let (gid, mode) = match groups.len() {
        0 => (0, 0o755),
        1 => (*groups.first().expect("one group"), 0o1770),
        _ => {
            return Err(format!(
                "{shown}: processes of users of different groups keep their pidfiles directly in it; \
                 give each its own subdirectory (…/pid/NAME.pid)"
            ))
        }
    };
    // Every start passes here (a respawn too): change nothing that is already so.
    let st = crate::fetch::sys::stat_fd(dir.as_fd()).map_err(|e| format!("{shown}: {e}"))?;
    if (st.st_uid, st.st_gid) != (0, gid) {
        nix::unistd::fchown(dir.as_fd().as_raw_fd(), Some(0.into()), Some(gid.into()))
            .map_err(|e| format!("{shown}: {e}"))?;
    }
    if st.st_mode & 0o7777 != mode {
        crate::fetch::sys::chmod_fd(dir.as_fd(), mode).map_err(|e| format!("{shown}: {e}"))?;
    }
    Ok(())
}

/// The instance's cgroup limits: the sum over its processes, unlimited if any is unlimited; a
/// process that sets no tasks limit counts as the daemon's `default_tasks` (None: unlimited).
pub(super) fn instance_limits(r: &RenderedInstance, default_tasks: Option<u64>) -> crate::cgroups::Limits {
    let sum = |f: fn(&crate::spec::render::RenderedLimits) -> Option<f64>| {
        r.processes.iter().map(|p| f(&p.limits)).try_fold(0.0, |acc, v| v.map(|v| acc + v))
    };
    let pids_max =
        r.processes.iter().map(|p| p.limits.tasks.unwrap_or(default_tasks)).try_fold(0u64, |acc, v| v.map(|v| acc + v));
    crate::cgroups::Limits { cpu_cores: sum(|l| l.cpu_cores), memory_mb: sum(|l| l.memory_mb), pids_max }
}
