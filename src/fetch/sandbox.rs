//! The extraction root: a fresh directory only root can enter, held open by descriptor. Entries
//! are created relative to it with `*at` calls, never through a symlink, and every rule about
//! what an archive may contain is enforced here, before anything is written:
//! no absolute paths, no `..`, no symlink that points outside, no hard link to anything but a
//! regular file extracted earlier, no device, fifo or socket, and nothing written below a
//! symlink the archive itself created.

use super::sys;
use std::collections::HashMap;
use std::ffi::CString;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};

/// Longest entry path and symlink target accepted (the kernel's PATH_MAX).
const MAX_PATH: usize = 4096;
/// Deepest entry accepted; keeps the number of open descriptors bounded.
const MAX_DEPTH: usize = 256;
/// Symlinks followed while checking where a chain of archive symlinks leads.
const MAX_LINK_HOPS: usize = 40;

/// Why an entry was refused or could not be written; the caller adds the URL.
#[derive(Debug)]
pub enum EntryError {
    /// The archive tried something not allowed (path escape, device file, ...).
    Refused { entry: String, reason: String },
    /// The archive is damaged (short data, bad checksum).
    Corrupt(String),
    /// A limit (size, count) was exceeded.
    Limit(String),
    /// Writing failed.
    Io { entry: String, error: io::Error },
}

pub fn refused(entry: &[u8], reason: impl Into<String>) -> EntryError {
    EntryError::Refused { entry: shown(entry), reason: reason.into() }
}

/// An entry path for messages.
pub fn shown(path: &[u8]) -> String {
    String::from_utf8_lossy(path).into_owned()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Dir,
    File,
    Symlink,
}

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_bytes: u64,
    pub max_entries: u64,
    /// Bytes decompressed per byte of archive.
    pub max_ratio: u64,
}

pub struct Sandbox {
    root: OwnedFd,
    uid: u32,
    gid: u32,
    chown: bool,
    limits: Limits,
    /// Size of the archive itself, for the ratio limit (0: no ratio limit, e.g. a plain file).
    archive_bytes: u64,
    /// Everything created, by normalized path (`a/b/c`).
    kinds: HashMap<Vec<u8>, Kind>,
    /// Symlinks created: path -> target, checked as a whole at the end.
    links: HashMap<Vec<u8>, Vec<u8>>,
    entries: u64,
    bytes: u64,
    /// The last parent directory opened, by path: archives list a directory's files together.
    last_parent: Option<(Vec<u8>, OwnedFd)>,
    buf: Vec<u8>,
}

/// A path split into its components, checked.
pub type Components = Vec<Vec<u8>>;

/// Splits an archive path into components: `.` and empty ones dropped; absolute paths, `..`,
/// NUL bytes and absurd lengths refused. An empty result is the root itself.
pub fn normalize(raw: &[u8]) -> Result<Components, String> {
    if raw.len() > MAX_PATH {
        return Err(format!("path longer than {MAX_PATH} bytes"));
    }
    if raw.first() == Some(&b'/') {
        return Err("absolute path".into());
    }
    if raw.contains(&0) {
        return Err("NUL byte in the path".into());
    }
    let mut out = Vec::new();
    for c in raw.split(|b| *b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => return Err("`..` in the path".into()),
            _ => out.push(c.to_vec()),
        }
    }
    if out.len() > MAX_DEPTH {
        return Err(format!("more than {MAX_DEPTH} levels deep"));
    }
    Ok(out)
}

fn join(comps: &[Vec<u8>]) -> Vec<u8> {
    comps.join(&b'/')
}

/// Permission bits an extracted entry may keep: setuid, setgid and sticky are dropped.
pub fn file_mode(mode: u32) -> u32 {
    mode & 0o777
}

/// Directories stay usable by their owner whatever the archive says.
pub fn dir_mode(mode: u32) -> u32 {
    (mode & 0o777) | 0o700
}

