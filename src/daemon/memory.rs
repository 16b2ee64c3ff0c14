//! How the daemon keeps its memory small: one malloc arena, and the memory freed after a burst
//! of work handed back to the kernel.
//!
//! Starting hundreds of instances allocates and frees a lot of short-lived memory (rendered
//! specs, journal entries, futures) between the long-lived per-instance state. glibc keeps the
//! freed pages of such a fragmented heap for reuse and returns only its top, so after a burst
//! the daemon's RSS stays about twice its live heap. Once the journal has been quiet for a
//! tick after moving (and once after start-up), `malloc_trim(0)` releases every whole free page
//! of every arena, and the code pages the start-up or the burst mapped are let go
//! ([`release_code_pages`]). Idle, the task costs one timer wake-up per tick and no trim.

use crate::store::Store;
use std::time::Duration;

/// How often the journal is looked at; a burst is over when it did not move for one tick.
const TICK: Duration = Duration::from_secs(2);

/// Runs until the daemon ends; `release_code` lets go of code pages too (config
/// `release_code_pages`).
pub async fn trim_after_bursts(store: Store, release_code: bool) {
    // None: the start-up (store replay, re-adoption, the API's set-up) is a burst of its own.
    let mut trimmed_at = None;
    let mut seen = store.last_seq();
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The journal's place when the code was last let go.
    let mut code_released_at: Option<u64> = None;
    loop {
        tick.tick().await;
        let now = store.last_seq();
        if now == seen && trimmed_at != Some(now) {
            release_free_memory();
            let burst = code_released_at.is_none_or(|at| now >= at + BURST_EVENTS);
            if release_code && burst {
                let released = release_code_pages();
                code_released_at = Some(now);
                tracing::debug!("a quiet tick after a burst: {} KiB of code pages let go", released / 1024);
            }
            trimmed_at = Some(now);
        }
        seen = now;
    }
}

/// How many events make a burst whose code is let go once it is over (a start is about
/// three: an apply of some 40 instances, as many respawns). Not less: a respawn maps 3-4 MiB of
/// code again (the 64 KiB around each fault), 0.15-0.3 ms on the first respawn after a release,
/// so letting go after every lone respawn made each of them that much slower.
const BURST_EVENTS: u64 = 128;

/// Lets go of the mapped pages of the daemon's code and read-only data (every file mapping of
/// the executable and its libraries that is not writable and holds no page of its own), keeping
/// them in the page cache: the next use of one is a minor fault, no read from disk. Returns how
/// many bytes were advised.
///
/// Why: the kernel maps a file's pages 64 KiB around each fault (fault-around), so code run
/// once — the configuration, the store's replay, the API's set-up, the apply and start paths of
/// a burst — stayed resident for the daemon's life: 12.5 MiB of an idle daemon's 16 MiB RSS
/// were the binary's pages, of which a settled daemon touches about 4 (docs/performance.md,
/// issue 48). The price is a few minor faults the next time a path not run since is taken.
///
/// Safe for exactly these pages: `smaps` says the mapping holds no anonymous (copied on write)
/// page, and without write permission none can appear, so dropping its page-table entries
/// loses nothing the file does not hold.
pub fn release_code_pages() -> usize {
    let smaps = match std::fs::read_to_string("/proc/self/smaps") {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!("/proc/self/smaps: {e}");
            return 0;
        }
    };
    let mut advised = 0;
    for (start, end) in unwritten_file_mappings(&smaps) {
        // SAFETY: a mapping of this process that holds only the file's own pages (above).
        if unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) } == 0 {
            advised += end - start;
        }
    }
    advised
}

/// The address ranges of `smaps`' mappings that are backed by a file, not writable, and hold no
/// anonymous page.
fn unwritten_file_mappings(smaps: &str) -> Vec<(usize, usize)> {
    let mut found = Vec::new();
    let mut candidate = None;
    for line in smaps.lines() {
        let mut fields = line.split_ascii_whitespace();
        let Some(first) = fields.next() else { continue };
        if let Some((start, end)) = first.split_once('-') {
            // A mapping's header: range, permissions, offset, device, inode, path.
            let (perms, inode) = (fields.next().unwrap_or(""), fields.nth(2).unwrap_or("0"));
            let range = usize::from_str_radix(start, 16).ok().zip(usize::from_str_radix(end, 16).ok());
            candidate = range.filter(|_| !perms.contains('w') && inode != "0");
        } else if first == "Anonymous:" {
            if let Some(range) = candidate.take() {
                if fields.next() == Some("0") {
                    found.push(range);
                }
            }
        }
    }
    found
}

/// Returns the allocator's free pages to the kernel (glibc; other C libraries do it themselves
/// or not at all).
fn release_free_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// One malloc arena for every thread. glibc gives each thread that allocates its own arena (up
/// to 8 per core), and the tokio workers each fragment theirs with the same short-lived
/// allocations; one shared arena keeps about 1 MiB less resident at 500 instances. The daemon
/// allocates little per request, so the shared lock costs nothing measurable. Call before any
/// thread starts.
pub fn use_one_arena() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets an allocator parameter.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_unwritten_file_mappings_without_pages_of_their_own_are_let_go() {
        let smaps = "\
55c51b295000-55c51b747000 r--p 00000000 00:2f 1234 /usr/sbin/stewardd
Rss:                2508 kB
Anonymous:             0 kB
55c51b747000-55c51c14a000 r-xp 004b1000 00:2f 1234 /usr/sbin/stewardd
Anonymous:             0 kB
55c51c14a000-55c51c2c5000 r--p 00eb3000 00:2f 1234 /usr/sbin/stewardd
Anonymous:          1500 kB
55c51c2c5000-55c51c2d0000 rw-p 0102d000 00:2f 1234 /usr/sbin/stewardd
Anonymous:             0 kB
55c54ebfb000-55c54edaf000 rw-p 00000000 00:00 0 [heap]
Anonymous:          1632 kB
7ffe6f5d4000-7ffe6f5d6000 r-xp 00000000 00:00 0 [vdso]
Anonymous:             0 kB
";
        // rodata and text, not the relocated read-only data, the writable data, the heap or the vDSO.
        assert_eq!(
            unwritten_file_mappings(smaps),
            [(0x55c51b295000, 0x55c51b747000), (0x55c51b747000, 0x55c51c14a000)]
        );
    }

    #[test]
    fn code_let_go_comes_back_when_run() {
        let before = std::hint::black_box(format!("{:?}", vec![1, 2, 3]));
        assert!(release_code_pages() > 0, "this test's own binary has code pages to let go");
        // What runs next faults its pages back in from the page cache.
        assert_eq!(format!("{:?}", vec![1, 2, 3]), before);
        assert!(release_code_pages() > 0, "and again");
    }
}
