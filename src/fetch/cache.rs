//! The download cache: one data file per URL (and user), named by a hash of it, with a JSON
//! file beside it holding the validators (ETag, Last-Modified) and the sha256. Writes are
//! atomic: data lands in a `.part` file that is renamed into place, and the meta file (the
//! thing that makes an entry exist) is removed before and written after, so a crash at any
//! point leaves either a complete entry or none.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    /// The URL without credentials (for people looking at the cache).
    pub url: String,
    pub etag: Option<String>,
    pub last_modified: Option<String>,
    pub sha256: String,
    pub size: u64,
    pub fetched_at_ms: u64,
}

pub struct Cache {
    dir: PathBuf,
    seq: AtomicU64,
}

/// A file that is removed when dropped unless kept.
pub struct TempPath {
    path: Option<PathBuf>,
}

impl TempPath {
    pub fn path(&self) -> &Path {
        self.path.as_deref().expect("temp path present until kept")
    }
    fn keep(mut self) -> PathBuf {
        self.path.take().expect("temp path present until kept")
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        if let Some(p) = self.path.take() {
            let _ = fs::remove_file(p);
        }
    }
}

pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

impl Cache {
    /// Creates the directory (mode 0700) and removes `.part` files a crash left behind.
    pub fn open(dir: &Path) -> io::Result<Cache> {
        fs::create_dir_all(dir)?;
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?;
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            if entry.file_name().to_string_lossy().ends_with(".part") {
                let _ = fs::remove_file(entry.path());
            }
        }
        Ok(Cache { dir: dir.to_path_buf(), seq: AtomicU64::new(0) })
    }

    /// The entry name for a URL (without credentials) fetched as `user`: entries fetched with
    /// different credentials are kept apart.
    pub fn key(url: &str, user: Option<&str>) -> String {
        let mut h = Sha256::new();
        h.update(url.as_bytes());
        h.update(b"\n");
        h.update(user.unwrap_or("").as_bytes());
        hex(&h.finalize())
    }

    pub fn data_path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.data"))
    }

    fn meta_path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.json"))
    }

    /// The entry, if complete: meta readable and the data file of the recorded size.
    pub fn load(&self, key: &str) -> Option<Meta> {
        let text = fs::read(self.meta_path(key)).ok()?;
        let meta: Meta = serde_json::from_slice(&text).ok()?;
        let len = fs::symlink_metadata(self.data_path(key)).ok().filter(|m| m.is_file())?.len();
        (len == meta.size).then_some(meta)
    }

    pub fn forget(&self, key: &str) {
        let _ = fs::remove_file(self.meta_path(key));
        let _ = fs::remove_file(self.data_path(key));
    }

    /// A new, empty temporary file in the cache directory.
    pub fn temp(&self, key: &str) -> io::Result<(TempPath, File)> {
        let n = self.seq.fetch_add(1, Ordering::Relaxed);
        let path = self.dir.join(format!("{key}.{}.{n}.part", std::process::id()));
        let file = OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path)?;
        Ok((TempPath { path: Some(path) }, file))
    }

    /// Makes `data` (complete and synced) the entry for `key`.
    pub fn commit(&self, key: &str, data: TempPath, meta: &Meta) -> io::Result<()> {
        match fs::remove_file(self.meta_path(key)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        fs::rename(data.path(), self.data_path(key))?;
        data.keep();
        let (tmp, mut file) = self.temp(key)?;
        file.write_all(&serde_json::to_vec_pretty(meta).map_err(io::Error::other)?)?;
        file.sync_all()?;
        fs::rename(tmp.path(), self.meta_path(key))?;
        tmp.keep();
        File::open(&self.dir)?.sync_all()
    }
}

/// The sha256 of a whole file (used to re-check a cache hit when the spec names a hash).
pub fn sha256_file(path: &Path) -> io::Result<String> {
    let mut file = File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            return Ok(hex(&h.finalize()));
        }
        h.update(&buf[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_complete_or_absent() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        let key = Cache::key("http://h/a.tar.gz", None);
        assert_ne!(key, Cache::key("http://h/a.tar.gz", Some("bob")));
        assert!(cache.load(&key).is_none());
        let (tmp, mut f) = cache.temp(&key).unwrap();
        f.write_all(b"hello").unwrap();
        let meta = Meta {
            url: "http://h/a.tar.gz".into(),
            etag: Some("\"x\"".into()),
            last_modified: None,
            sha256: sha256_file(tmp.path()).unwrap(),
            size: 5,
            fetched_at_ms: 0,
        };
        cache.commit(&key, tmp, &meta).unwrap();
        assert_eq!(cache.load(&key), Some(meta));
        // A data file of the wrong size (a crash mid-way in an older layout) is no entry.
        fs::write(cache.data_path(&key), b"hel").unwrap();
        assert!(cache.load(&key).is_none());
        // Leftover .part files go away on open.
        let (tmp, _) = cache.temp(&key).unwrap();
        let leftover = tmp.keep();
        Cache::open(dir.path()).unwrap();
        assert!(!leftover.exists());
    }
}
