//! Starting a program the way `posix_spawn` does: `clone(CLONE_VM | CLONE_VFORK)`, so the child
//! borrows the daemon's memory until it execs instead of copying it.
//!
//! `fork()` of a daemon that supervises thousands of instances copies tens of MiB of page
//! tables, then makes every page copy-on-write for both sides until the child execs; on this
//! daemon that was most of the cost of a start or a respawn (perf: `copy_page_range`,
//! `do_wp_page`, `exit_mmap`). A vfork child costs the same whatever the daemon's size.
//!
//! The child shares the daemon's memory and runs on its own small stack while the calling
//! thread waits. It therefore only makes system calls on data prepared before the clone: no
//! allocation, no locks, and no glibc wrapper that talks to the parent's threads (glibc's
//! `setuid` family signals every thread of the process: the raw system calls change only the
//! child). Every signal is blocked around the clone, so no handler of the daemon runs in the
//! child; the child resets every handler to the default and unblocks all signals before exec,
//! as systemd does for its services.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};

/// The user switch of the child: supplementary groups, gid, uid, then no capability.
#[derive(Debug, Clone)]
pub struct Credentials {
    pub uid: libc::uid_t,
    pub gid: libc::gid_t,
    pub groups: Vec<libc::gid_t>,
}

/// Everything the child needs, built (and allocated) before the clone.
pub struct Prepared {
    program: CString,
    _argv: Vec<CString>,
    argv_ptrs: Vec<*const libc::c_char>,
    _envp: Vec<CString>,
    envp_ptrs: Vec<*const libc::c_char>,
    cwd: CString,
    stdin: OwnedFd,
    stdout: OwnedFd,
    stderr: OwnedFd,
    cgroup_join: Vec<OwnedFd>,
    /// The descriptors the child keeps (its standard ones to be and its cgroup joins), ascending.
    keep_fds: Vec<libc::c_int>,
    /// Highest descriptor to close one by one where the kernel has no close_range (< 5.9).
    fd_limit: libc::c_int,
    credentials: Option<Credentials>,
}

/// The steps of the child, for the error message when one fails.
const STEPS: [&str; 10] = [
    "",
    "cannot start a new session",
    "cannot join the instance's cgroup",
    "cannot redirect standard input and output",
    "cannot enter the work directory",
    "cannot set the supplementary groups",
    "cannot switch group",
    "cannot switch user",
    "cannot execute",
    "cannot take its own descriptor table",
];
const STEP_SETSID: i32 = 1;
const STEP_CGROUP: i32 = 2;
const STEP_STDIO: i32 = 3;
const STEP_CHDIR: i32 = 4;
const STEP_SETGROUPS: i32 = 5;
const STEP_SETGID: i32 = 6;
const STEP_SETUID: i32 = 7;
const STEP_EXEC: i32 = 8;
const STEP_UNSHARE: i32 = 9;

/// Child stack: the child calls a handful of system calls from one small frame.
const CHILD_STACK: usize = 64 * 1024;

