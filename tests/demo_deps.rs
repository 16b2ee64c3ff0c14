//! What `bash scripts/demo.sh` installs on a fresh machine: only the demo's own needs, while the
//! test suite's `scripts/install-deps.sh` still names everything the tests use. The scripts run
//! for real, as an unprivileged user on a PATH without the tools they look for, so they stop at
//! "missing ...; run as root" and name what they would install (nothing is installed).

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

const NOBODY: u32 = 65534;

/// Runs `bash SCRIPT` from the repository as nobody, on a PATH holding only the plumbing the
/// scripts use: the packages it says are missing, and its screen (stdout and stderr).
fn missing_named_by(script: &str, dir: &Path) -> (BTreeSet<String>, String) {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for tool in ["bash", "dpkg-query", "grep", "sort", "id", "dirname", "mkdir"] {
        let found = ["/usr/bin", "/bin", "/usr/sbin", "/sbin"]
            .iter()
            .map(|d| Path::new(d).join(tool))
            .find(|p| p.exists())
            .unwrap_or_else(|| panic!("{tool} not found"));
        let _ = std::os::unix::fs::symlink(found, bin.join(tool));
    }
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    std::fs::set_permissions(&logs, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = Command::new("/bin/bash")
        .arg(script)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_clear()
        .env("PATH", &bin)
        .env("STEWARD_DEMO_LOGS", &logs)
        .env("APT_LOG", logs.join("install.log"))
        .uid(NOBODY)
        .gid(NOBODY)
        .output()
        .unwrap();
    let screen = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{script} stops when something is missing and it is not root:\n{screen}");
    let line = screen
        .lines()
        .find_map(|l| l.strip_prefix("install-deps: missing "))
        .and_then(|l| l.strip_suffix("; run as root or install them"))
        .unwrap_or_else(|| panic!("{script} names what is missing:\n{screen}"));
    (line.split_whitespace().map(String::from).collect(), screen)
}

#[test]
fn the_demo_installs_only_its_own_needs_and_the_suite_everything() {
    assert!(nix::unistd::geteuid().is_root(), "runs the scripts as nobody");
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();

    let (demo, screen) = missing_named_by("scripts/demo.sh", &dir.path().join("demo"));
    // busybox-static is looked up in dpkg's database (the machine's own), the rest on PATH.
    let demo: BTreeSet<String> = demo.into_iter().filter(|p| p != "busybox-static").collect();
    // libprotobuf-dev is looked for as a file (the machine's own), protoc on PATH: building
    // the etcd client needs both.
    let demo: BTreeSet<String> = demo.into_iter().filter(|p| p != "libprotobuf-dev").collect();
    let wanted: BTreeSet<String> = ["coreutils", "docker.io", "perl-base", "util-linux", "protobuf-compiler"]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(
        demo, wanted,
        "the demo needs perl (gamesvc), timeout, setsid and flock, a Docker Engine, and protoc to build:\n{screen}"
    );
    assert!(!screen.contains("Compiling"), "nothing is built before what is missing is there:\n{screen}");

    let (suite, screen) = missing_named_by("scripts/install-deps.sh", &dir.path().join("suite"));
    for p in wanted.iter().map(String::as_str).chain([
        "nginx-light",
        "redis-server",
        "haproxy",
        "passwd",
        "iproute2",
        "bsdutils",
        "binutils",
        "dpkg-dev",
        "lintian",
        "rpm",
        "man-db",
        "curl",
        "etcd-server",
    ]) {
        assert!(suite.contains(p), "the test suite's install names {p}:\n{screen}");
    }
}