impl Sandbox {
    pub fn new(root: OwnedFd, uid: u32, gid: u32, limits: Limits) -> Sandbox {
        // Only root may give files away; an unprivileged Steward (tests, development) extracts
        // as itself when the owner is itself.
        let chown = !(nix::unistd::geteuid().as_raw() == uid && nix::unistd::getegid().as_raw() == gid);
        Sandbox {
            root,
            uid,
            gid,
            chown,
            limits,
            archive_bytes: 0,
            kinds: HashMap::new(),
            links: HashMap::new(),
            entries: 0,
            bytes: 0,
            last_parent: None,
            buf: vec![0; 256 * 1024],
        }
    }

    /// The archive is `bytes` long: what it decompresses to is held to `max_ratio` times that.
    pub fn set_archive_size(&mut self, bytes: u64) {
        self.archive_bytes = bytes;
    }

    fn count_entry(&mut self) -> Result<(), EntryError> {
        self.entries += 1;
        if self.entries > self.limits.max_entries {
            return Err(EntryError::Limit(format!(
                "the archive has more than {} entries (limit fetch_max_extracted_files)",
                self.limits.max_entries
            )));
        }
        Ok(())
    }

    /// Counts decompressed bytes (entries' data, and padding or trailing data read outside
    /// them) towards the size and ratio limits; checked as they come, so a bomb stops early.
    pub fn count_bytes(&mut self, n: u64) -> Result<(), EntryError> {
        self.bytes = self.bytes.saturating_add(n);
        if self.bytes > self.limits.max_bytes {
            return Err(EntryError::Limit(format!(
                "the archive decompresses to more than {} bytes (limit fetch_max_extracted_bytes)",
                self.limits.max_bytes
            )));
        }
        if self.archive_bytes > 0 && self.bytes > self.archive_bytes.saturating_mul(self.limits.max_ratio) {
            return Err(EntryError::Limit(format!(
                "the archive ({} bytes) decompresses to more than {} times its size (limit \
                 fetch_max_extraction_ratio)",
                self.archive_bytes, self.limits.max_ratio
            )));
        }
        Ok(())
    }

    /// Opens the parent directory of `comps`, creating missing directories, refusing to go
    /// through anything but a directory this extraction created.
    fn parent(&mut self, raw: &[u8], comps: &[Vec<u8>]) -> Result<(OwnedFd, CString), EntryError> {
        let (last, parents) = comps.split_last().ok_or_else(|| refused(raw, "empty path"))?;
        let name = sys::name(last).map_err(|_| refused(raw, "invalid name"))?;
        for i in 1..=parents.len() {
            let prefix = join(&parents[..i]);
            match self.kinds.get(&prefix) {
                Some(Kind::Dir) => {}
                Some(Kind::Symlink) => {
                    return Err(refused(
                        raw,
                        format!("its parent {} is a symlink created by the archive", shown(&prefix)),
                    ))
                }
                Some(Kind::File) => {
                    return Err(refused(raw, format!("its parent {} is not a directory", shown(&prefix))))
                }
                None => {
                    // A parent the archive never listed: create it as a plain directory.
                    let (dir, n) = self.parent(raw, &parents[..i])?;
                    self.count_entry()?;
                    self.make_dir(raw, &dir, &n, 0o755)?;
                    self.kinds.insert(prefix, Kind::Dir);
                }
            }
        }
        let key = join(parents);
        if let Some((k, fd)) = &self.last_parent {
            if *k == key {
                let fd = fd.try_clone().map_err(|e| io_err(raw, e))?;
                return Ok((fd, name));
            }
        }
        let mut dir = self.root.try_clone().map_err(|e| io_err(raw, e))?;
        for c in parents {
            let n = sys::name(c).map_err(|_| refused(raw, "invalid name"))?;
            dir = sys::open_dir(dir.as_fd(), &n).map_err(|e| io_err(raw, e))?;
        }
        self.last_parent = Some((key, dir.try_clone().map_err(|e| io_err(raw, e))?));
        Ok((dir, name))
    }

