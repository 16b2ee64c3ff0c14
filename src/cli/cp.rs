//! `steward cp FILE INSTANCE:PATH` (and `steward-sched cp`): a file into a running instance.

use super::steward::{split_copy_target, CopyMode, Output};
use crate::client::{Client, ClientError};
use std::path::Path;

pub struct CopyRequest<'a> {
    pub file: &'a Path,
    /// `namespace/name/index:PATH`.
    pub target: &'a str,
    pub mode: CopyMode,
    pub user: Option<String>,
    pub container: Option<String>,
}

/// Reads the file (refusing one larger than the daemon takes, naming it) and sends it.
pub async fn run(client: &Client, request: CopyRequest<'_>, output: Output) -> Result<i32, ClientError> {
    let read = split_copy_target(request.target).and_then(|(id, path)| Ok((id, path, read(request.file)?)));
    let (id, path, data) = match read {
        Ok(all) => all,
        Err(why) => {
            eprintln!("steward: {why}");
            return Ok(super::steward::exit::USAGE);
        }
    };
    let writable = request.mode == CopyMode::Rw;
    let copied =
        client.copy_in(&id, &path, data, writable, request.user.as_deref(), request.container.as_deref()).await?;
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&copied).unwrap_or_default()),
        Output::Text => println!("{id}: {}", describe(&copied)),
    }
    Ok(0)
}

/// What a copy did, for people: "copied N bytes to PATH [in container C] (owner, mode)".
pub fn describe(copied: &crate::protocol::FileCopied) -> String {
    let into = copied.container.as_deref().map(|c| format!(" in container {c}")).unwrap_or_default();
    format!("copied {} bytes to {}{into} (owner {}, mode {})", copied.bytes, copied.path, copied.owner, copied.mode)
}

/// The file's bytes, up to what the daemon takes.
pub fn read(file: &Path) -> Result<Vec<u8>, String> {
    let max = crate::supervisor::instance::MAX_COPY_BYTES;
    let meta = std::fs::metadata(file).map_err(|e| format!("{}: {e}", file.display()))?;
    if !meta.is_file() {
        return Err(format!("{}: not a regular file", file.display()));
    }
    if meta.len() > max as u64 {
        return Err(format!("{}: {} bytes; a copy takes at most {} MiB", file.display(), meta.len(), max >> 20));
    }
    std::fs::read(file).map_err(|e| format!("{}: {e}", file.display()))
}
