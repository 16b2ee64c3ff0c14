//! Who is calling, from the unix socket's SO_PEERCRED, and what they may do: root and the
//! `steward` group may change things; others may only read (if allowed) or are refused.
//! Remote callers (TCP + TLS) have the rights of their bearer token.

use super::error::ApiError;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use tokio::net::UnixStream;

/// The peer of a unix-socket connection, or a remote caller with a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
    pub pid: Option<i32>,
    /// Set for remote callers: the rights of the token they presented.
    pub token: Option<TokenRole>,
}

/// What a remote bearer token allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenRole {
    Read,
    Write,
}

impl Caller {
    /// A remote caller: no local identity, only its token's rights.
    pub fn remote(role: TokenRole) -> Caller {
        Caller { uid: u32::MAX, gid: u32::MAX, pid: None, token: Some(role) }
    }
}

impl Caller {
    /// Who this is, for the record (an app's revisions): `user NAME (uid N)`, or the remote
    /// token's kind.
    pub fn describe(&self) -> String {
        match self.token {
            Some(TokenRole::Write) => "a remote caller with a write token".into(),
            Some(TokenRole::Read) => "a remote caller with a read token".into(),
            None => {
                let user = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(self.uid)).ok().flatten();
                match user {
                    Some(u) => format!("user {} (uid {})", u.name, self.uid),
                    None => format!("uid {}", self.uid),
                }
            }
        }
    }

    /// The peer of a unix-socket connection, by its credentials (SO_PEERCRED).
    pub fn of_local(stream: &UnixStream) -> Caller {
        match stream.peer_cred() {
            Ok(c) => Caller { uid: c.uid(), gid: c.gid(), pid: c.pid(), token: None },
            // Unknown peers get no rights (uid/gid of nobody).
            Err(_) => Caller { uid: u32::MAX, gid: u32::MAX, pid: None, token: None },
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Caller, ApiError> {
        parts
            .extensions
            .get::<axum::extract::ConnectInfo<Caller>>()
            .map(|c| c.0)
            .ok_or_else(|| ApiError::forbidden("caller unknown"))
    }
}

/// Who may do what.
#[derive(Debug, Clone)]
pub struct Access {
    /// The `steward` group's gid, when the group exists.
    pub admin_gid: Option<u32>,
    pub read_for_all: bool,
}

impl Access {
    pub fn from_group(group: &str, read_for_all: bool) -> Access {
        let admin_gid = nix::unistd::Group::from_name(group).ok().flatten().map(|g| g.gid.as_raw());
        Access { admin_gid, read_for_all }
    }

    fn is_admin(&self, c: &Caller) -> bool {
        match c.token {
            Some(role) => role == TokenRole::Write,
            None => c.uid == 0 || self.admin_gid.is_some_and(|g| c.gid == g || in_group(c, g)),
        }
    }

    pub fn require_write(&self, c: &Caller) -> Result<(), ApiError> {
        if self.is_admin(c) {
            Ok(())
        } else if c.token.is_some() {
            Err(ApiError::forbidden("this token may only read"))
        } else {
            Err(ApiError::forbidden(format!("uid {} may not change instances (root or the steward group only)", c.uid)))
        }
    }

    pub fn require_read(&self, c: &Caller) -> Result<(), ApiError> {
        if self.read_for_all || c.token.is_some() || self.is_admin(c) {
            Ok(())
        } else {
            Err(ApiError::forbidden(format!("uid {} may not read (root or the steward group only)", c.uid)))
        }
    }
}

/// Supplementary groups of the calling process, from /proc (SO_PEERCRED gives only the primary).
fn in_group(c: &Caller, gid: u32) -> bool {
    let Some(pid) = c.pid else { return false };
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else { return false };
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .is_some_and(|groups| groups.split_whitespace().any(|g| g.parse() == Ok(gid)))
}
