//! How the daemon keeps its memory small: one malloc arena, and the memory freed after a burst
//! of work handed back to the kernel.
//!
//! Starting hundreds of instances allocates and frees a lot of short-lived memory (rendered
//! specs, journal entries, futures) between the long-lived per-instance state. glibc keeps the
//! freed pages of such a fragmented heap for reuse and returns only its top, so after a burst
//! the daemon's RSS stays about twice its live heap. Once the journal has been quiet for a
//! tick after moving, `malloc_trim(0)` releases every whole free page of every arena. Idle, the
//! task costs one timer wake-up per tick and no trim.

use crate::store::Store;
use std::time::Duration;

/// How often the journal is looked at; a burst is over when it did not move for one tick.
const TICK: Duration = Duration::from_secs(2);

/// Runs until the daemon ends.
pub async fn trim_after_bursts(store: Store) {
    let mut trimmed_at = store.last_seq();
    let mut seen = trimmed_at;
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now = store.last_seq();
        if now == seen && now != trimmed_at {
            release_free_memory();
            trimmed_at = now;
        }
        seen = now;
    }
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