impl Prepared {
    /// `program` is executed as is (an absolute path, or relative to `cwd`): no PATH search.
    /// `env` is the whole environment; a later entry replaces an earlier one of the same name.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        program: &str,
        argv: &[String],
        env: &[(String, String)],
        cwd: &Path,
        stdout: File,
        stderr: File,
        cgroup_join: Vec<OwnedFd>,
        credentials: Option<Credentials>,
    ) -> io::Result<Prepared> {
        let cstr = |s: &[u8], what: &str| {
            CString::new(s).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, format!("{what} has a NUL byte")))
        };
        let program = cstr(program.as_bytes(), "the program")?;
        let argv = argv.iter().map(|a| cstr(a.as_bytes(), "an argument")).collect::<io::Result<Vec<_>>>()?;
        let mut merged: Vec<(&str, &str)> = Vec::with_capacity(env.len());
        for (k, v) in env {
            match merged.iter_mut().find(|(name, _)| name == k) {
                Some(slot) => slot.1 = v,
                None => merged.push((k, v)),
            }
        }
        let envp = merged
            .iter()
            .map(|(k, v)| cstr(format!("{k}={v}").as_bytes(), "an environment variable"))
            .collect::<io::Result<Vec<_>>>()?;
        let cwd = cstr(cwd.as_os_str().as_bytes(), "the work directory")?;
        let null = File::open("/dev/null")?;
        let pointers = |v: &[CString]| v.iter().map(|s| s.as_ptr()).chain([std::ptr::null()]).collect();
        let (stdin, stdout, stderr) =
            (above_stdio(null.into())?, above_stdio(stdout.into())?, above_stdio(stderr.into())?);
        let mut keep_fds: Vec<libc::c_int> =
            cgroup_join.iter().chain([&stdin, &stdout, &stderr]).map(|fd| fd.as_raw_fd()).collect();
        keep_fds.sort_unstable();
        Ok(Prepared {
            keep_fds,
            fd_limit: open_files_limit(),
            argv_ptrs: pointers(&argv),
            envp_ptrs: pointers(&envp),
            program,
            _argv: argv,
            _envp: envp,
            cwd,
            stdin,
            stdout,
            stderr,
            cgroup_join,
            credentials,
        })
    }

    /// Starts the program; returns its pid once it has exec'd (the calling thread waits for
    /// that, as with vfork), and a pidfd of it where the kernel gives one at the clone (its
    /// exit is seen by it, see the reaper). A failure before exec comes back as an error naming
    /// the step; the failed child exits 127 and is reaped like any other.
    pub fn spawn(&self) -> io::Result<(i32, Option<OwnedFd>)> {
        let mut stack = vec![0u8; CHILD_STACK];
        let modern = modern_clone();
        let shared = ChildArgs { prepared: self, shares: modern, errno: AtomicI32::new(0), step: AtomicI32::new(0) };
        let mut pidfd: libc::c_int = -1;
        // SAFETY: the child runs `child_main` on `stack` with `shared`, both alive until clone
        // returns (CLONE_VFORK: after the child's exec or exit). Signals are blocked meanwhile
        // so that none of the daemon's handlers runs on the child's stack. With CLONE_PIDFD the
        // kernel writes the new pidfd into `pidfd` (the parent-tid argument).
        let pid = unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
            let top = stack.as_mut_ptr().add(stack.len());
            let top = top.sub(top as usize % 16);
            let extra = if modern { libc::CLONE_FILES | libc::CLONE_PIDFD } else { 0 };
            let pid = libc::clone(
                child_main,
                top.cast(),
                libc::CLONE_VM | libc::CLONE_VFORK | extra | libc::SIGCHLD,
                (&shared as *const ChildArgs).cast_mut().cast(),
                &mut pidfd as *mut libc::c_int,
            );
            let clone_error = io::Error::last_os_error();
            libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
            if pid < 0 {
                return Err(clone_error);
            }
            pid
        };
        // SAFETY: a pidfd the kernel installed for this clone, owned by nobody else.
        let pidfd = (modern && pidfd >= 0).then(|| unsafe { std::os::fd::FromRawFd::from_raw_fd(pidfd) });
        let errno = shared.errno.load(Ordering::Acquire);
        if errno != 0 {
            let step = STEPS.get(shared.step.load(Ordering::Acquire) as usize).copied().unwrap_or("cannot start");
            let os = io::Error::from_raw_os_error(errno);
            return Err(io::Error::new(os.kind(), format!("{step}: {os}")));
        }
        Ok((pid, pidfd))
    }
}

