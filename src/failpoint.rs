//! Fault injection for the tests of badly timed crashes (issue 14): named points in the daemon
//! where a test can have it die as `kill -9` would, or panic. Set in the daemon's environment:
//!
//! - `STEWARD_FAILPOINTS=apply-created@3`: at the 3rd time the point `apply-created` is passed,
//!   the daemon SIGKILLs itself (no destructor, no flush: exactly a kill -9 at that point).
//! - `STEWARD_FAILPOINTS=actor-panic=ns/name/0`: the actor of that instance panics when it
//!   starts it; `reload-panic=ns/name/0` when it is asked to reload (see [`panic_for`]).
//! - `STEWARD_FAILPOINTS=subpath-checked~3000`: the thread passing `subpath-checked` sleeps
//!   3000 ms there each time, so that a test can act inside a window a race would need (see
//!   [`pause`]).
//!
//! Compiled into debug builds only (the ones the tests run); in a release build every point is
//! an empty inline function.

#[cfg(debug_assertions)]
mod enabled {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};

    pub const VAR: &str = "STEWARD_FAILPOINTS";

    struct Points {
        /// Point name → the hit at which the daemon dies.
        crash_at: HashMap<String, u64>,
        /// Point name → the argument it panics for.
        panic_for: HashMap<String, String>,
        /// Point name → how long the thread passing it sleeps there.
        pause: HashMap<String, std::time::Duration>,
        hits: Mutex<HashMap<String, u64>>,
    }

    fn points() -> &'static Points {
        static POINTS: OnceLock<Points> = OnceLock::new();
        POINTS.get_or_init(|| {
            let mut p = Points {
                crash_at: HashMap::new(),
                panic_for: HashMap::new(),
                pause: HashMap::new(),
                hits: Mutex::new(HashMap::new()),
            };
            for item in std::env::var(VAR).unwrap_or_default().split(',').map(str::trim).filter(|s| !s.is_empty()) {
                if let Some((name, n)) = item.split_once('@') {
                    p.crash_at.insert(name.to_string(), n.parse().unwrap_or(1));
                } else if let Some((name, arg)) = item.split_once('=') {
                    p.panic_for.insert(name.to_string(), arg.to_string());
                } else if let Some((name, ms)) = item.split_once('~') {
                    p.pause.insert(name.to_string(), std::time::Duration::from_millis(ms.parse().unwrap_or(1000)));
                }
            }
            p
        })
    }

    pub fn hit(name: &str) {
        let p = points();
        let Some(at) = p.crash_at.get(name) else { return };
        let mut hits = p.hits.lock().expect("failpoint hits");
        let n = hits.entry(name.to_string()).or_default();
        *n += 1;
        if *n == *at {
            eprintln!("failpoint {name}: hit {n}, the daemon dies as by kill -9");
            let _ = nix::sys::signal::kill(nix::unistd::getpid(), nix::sys::signal::Signal::SIGKILL);
        }
    }

    pub fn pause(name: &str) {
        if let Some(d) = points().pause.get(name) {
            eprintln!("failpoint {name}: pausing {} ms", d.as_millis());
            std::thread::sleep(*d);
        }
    }

    pub fn panic_for(name: &str, arg: &str) {
        if points().panic_for.get(name).is_some_and(|a| a == arg) {
            panic!("failpoint {name} for {arg}");
        }
    }
}

/// Passes point `name`: the daemon dies here if a test asked for it (see the module's doc).
#[inline]
pub fn hit(_name: &str) {
    #[cfg(debug_assertions)]
    enabled::hit(_name);
}

/// Panics at point `name` if a test asked for it for `arg` (an instance's key, say).
#[inline]
pub fn panic_for(_name: &str, _arg: &str) {
    #[cfg(debug_assertions)]
    enabled::panic_for(_name, _arg);
}

/// Sleeps at point `name` if a test asked for it: a race's window held open (blocking the
/// thread, which only a test's daemon ever does).
#[inline]
pub fn pause(_name: &str) {
    #[cfg(debug_assertions)]
    enabled::pause(_name);
}
