//! steward-sched: the scheduler side.
