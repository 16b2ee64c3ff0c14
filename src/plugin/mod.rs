//! steward-sched, the scheduler side: reads every node from its daemon's remote API, places
//! instances by seed 000's constraints, applies them, follows every daemon's events, notices
//! lost nodes and reschedules by restart policy, and runs the REMOTE_HTTP / REMOTE_TCP checks.
//! It keeps only the desired state (apps, specs, placements); the daemons stay the source of
//! truth for what runs.

pub mod placement;
