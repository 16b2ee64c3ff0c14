//! `cgroup_favor_dynmods`: stewardd sets the kernel's `favordynmods` on the host's cgroup v2
//! mount at start (keeping its other options), and leaves the host alone when told to. One test
//! in its own binary: it changes a host-wide mount option and puts it back as it found it.

mod common;

use common::Daemon;
use std::ffi::CString;

/// The cgroup2 mount below /sys/fs/cgroup and its super options.
fn unified() -> Option<(String, Vec<String>)> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    mountinfo.lines().find_map(|line| {
        let (mount, fs) = line.split_once(" - ")?;
        let fs: Vec<&str> = fs.split(' ').collect();
        let point = mount.split(' ').nth(4)?;
        (fs[0] == "cgroup2" && point.starts_with("/sys/fs/cgroup"))
            .then(|| (point.to_string(), fs[2].split(',').map(String::from).collect()))
    })
}

fn remount(point: &str, options: &[String]) {
    let data: Vec<&str> = options.iter().map(String::as_str).filter(|o| *o != "rw" && *o != "ro").collect();
    let (target, data) = (CString::new(point).unwrap(), CString::new(data.join(",")).unwrap());
    // SAFETY: NUL-terminated strings that outlive the call.
    let rc = unsafe {
        libc::mount(c"cgroup2".as_ptr(), target.as_ptr(), c"cgroup2".as_ptr(), libc::MS_REMOUNT, data.as_ptr().cast())
    };
    assert_eq!(rc, 0, "remount {point} with {data:?}: {}", std::io::Error::last_os_error());
}

fn favoring() -> bool {
    unified().unwrap().1.iter().any(|o| o == "favordynmods")
}

#[test]
fn stewardd_sets_favordynmods_unless_told_not_to() {
    let Some((point, original)) = unified() else {
        eprintln!("no cgroup2 mount below /sys/fs/cgroup (a v1-only host): nothing to check");
        return;
    };
    let without: Vec<String> = original.iter().filter(|o| *o != "favordynmods").cloned().collect();
    remount(&point, &without);
    assert!(!favoring());

    // Told not to: the host is left as it is.
    let d = Daemon::start_with("dynmods-off", "cgroup_favor_dynmods = false\n");
    assert!(!favoring(), "cgroup_favor_dynmods = false changed the mount");
    drop(d);

    // The default: set, the other options kept, and said in the log.
    let d = Daemon::start("dynmods");
    let now = unified().unwrap().1;
    for kept in without.iter().filter(|o| *o != "rw" && *o != "ro") {
        assert!(now.contains(kept), "{kept} lost: {now:?}");
    }
    assert!(now.iter().any(|o| o == "favordynmods"), "{now:?}");
    let log = std::fs::read_to_string(d.path().join("stewardd.log")).unwrap();
    assert!(log.contains(&format!("favordynmods set on {point}")), "{log}");
    drop(d);

    // A second start finds it set and changes nothing.
    let d = Daemon::start("dynmods-again");
    assert!(favoring());
    let log = std::fs::read_to_string(d.path().join("stewardd.log")).unwrap();
    assert!(log.contains("favordynmods already set"), "{log}");
    drop(d);

    remount(&point, &original);
}