/// Moves a descriptor the daemon holds for long (a pidfd per instance) above the range where
/// spawns' own descriptors are opened, so that those stay low: a child copies the daemon's
/// table only up to its highest kept descriptor (see [`modern_clone`]), and with pidfds
/// allocated lowest-first among them a burst of starts had pushed the spawns' descriptors above
/// thousands of pidfds, each copied again. Kept where it is when nothing is free up there.
pub fn held_high(fd: OwnedFd) -> OwnedFd {
    static FLOOR: std::sync::OnceLock<libc::c_int> = std::sync::OnceLock::new();
    let floor = *FLOOR.get_or_init(|| (open_files_limit() / 2).min(1024));
    if fd.as_raw_fd() >= floor {
        return fd;
    }
    // SAFETY: F_DUPFD_CLOEXEC returns a new descriptor that we own (or -1).
    let high = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, floor) };
    if high < 0 {
        return fd;
    }
    // SAFETY: `high` is a fresh descriptor owned by nobody else; `fd` closes as it drops.
    unsafe { std::os::fd::FromRawFd::from_raw_fd(high) }
}

/// Whether spawns clone with `CLONE_FILES | CLONE_PIDFD`: the child starts on the daemon's
/// descriptor table and takes its own copy of only the few it keeps (`close_range` with
/// `CLOSE_RANGE_UNSHARE`), and the parent gets a pidfd of it. Without the first, each clone
/// copies every descriptor the daemon holds and its exec closes them all again, a cost per
/// start that grows with what the daemon holds (its pidfds among them); the second tells the
/// child's exit without scanning every child (see the reaper). Both are Linux 5.9's
/// (close_range): probed once, by asking close_range to close a range that holds nothing. A
/// kernel or seccomp filter without it gets the plain clone.
fn modern_clone() -> bool {
    static MODERN: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    // SAFETY: close_range of a range no descriptor is in closes nothing.
    *MODERN.get_or_init(|| unsafe {
        libc::syscall(libc::SYS_close_range, libc::c_uint::MAX, libc::c_uint::MAX, 0 as libc::c_uint) == 0
    })
}

/// The soft RLIMIT_NOFILE (capped): no descriptor of this process is above it.
fn open_files_limit() -> libc::c_int {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit fills the struct it is given.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0;
    if ok {
        limit.rlim_cur.min(1 << 20) as libc::c_int
    } else {
        1 << 16
    }
}

/// Closes descriptors `from..=to` in the child: one close_range, or one close each on a kernel
/// without it.
///
/// # Safety
/// Plain system calls, as the child may make (see the module docs).
unsafe fn close_from_to(from: libc::c_int, to: libc::c_int, fd_limit: libc::c_int) {
    if from > to {
        return;
    }
    if libc::syscall(libc::SYS_close_range, from as libc::c_uint, to as libc::c_uint, 0 as libc::c_uint) == 0 {
        return;
    }
    for fd in from..=to.min(fd_limit) {
        libc::close(fd);
    }
}

/// Moves a descriptor to 3 or above, so that placing the three standard ones never overwrites
/// another of them (a daemon started with a closed stdin would open /dev/null as 0).
fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    // SAFETY: F_DUPFD_CLOEXEC returns a new descriptor that we own.
    let new = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if new < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `new` is a fresh descriptor owned by nobody else.
    Ok(unsafe { std::os::fd::FromRawFd::from_raw_fd(new) })
}

struct ChildArgs<'a> {
    prepared: &'a Prepared,
    /// Started on the daemon's descriptor table (`CLONE_FILES`): nothing may touch a
    /// descriptor before the child has its own.
    shares: bool,
    errno: AtomicI32,
    step: AtomicI32,
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// `struct sigaction` as the kernel takes it on x86-64 (not glibc's layout). Only ever passed
/// all zero (SIG_DFL, no flags, empty mask), so arches without `sa_restorer` read zeros too.
#[repr(C)]
struct KernelSigaction {
    handler: libc::sighandler_t,
    flags: libc::c_ulong,
    restorer: usize,
    mask: u64,
}

