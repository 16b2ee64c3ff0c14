//! Long-lived responses (an event stream, a followed log) each hold a task, a channel and a
//! page of data for as long as the reader stays: they are counted per daemon and per peer, so
//! that a flood of them from one user, or from many, cannot grow the daemon without bound.
//! Root, who administers the daemon, has only the daemon-wide cap.

use super::auth::Caller;
use super::error::ApiError;
use axum::http::StatusCode;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Who a stream is counted against: a local user, or the remote listener's tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Peer {
    Local(u32),
    Remote,
}

#[derive(Debug)]
pub struct StreamSlots {
    max_total: usize,
    max_per_peer: usize,
    open: Mutex<Open>,
}

#[derive(Debug, Default)]
struct Open {
    total: usize,
    per_peer: HashMap<Peer, usize>,
}

/// One open stream; its slot is given back when it is dropped (the stream's task ends).
#[derive(Debug)]
pub struct StreamSlot {
    slots: Arc<StreamSlots>,
    peer: Option<Peer>,
}

impl StreamSlots {
    pub fn new(max_total: usize, max_per_peer: usize) -> Arc<StreamSlots> {
        Arc::new(StreamSlots { max_total, max_per_peer, open: Mutex::new(Open::default()) })
    }

    /// A slot for `caller`'s stream, or 429 naming the limit that is reached.
    pub fn take(self: &Arc<Self>, caller: &Caller) -> Result<StreamSlot, ApiError> {
        let peer = match (caller.token, caller.uid) {
            (Some(_), _) => Some(Peer::Remote),
            (None, 0) => None,
            (None, uid) => Some(Peer::Local(uid)),
        };
        let mut open = self.open.lock().expect("stream slots");
        let refusal = if open.total >= self.max_total {
            Some(format!("{} streams are open on this daemon (connections.max_streams)", open.total))
        } else {
            peer.and_then(|p| {
                let mine = open.per_peer.get(&p).copied().unwrap_or(0);
                (mine >= self.max_per_peer)
                    .then(|| format!("{mine} streams of this user are open (connections.max_streams_per_peer)"))
            })
        };
        if let Some(why) = refusal {
            return Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_streams",
                format!("{why}; close one and retry"),
            ));
        }
        open.total += 1;
        if let Some(p) = peer {
            *open.per_peer.entry(p).or_default() += 1;
        }
        Ok(StreamSlot { slots: self.clone(), peer })
    }

    /// Streams open now.
    pub fn open(&self) -> usize {
        self.open.lock().expect("stream slots").total
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut open = self.slots.open.lock().expect("stream slots");
        open.total -= 1;
        if let Some(p) = self.peer {
            if let Some(n) = open.per_peer.get_mut(&p) {
                *n -= 1;
                if *n == 0 {
                    open.per_peer.remove(&p);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local(uid: u32) -> Caller {
        Caller { uid, gid: uid, pid: None, token: None }
    }

    #[test]
    fn streams_are_capped_per_peer_and_in_total_and_given_back() {
        let slots = StreamSlots::new(4, 2);
        let a1 = slots.take(&local(1000)).unwrap();
        let _a2 = slots.take(&local(1000)).unwrap();
        let err = slots.take(&local(1000)).unwrap_err();
        assert!(format!("{err:?}").contains("max_streams_per_peer"), "{err:?}");
        let _b = slots.take(&local(1001)).unwrap();
        let _root = slots.take(&local(0)).unwrap();
        let err = slots.take(&local(0)).unwrap_err();
        assert!(format!("{err:?}").contains("connections.max_streams)"), "{err:?}");
        drop(a1);
        assert_eq!(slots.open(), 3);
        slots.take(&local(1000)).unwrap();
    }
}