    fn make_dir(&self, raw: &[u8], dir: &OwnedFd, name: &CString, mode: u32) -> Result<(), EntryError> {
        sys::mkdir(dir.as_fd(), name, 0o700).map_err(|e| io_err(raw, e))?;
        let sub = sys::open_dir(dir.as_fd(), name).map_err(|e| io_err(raw, e))?;
        self.own(raw, &sub)?;
        sys::chmod_fd(sub.as_fd(), dir_mode(mode)).map_err(|e| io_err(raw, e))
    }

    fn own(&self, raw: &[u8], fd: &impl AsFd) -> Result<(), EntryError> {
        if self.chown {
            sys::chown_fd(fd.as_fd(), self.uid, self.gid).map_err(|e| io_err(raw, e))?;
        }
        Ok(())
    }

    /// Makes room for a new non-directory entry at `comps`: a file or symlink of the same name
    /// extracted earlier is replaced (the last one wins, as with tar); a directory is not.
    fn clear(&mut self, raw: &[u8], dir: &OwnedFd, name: &CString, key: &[u8]) -> Result<(), EntryError> {
        match self.kinds.get(key) {
            None => Ok(()),
            Some(Kind::Dir) => Err(refused(raw, "it would replace a directory extracted earlier")),
            Some(_) => {
                sys::unlink(dir.as_fd(), name, false).map_err(|e| io_err(raw, e))?;
                self.kinds.remove(key);
                self.links.remove(key);
                Ok(())
            }
        }
    }

    pub fn dir(&mut self, raw: &[u8], mode: u32) -> Result<(), EntryError> {
        let comps = normalize(raw).map_err(|r| refused(raw, r))?;
        if comps.is_empty() {
            return Ok(()); // `./`: the root itself
        }
        self.count_entry()?;
        let key = join(&comps);
        let (dir, name) = self.parent(raw, &comps)?;
        match self.kinds.get(&key) {
            Some(Kind::Dir) => {
                let sub = sys::open_dir(dir.as_fd(), &name).map_err(|e| io_err(raw, e))?;
                sys::chmod_fd(sub.as_fd(), dir_mode(mode)).map_err(|e| io_err(raw, e))
            }
            _ => {
                self.clear(raw, &dir, &name, &key)?;
                self.make_dir(raw, &dir, &name, mode)?;
                self.kinds.insert(key, Kind::Dir);
                Ok(())
            }
        }
    }

    /// A regular file: exactly `size` bytes from `data`, then owner, mode and mtime.
    pub fn file(
        &mut self,
        raw: &[u8],
        mode: u32,
        mtime: Option<i64>,
        size: u64,
        data: &mut dyn Read,
    ) -> Result<(), EntryError> {
        let comps = normalize(raw).map_err(|r| refused(raw, r))?;
        if comps.is_empty() {
            return Err(refused(raw, "a file entry with no name"));
        }
        self.count_entry()?;
        let key = join(&comps);
        let (dir, name) = self.parent(raw, &comps)?;
        self.clear(raw, &dir, &name, &key)?;
        let mut file = sys::create_file(dir.as_fd(), &name).map_err(|e| io_err(raw, e))?;
        self.kinds.insert(key, Kind::File);
        let mut buf = std::mem::take(&mut self.buf);
        let copied = self.copy(raw, data, &mut file, &mut buf);
        self.buf = buf;
        let n = copied?;
        if n != size {
            return Err(EntryError::Corrupt(format!(
                "truncated archive: entry {} has {n} of its {size} bytes",
                shown(raw)
            )));
        }
        self.own(raw, &file)?;
        sys::chmod_fd(file.as_fd(), file_mode(mode)).map_err(|e| io_err(raw, e))?;
        if let Some(t) = mtime {
            sys::set_mtime(file.as_fd(), t).map_err(|e| io_err(raw, e))?;
        }
        Ok(())
    }