/// The child: system calls only, on memory prepared by the parent.
extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the parent's `ChildArgs`, alive while the parent waits (CLONE_VFORK).
    let args = unsafe { &*(arg as *const ChildArgs) };
    let p = args.prepared;
    let fail = |step: i32| -> libc::c_int {
        // SAFETY: reads the thread's errno; _exit ends the child without running anything of
        // the parent's (no atexit handlers, no stdio flush).
        unsafe {
            args.errno.store(*libc::__errno_location(), Ordering::Release);
            args.step.store(step, Ordering::Release);
            libc::_exit(127)
        }
    };
    // SAFETY: every call below is a plain system call on prepared data (see the module docs).
    unsafe {
        // First of all, nothing of the daemon's stays open here: joining a cgroup can keep this
        // child in the kernel for a long while (cgroup v1 waits for an RCU grace period per
        // write, behind every other writer), a loaded machine may not run it for a while, and a
        // daemon killed meanwhile would find its store lock and its socket held by the child.
        // Its own descriptors are all it needs.
        if args.shares {
            // Its own table: the kernel copies only the descriptors below the first closed
            // one, so the child holds those below its highest kept one and no more, whatever
            // the daemon holds. Closing on the shared table would close the daemon's.
            let first_closed = p.keep_fds.last().copied().unwrap_or(2).max(2) + 1;
            let unshare = libc::CLOSE_RANGE_UNSHARE as libc::c_uint;
            if libc::syscall(libc::SYS_close_range, first_closed as libc::c_uint, libc::c_uint::MAX, unshare) != 0 {
                return fail(STEP_UNSHARE);
            }
        }
        let mut from = 3;
        for &keep in &p.keep_fds {
            close_from_to(from, keep - 1, p.fd_limit);
            from = keep + 1;
        }
        close_from_to(from, libc::c_int::MAX, p.fd_limit);
        // The raw call: glibc's sigaction refuses the two signals it keeps for itself, which
        // may still be ignored by whoever started the daemon.
        let default = KernelSigaction { handler: libc::SIG_DFL, flags: 0, restorer: 0, mask: 0 };
        for sig in 1..=64 {
            if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                libc::syscall(libc::SYS_rt_sigaction, sig, &default, std::ptr::null_mut::<KernelSigaction>(), 8);
            }
        }
        if libc::setsid() < 0 {
            return fail(STEP_SETSID);
        }
        for (fd, target) in [(&p.stdin, 0), (&p.stdout, 1), (&p.stderr, 2)] {
            if libc::dup2(fd.as_raw_fd(), target) < 0 {
                return fail(STEP_STDIO);
            }
        }
        for fd in [&p.stdin, &p.stdout, &p.stderr] {
            libc::close(fd.as_raw_fd());
        }
        for fd in &p.cgroup_join {
            if libc::write(fd.as_raw_fd(), b"0".as_ptr().cast(), 1) != 1 {
                return fail(STEP_CGROUP);
            }
            libc::close(fd.as_raw_fd());
        }
        // The daemon protects itself from the OOM killer (OOMScoreAdjust); its workloads must
        // not inherit that. Lowering protection needs no privilege; failing it is harmless.
        let oom = libc::open(c"/proc/self/oom_score_adj".as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if oom >= 0 {
            libc::write(oom, b"0".as_ptr().cast(), 1);
            libc::close(oom);
        }
        if libc::chdir(p.cwd.as_ptr()) < 0 {
            return fail(STEP_CHDIR);
        }
        if let Some(c) = &p.credentials {
            if libc::syscall(libc::SYS_setgroups, c.groups.len(), c.groups.as_ptr()) < 0 {
                return fail(STEP_SETGROUPS);
            }
            if libc::syscall(libc::SYS_setresgid, c.gid, c.gid, c.gid) < 0 {
                return fail(STEP_SETGID);
            }
            if libc::syscall(libc::SYS_setresuid, c.uid, c.uid, c.uid) < 0 {
                return fail(STEP_SETUID);
            }
            // setresuid away from root already empties the permitted and effective sets (and so
            // the ambient one); the inheritable set survives it: clear everything explicitly so
            // that exec cannot bring a capability back.
            let header = CapHeader { version: CAPABILITY_VERSION_3, pid: 0 };
            let none = [CapData { effective: 0, permitted: 0, inheritable: 0 }; 2];
            if libc::syscall(libc::SYS_capset, &header, none.as_ptr()) < 0 {
                return fail(STEP_SETUID);
            }
            libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
        }
        let empty: libc::sigset_t = std::mem::zeroed();
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        libc::execve(p.program.as_ptr(), p.argv_ptrs.as_ptr(), p.envp_ptrs.as_ptr());
        fail(STEP_EXEC)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn wait(pid: i32) -> i32 {
        let mut status = 0;
        // SAFETY: waits for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        status
    }

    fn spawn_sh(script: &str, env: &[(String, String)], cwd: &Path) -> (io::Result<i32>, tempfile::NamedTempFile) {
        let out = tempfile::NamedTempFile::new().unwrap();
        let argv = vec!["sh".to_string(), "-c".to_string(), script.to_string()];
        let p =
            Prepared::new("/bin/sh", &argv, env, cwd, out.reopen().unwrap(), out.reopen().unwrap(), Vec::new(), None)
                .unwrap();
        (p.spawn().map(|(pid, _pidfd)| pid), out)
    }

    #[test]
    fn runs_with_exactly_the_given_environment_directory_and_session() {
        let dir = tempfile::tempdir().unwrap();
        let env = vec![
            ("PATH".to_string(), "/usr/bin:/bin".to_string()),
            ("A".to_string(), "1".to_string()),
            ("A".to_string(), "2".to_string()),
        ];
        let (pid, mut out) =
            spawn_sh("env | sort; pwd; [ \"$(cut -d' ' -f6 /proc/$$/stat)\" = $$ ] && echo leader", &env, dir.path());
        let pid = pid.unwrap();
        assert_eq!(wait(pid), 0);
        let mut text = String::new();
        out.as_file_mut().read_to_string(&mut text).unwrap();
        assert!(text.contains("A=2\n") && !text.contains("A=1"), "{text}");
        assert!(text.contains(&format!("{}\n", dir.path().display())), "{text}");
        assert!(text.contains("leader"), "a new session: {text}");
        assert!(!text.contains("HOME="), "nothing inherited from the daemon: {text}");
    }

    #[test]
    fn signals_are_default_and_unblocked_in_the_child() {
        // The parent (this test thread) ignores SIGPIPE as every Rust program does; the child
        // must not: a shell in a broken pipe has to die of it.
        let dir = tempfile::tempdir().unwrap();
        let (pid, mut out) = spawn_sh("grep -E '^(SigIgn|SigBlk)' /proc/self/status", &[], dir.path());
        assert_eq!(wait(pid.unwrap()), 0);
        let mut text = String::new();
        out.as_file_mut().read_to_string(&mut text).unwrap();
        assert!(text.contains("SigIgn:\t0000000000000000"), "{text}");
        assert!(text.contains("SigBlk:\t0000000000000000"), "{text}");
    }

    #[test]
    fn a_failed_exec_or_chdir_is_an_error_naming_the_step() {
        let dir = tempfile::tempdir().unwrap();
        let out = tempfile::NamedTempFile::new().unwrap();
        let missing = Prepared::new(
            "/nonexistent/program",
            &["program".to_string()],
            &[],
            dir.path(),
            out.reopen().unwrap(),
            out.reopen().unwrap(),
            Vec::new(),
            None,
        )
        .unwrap();
        let e = missing.spawn().unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().starts_with("cannot execute: "), "{e}");
        let (e, _) = spawn_sh("true", &[], Path::new("/nonexistent/dir"));
        let e = e.unwrap_err();
        assert!(e.to_string().starts_with("cannot enter the work directory: "), "{e}");
        // The failed children exited 127 and stay zombies until this test process ends: a
        // waitpid(-1) here would steal other tests' children.
    }

    /// A child held up before exec (here: its cgroup join blocks on a full pipe; in life, the
    /// kernel's cgroup lock) holds none of the daemon's descriptors: a daemon killed meanwhile
    /// must find its store lock and socket free when it starts again.
    #[test]
    fn a_child_held_before_exec_keeps_none_of_the_daemons_descriptors() {
        let dir = tempfile::tempdir().unwrap();
        let out = tempfile::NamedTempFile::new().unwrap();
        // One of "the daemon's" descriptors: a file the child must not hold.
        let held = tempfile::NamedTempFile::new().unwrap();
        let held_fd = std::fs::File::open(held.path()).unwrap();
        // Close-on-exec, as the daemon's own are: other tests' children, once they exec, must
        // not hold the writer too (the inspector below looks for the child that holds it).
        let (reader, writer) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        // Fill the pipe: the child's one-byte write (its "cgroup join") blocks until we read.
        nix::fcntl::fcntl(writer.as_raw_fd(), nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK)).unwrap();
        while nix::unistd::write(&writer, &[0u8; 4096]).is_ok() {}
        nix::fcntl::fcntl(writer.as_raw_fd(), nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::empty())).unwrap();
        let writer_fd = writer.as_raw_fd();
        let p = Prepared::new(
            "/bin/true",
            &["true".to_string()],
            &[],
            dir.path(),
            out.reopen().unwrap(),
            out.reopen().unwrap(),
            vec![writer],
            None,
        )
        .unwrap();
        // Many more descriptors of "the daemon's" (above the child's: opened after them), so
        // that a copy of its table would show in the child's table size.
        let many: Vec<std::fs::File> = (0..200).map(|_| std::fs::File::open("/dev/null").unwrap()).collect();
        // The child: ours, blocked in its write. Which descriptors does it hold? Looked at from
        // another thread, which then lets it go, while this one waits in spawn (as with vfork).
        let me = std::process::id().to_string();
        let inspector = std::thread::spawn(move || {
            // Other tests spawn children too, which for a moment before their exec hold copies
            // of every descriptor of this process: ours is the one whose set stays put.
            let holding = |pid: &str| -> Option<Vec<i32>> {
                let mut fds: Vec<i32> = std::fs::read_dir(format!("/proc/{pid}/fd"))
                    .ok()?
                    .flatten()
                    .filter_map(|f| f.file_name().to_str()?.parse().ok())
                    .collect();
                fds.sort_unstable();
                fds.contains(&writer_fd).then_some(fds)
            };
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            let fds = loop {
                let children: Vec<String> = std::fs::read_dir("/proc")
                    .unwrap()
                    .flatten()
                    .filter_map(|e| {
                        let status = std::fs::read_to_string(e.path().join("status")).ok()?;
                        let ppid = status.lines().find_map(|l| l.strip_prefix("PPid:"))?.trim().to_string();
                        (ppid == me).then(|| e.file_name().to_string_lossy().into_owned())
                    })
                    .collect();
                let first: Vec<(String, Vec<i32>)> =
                    children.into_iter().filter_map(|c| holding(&c).map(|f| (c, f))).collect();
                std::thread::sleep(std::time::Duration::from_millis(50));
                if let Some((child, fds)) = first.into_iter().find(|(c, f)| holding(c).as_ref() == Some(f)) {
                    let status = std::fs::read_to_string(format!("/proc/{child}/status")).unwrap();
                    let table = status.lines().find_map(|l| l.strip_prefix("FDSize:")).unwrap().trim().to_string();
                    break Some((fds, table.parse::<u32>().unwrap()));
                }
                if std::time::Instant::now() > deadline {
                    break None;
                }
            };
            let mut buf = vec![0u8; 1 << 20];
            let _ = nix::unistd::read(reader.as_raw_fd(), &mut buf);
            // The reader stays open until the spawn has returned: closed, the child's write fails.
            (fds, reader)
        });
        let (pid, _pidfd) = p.spawn().unwrap();
        let (fds, _reader) = inspector.join().unwrap();
        let (fds, table) = fds.expect("no child blocked in its cgroup join");
        let held = held_fd.as_raw_fd();
        assert_eq!(fds, vec![0, 1, 2, writer_fd], "the held child's descriptors (the daemon's file was {held})");
        if modern_clone() {
            // The kernel's smallest table: nothing of the daemon's 200 above it was copied.
            assert_eq!(table, 64, "the held child's table size (FDSize)");
        }
        drop(many);
        assert_eq!(wait(pid), 0);
    }
}
