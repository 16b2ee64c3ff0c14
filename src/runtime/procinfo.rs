//! Facts about a process from /proc: identity (pid + start time + boot) and names.

use serde::{Deserialize, Serialize};
use std::path::Path;

/// A process, as it can be recognised again later: pids are reused (pid_max may be 32768),
/// the start time since boot and the boot id together are not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessIdentity {
    pub pid: i32,
    /// /proc/PID/stat field 22, clock ticks since boot.
    pub start_time: u64,
    /// Shared by every identity taken during this boot (see [`boot_id`]).
    pub boot_id: std::sync::Arc<str>,
}

impl ProcessIdentity {
    /// The identity of the live process `pid` now.
    pub fn of(pid: i32) -> Option<ProcessIdentity> {
        let stat = Stat::read(pid)?;
        if stat.is_dead() {
            return None;
        }
        Some(ProcessIdentity { pid, start_time: stat.start_time, boot_id: boot_id() })
    }

    /// Whether `self.pid` is still the same, live process.
    pub fn is_current(&self) -> bool {
        ProcessIdentity::of(self.pid).as_ref() == Some(self)
    }
}

/// Reads a file of the kernel's (/proc, /sys, cgroupfs) whole: its size is not asked first
/// (they all say 0) and the usual small one comes in one 4 KiB read, where `fs::read_to_string`
/// stats the file and probes with 32 bytes before (an exit's OOM and emptiness checks read six).
pub fn read_kernel_file(path: &std::path::Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut file = std::fs::File::open(path)?;
    let (mut text, mut chunk) = (Vec::new(), [0u8; 4096]);
    loop {
        match file.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => text.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    String::from_utf8(text).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// The kernel's id of this boot; changes on every reboot, so it is read once per daemon (every
/// spawn takes an identity).
pub fn boot_id() -> std::sync::Arc<str> {
    static BOOT_ID: std::sync::OnceLock<std::sync::Arc<str>> = std::sync::OnceLock::new();
    BOOT_ID
        .get_or_init(|| {
            let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
            id.trim().into()
        })
        .clone()
}

/// The fields of /proc/PID/stat we use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    pub comm: String,
    pub state: char,
    pub ppid: i32,
    pub start_time: u64,
}

impl Stat {
    pub fn read(pid: i32) -> Option<Stat> {
        let text = read_kernel_file(std::path::Path::new(&format!("/proc/{pid}/stat"))).ok()?;
        Stat::parse(&text)
    }

    /// `pid (comm) state ppid ... starttime(22) ...`; comm may hold spaces and parentheses,
    /// so split at the last ')'.
    pub fn parse(text: &str) -> Option<Stat> {
        let open = text.find('(')?;
        let close = text.rfind(')')?;
        let comm = text.get(open + 1..close)?.to_string();
        let rest: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
        Some(Stat {
            comm,
            state: rest.first()?.chars().next()?,
            ppid: rest.get(1)?.parse().ok()?,
            start_time: rest.get(19)?.parse().ok()?,
        })
    }

    /// Zombie or dead: exited, whatever its parent has or has not collected.
    pub fn is_dead(&self) -> bool {
        matches!(self.state, 'Z' | 'X' | 'x')
    }
}

/// Whether `pid` is a live (not zombie) process.
pub fn is_alive(pid: i32) -> bool {
    Stat::read(pid).is_some_and(|s| !s.is_dead())
}

/// Checks that `pid` runs the program `proc_name`: by /proc/PID/comm (the kernel keeps 15
/// bytes of it), the executable's base name (without " (deleted)" after an upgrade replaced
/// it), or argv[0]'s base name (interpreters that rename themselves).
pub fn check_name(pid: i32, proc_name: &str) -> Result<(), String> {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).map(|s| s.trim_end_matches('\n').to_string());
    let comm = comm.map_err(|e| format!("cannot read /proc/{pid}/comm: {e}"))?;
    let truncated: String = proc_name.chars().take(15).collect();
    if comm == proc_name || (proc_name.len() > 15 && comm == truncated) {
        return Ok(());
    }
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok().and_then(|p| base_name(&p.to_string_lossy()));
    if let Some(exe) = &exe {
        if exe.strip_suffix(" (deleted)").unwrap_or(exe) == proc_name {
            return Ok(());
        }
    }
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let argv0 = cmdline.split(|b| *b == 0).next().map(|a| String::from_utf8_lossy(a).to_string());
    let argv0 = argv0.as_deref().and_then(base_name);
    if argv0.as_deref() == Some(proc_name) {
        return Ok(());
    }
    Err(format!(
        "pid {pid} runs {comm:?} (exe {}, argv[0] {}), not procName {proc_name:?}",
        exe.as_deref().unwrap_or("?"),
        argv0.as_deref().unwrap_or("?")
    ))
}

fn base_name(path: &str) -> Option<String> {
    let name = Path::new(path.split(' ').next().unwrap_or(path)).file_name()?.to_string_lossy().to_string();
    // Keep " (deleted)" on exe links: the caller strips it.
    Some(if path.ends_with(" (deleted)") { format!("{name} (deleted)") } else { name })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_awkward_comm() {
        let text = "4242 (my (odd) prog) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 100";
        let s = Stat::parse(text).unwrap();
        assert_eq!(s.comm, "my (odd) prog");
        assert_eq!(s.state, 'S');
        assert_eq!(s.ppid, 1);
        assert_eq!(s.start_time, 987654);
    }

    #[test]
    fn own_identity_is_current_and_stable() {
        let me = ProcessIdentity::of(std::process::id() as i32).unwrap();
        assert!(me.is_current());
        let mut other = me.clone();
        other.start_time += 1;
        assert!(!other.is_current(), "a different start time is a different process");
    }

    #[test]
    fn names_match_by_comm_or_exe() {
        let pid = std::process::id() as i32;
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap();
        check_name(pid, comm.trim()).unwrap();
        let err = check_name(pid, "definitely-not-this").unwrap_err();
        assert!(err.contains("not procName"), "{err}");
    }

    #[test]
    fn deleted_exe_suffix_is_kept_for_the_caller() {
        assert_eq!(base_name("/usr/sbin/nginx (deleted)").unwrap(), "nginx (deleted)");
        assert_eq!(base_name("/usr/sbin/nginx").unwrap(), "nginx");
    }
}