    fn copy(
        &mut self,
        raw: &[u8],
        data: &mut dyn Read,
        out: &mut std::fs::File,
        buf: &mut [u8],
    ) -> Result<u64, EntryError> {
        let mut n = 0u64;
        loop {
            let got = match data.read(buf) {
                Ok(0) => return Ok(n),
                Ok(got) => got,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(EntryError::Corrupt(format!("reading entry {}: {}", shown(raw), chain(&e)))),
            };
            self.count_bytes(got as u64)?;
            out.write_all(&buf[..got]).map_err(|e| io_err(raw, e))?;
            n += got as u64;
        }
    }

    pub fn symlink(&mut self, raw: &[u8], target: &[u8]) -> Result<(), EntryError> {
        let comps = normalize(raw).map_err(|r| refused(raw, r))?;
        if comps.is_empty() {
            return Err(refused(raw, "a symlink with no name"));
        }
        if target.is_empty() || target.len() > MAX_PATH || target.contains(&0) {
            return Err(refused(raw, "invalid symlink target"));
        }
        if target.first() == Some(&b'/') {
            return Err(refused(raw, format!("symlink to an absolute path {}", shown(target))));
        }
        // Lexically, from the link's own directory.
        let mut at: Vec<&[u8]> = comps[..comps.len() - 1].iter().map(|c| c.as_slice()).collect();
        for c in target.split(|b| *b == b'/') {
            match c {
                b"" | b"." => {}
                b".." => {
                    if at.pop().is_none() {
                        return Err(refused(raw, format!("symlink target {} points outside", shown(target))));
                    }
                }
                _ => at.push(c),
            }
        }
        self.count_entry()?;
        let key = join(&comps);
        let (dir, name) = self.parent(raw, &comps)?;
        self.clear(raw, &dir, &name, &key)?;
        let t = CString::new(target).map_err(|_| refused(raw, "invalid symlink target"))?;
        sys::symlink(&t, dir.as_fd(), &name).map_err(|e| io_err(raw, e))?;
        if self.chown {
            sys::chown_at(dir.as_fd(), &name, self.uid, self.gid).map_err(|e| io_err(raw, e))?;
        }
        self.kinds.insert(key.clone(), Kind::Symlink);
        self.links.insert(key, target.to_vec());
        Ok(())
    }

    /// A hard link to `target`, an archive path that must name a regular file extracted earlier.
    pub fn hard_link(&mut self, raw: &[u8], target: &[u8]) -> Result<(), EntryError> {
        let comps = normalize(raw).map_err(|r| refused(raw, r))?;
        if comps.is_empty() {
            return Err(refused(raw, "a hard link with no name"));
        }
        let tcomps = normalize(target).map_err(|r| refused(raw, format!("hard link target {}: {r}", shown(target))))?;
        let tkey = join(&tcomps);
        if self.kinds.get(&tkey) != Some(&Kind::File) {
            return Err(refused(
                raw,
                format!("hard link target {} is not a regular file extracted earlier", shown(target)),
            ));
        }
        self.count_entry()?;
        let key = join(&comps);
        if key == tkey {
            return Ok(()); // a link to itself: nothing to do
        }
        let (tdir, tname) = self.parent(target, &tcomps)?;
        let (dir, name) = self.parent(raw, &comps)?;
        self.clear(raw, &dir, &name, &key)?;
        sys::link(tdir.as_fd(), &tname, dir.as_fd(), &name).map_err(|e| io_err(raw, e))?;
        self.kinds.insert(key, Kind::File);
        Ok(())
    }

