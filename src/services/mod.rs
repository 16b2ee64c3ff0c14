//! Services (issue 27, seed 003 `services`): a stable address for an app across hosts.
//!
//! - keeper.rs: the endpoints steward-sched hands this daemon, durable in its store, watched by
//!   long poll;
//! - forwarding.rs: node ports and cluster IPs (addresses of the host's loopback, vips.rs) forwarded to the
//!   endpoints, in the kernel (nft.rs) or by the userspace proxy (proxy.rs);
//! - dns.rs: the names of apps, instances and services, answered from the endpoints; also at
//!   the address pods ask (`pod_dns`), which forwards other names to the host's (forward.rs).

pub mod dns;
pub mod forward;
pub mod forwarding;
pub mod keeper;
pub mod nft;
pub mod proxy;
pub mod vips;

pub use keeper::{EndpointsError, EndpointsKeeper};
