//! Services (issue 27, seed 003 `services`): a stable address for an app across hosts.
//!
//! - keeper.rs: the endpoints steward-sched hands this daemon, durable in its store, watched by
//!   long poll;
//! - nodeports.rs: node ports forwarded to the endpoints, in the kernel (nft.rs) or by the
//!   userspace proxy (proxy.rs).

pub mod keeper;
pub mod nft;
pub mod nodeports;
pub mod proxy;

pub use keeper::{EndpointsError, EndpointsKeeper};