    /// After the last entry: follows every chain of archive symlinks the way the kernel would
    /// and refuses the archive if one leads outside the root (a link can be lexically inside
    /// yet escape through another link's `..`).
    pub fn check_links(&self) -> Result<(), EntryError> {
        for (path, target) in &self.links {
            let comps = normalize(path).unwrap_or_default();
            let mut at: Vec<Vec<u8>> = comps[..comps.len().saturating_sub(1)].to_vec();
            let mut rest: std::collections::VecDeque<Vec<u8>> =
                target.split(|b| *b == b'/').map(|c| c.to_vec()).collect();
            let mut hops = 0;
            while let Some(c) = rest.pop_front() {
                match c.as_slice() {
                    b"" | b"." => {}
                    b".." => {
                        if at.pop().is_none() {
                            return Err(refused(
                                path,
                                format!("symlink target {} leads outside through other symlinks", shown(target)),
                            ));
                        }
                    }
                    _ => {
                        at.push(c);
                        if let Some(next) = self.links.get(&join(&at)) {
                            hops += 1;
                            if hops > MAX_LINK_HOPS {
                                break; // a loop: the kernel answers ELOOP, nothing escapes
                            }
                            at.pop();
                            if next.first() == Some(&b'/') {
                                return Err(refused(path, "symlink chain reaches an absolute path"));
                            }
                            for c in next.split(|b| *b == b'/').rev() {
                                rest.push_front(c.to_vec());
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

fn io_err(raw: &[u8], error: io::Error) -> EntryError {
    EntryError::Io { entry: shown(raw), error }
}

/// An error with its sources, for messages.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_refuses_escapes() {
        assert!(normalize(b"/etc/passwd").is_err());
        assert!(normalize(b"a/../../b").is_err());
        assert!(normalize(b"..").is_err());
        assert_eq!(normalize(b"./a//b/.").unwrap(), vec![b"a".to_vec(), b"b".to_vec()]);
        assert!(normalize(b"./").unwrap().is_empty());
        assert!(normalize(&vec![b'a'; 5000]).is_err());
    }

    #[test]
    fn modes_lose_special_bits() {
        assert_eq!(file_mode(0o4755), 0o755);
        assert_eq!(file_mode(0o2644), 0o644);
        assert_eq!(dir_mode(0o1000), 0o700);
        assert_eq!(dir_mode(0o555), 0o755);
    }

    fn sandbox() -> (tempfile::TempDir, Sandbox) {
        let dir = tempfile::tempdir().unwrap();
        let fd: OwnedFd = std::fs::File::open(dir.path()).unwrap().into();
        let me = (nix::unistd::geteuid().as_raw(), nix::unistd::getegid().as_raw());
        (dir, Sandbox::new(fd, me.0, me.1, Limits { max_bytes: 1 << 20, max_entries: 100, max_ratio: 1000 }))
    }

    #[test]
    fn symlink_chains_that_escape_are_refused() {
        let (_d, mut s) = sandbox();
        s.dir(b"a/b", 0o755).unwrap();
        s.symlink(b"a/b/l1", b"../..").unwrap();
        s.symlink(b"ok", b"a/b/l1/a").unwrap();
        assert!(s.check_links().is_ok());
        // Lexically inside (a/b/l1/.. = a/b), but l1 is the root, whose parent is outside.
        s.symlink(b"l2", b"a/b/l1/..").unwrap();
        assert!(s.check_links().is_err());
    }

    #[test]
    fn writes_below_archive_symlinks_are_refused() {
        let (_d, mut s) = sandbox();
        s.symlink(b"l", b"a").unwrap();
        let err = s.file(b"l/f", 0o644, None, 0, &mut io::empty()).unwrap_err();
        assert!(matches!(err, EntryError::Refused { .. }), "{err:?}");
    }

    #[test]
    fn limits_hold() {
        let (_d, mut s) = sandbox();
        let data = vec![0u8; 2 << 20];
        let err = s.file(b"big", 0o644, None, data.len() as u64, &mut data.as_slice()).unwrap_err();
        assert!(matches!(err, EntryError::Limit(_)), "{err:?}");
    }
}
