//! Archive formats: which one a URL names, and reading each into a [`Sandbox`].

use super::sandbox::{chain, refused, shown, EntryError, Sandbox};
use std::cell::RefCell;
use std::fs::File;
use std::io::{self, BufReader, Read, Seek};
use std::rc::Rc;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Format {
    TarGz,
    TarXz,
    Tar,
    Zip,
    /// Not an archive: copied into the output directory under this name.
    Plain(String),
}

impl Format {
    /// By the extension of the URL's last path segment (already percent-decoded).
    pub fn of(file_name: &str) -> Format {
        let lower = file_name.to_ascii_lowercase();
        if lower.ends_with(".tar.gz") || lower.ends_with(".tgz") {
            Format::TarGz
        } else if lower.ends_with(".tar.xz") || lower.ends_with(".txz") {
            Format::TarXz
        } else if lower.ends_with(".tar") {
            Format::Tar
        } else if lower.ends_with(".zip") {
            Format::Zip
        } else {
            Format::Plain(file_name.to_string())
        }
    }

    fn compression(&self) -> &'static str {
        match self {
            Format::TarGz => "gzip",
            Format::TarXz => "xz",
            _ => "tar",
        }
    }
}

/// Remembers the first error of the decompressor, so a failure deep inside the tar reader can
/// be reported as what it is ("truncated gzip data") rather than as a tar problem.
struct Watched<R> {
    inner: R,
    error: Rc<RefCell<Option<io::Error>>>,
    /// Bytes handed to the tar reader: tells a missing end-of-archive marker apart.
    read: Rc<RefCell<u64>>,
}

impl<R: Read> Read for Watched<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.inner.read(buf) {
            Ok(n) => {
                *self.read.borrow_mut() += n as u64;
                Ok(n)
            }
            Err(e) => {
                if e.kind() != io::ErrorKind::Interrupted {
                    let mut slot = self.error.borrow_mut();
                    if slot.is_none() {
                        *slot = Some(io::Error::new(e.kind(), e.to_string()));
                    }
                }
                Err(e)
            }
        }
    }
}

/// Extracts `file` (the cached download) into the sandbox.
pub fn extract(format: &Format, mut file: File, sandbox: &mut Sandbox) -> Result<(), EntryError> {
    file.rewind().map_err(|e| EntryError::Corrupt(format!("rewinding the download: {e}")))?;
    if !matches!(format, Format::Plain(_)) {
        let size = file.metadata().map_err(|e| EntryError::Corrupt(format!("reading the download: {e}")))?.len();
        sandbox.set_archive_size(size.max(1));
    }
    match format {
        Format::TarGz => {
            let d = flate2::read::MultiGzDecoder::new(BufReader::with_capacity(256 * 1024, file));
            tar(format, d, sandbox)
        }
        Format::TarXz => {
            let d = xz2::read::XzDecoder::new_multi_decoder(BufReader::with_capacity(256 * 1024, file));
            tar(format, d, sandbox)
        }
        Format::Tar => tar(format, BufReader::with_capacity(256 * 1024, file), sandbox),
        Format::Zip => zip(file, sandbox),
        Format::Plain(name) => {
            let size = file.metadata().map_err(|e| EntryError::Corrupt(format!("reading the download: {e}")))?.len();
            sandbox.file(name.as_bytes(), 0o644, None, size, &mut file)
        }
    }
}

fn decoder_failure(format: &Format, e: &io::Error) -> EntryError {
    let what = format.compression();
    if e.kind() == io::ErrorKind::UnexpectedEof {
        EntryError::Corrupt(format!("truncated {what} data ({e})"))
    } else {
        EntryError::Corrupt(format!("corrupt {what} data: {e}"))
    }
}

fn tar<R: Read>(format: &Format, reader: R, sandbox: &mut Sandbox) -> Result<(), EntryError> {
    let error = Rc::new(RefCell::new(None));
    let read = Rc::new(RefCell::new(0u64));
    let mut watched = Watched { inner: reader, error: error.clone(), read: read.clone() };
    let result = tar_entries(&mut watched, sandbox);
    // Whatever the tar reader made of it, a decompressor error is the real story.
    if let Some(e) = error.borrow_mut().take() {
        return Err(decoder_failure(format, &e));
    }
    let end_of_last = result?;
    if *read.borrow() <= end_of_last {
        // The reader met the end of the data where the next header (or the end-of-archive
        // marker) should have been: the archive was cut at an entry boundary.
        return Err(EntryError::Corrupt(format!("truncated {} data: no end-of-archive marker", format.compression())));
    }
    // Read to the very end, so the gzip/xz trailer (length and checksum) is verified too.
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match watched.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => sandbox.count_bytes(n as u64)?,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(decoder_failure(format, &e)),
        }
    }
    Ok(())
}

/// Extracts every entry; returns the offset just past the last entry's data.
fn tar_entries<R: Read>(reader: &mut R, sandbox: &mut Sandbox) -> Result<u64, EntryError> {
    use tar::EntryType as T;
    let mut archive = tar::Archive::new(reader);
    let corrupt = |e: io::Error| {
        let text = e.to_string();
        let short = text.contains("unexpected EOF") || text.contains("failed to read entire block");
        if e.kind() == io::ErrorKind::UnexpectedEof || short {
            EntryError::Corrupt(format!("truncated tar data: {}", chain(&e)))
        } else {
            EntryError::Corrupt(format!("bad tar data: {}", chain(&e)))
        }
    };
    let mut end = 0u64;
    for entry in archive.entries().map_err(corrupt)? {
        let mut entry = entry.map_err(corrupt)?;
        let path = entry.path_bytes().into_owned();
        let header = entry.header();
        let kind = header.entry_type();
        let mode = header.mode().map_err(corrupt)?;
        let mtime = header.mtime().ok().and_then(|t| i64::try_from(t).ok());
        let size = entry.size();
        end = entry.raw_file_position() + size.div_ceil(512) * 512;
        match kind {
            // Old (v7) archives mark directories only by the trailing slash.
            T::Directory => sandbox.dir(&path, mode)?,
            T::Regular if path.ends_with(b"/") && size == 0 => sandbox.dir(&path, mode)?,
            T::Regular | T::Continuous => sandbox.file(&path, mode, mtime, size, &mut entry)?,
            T::Symlink => {
                let target = entry.link_name_bytes().ok_or_else(|| refused(&path, "symlink without a target"))?;
                sandbox.symlink(&path, &target)?
            }
            T::Link => {
                let target = entry.link_name_bytes().ok_or_else(|| refused(&path, "hard link without a target"))?;
                sandbox.hard_link(&path, &target)?
            }
            T::XGlobalHeader => {}
            T::Char | T::Block => return Err(refused(&path, "device files are not allowed")),
            T::Fifo => return Err(refused(&path, "fifos are not allowed")),
            T::GNUSparse => return Err(refused(&path, "sparse files are not supported")),
            other => return Err(refused(&path, format!("unsupported tar entry type {:?}", other.as_byte() as char))),
        }
    }
    sandbox.check_links()?;
    Ok(end)
}

const S_IFMT: u32 = 0o170000;
const S_IFREG: u32 = 0o100000;
const S_IFDIR: u32 = 0o040000;
const S_IFLNK: u32 = 0o120000;

fn zip(file: File, sandbox: &mut Sandbox) -> Result<(), EntryError> {
    let corrupt = |e: zip::result::ZipError| EntryError::Corrupt(format!("bad zip data: {}", chain(&e)));
    let mut archive = zip::ZipArchive::new(BufReader::with_capacity(256 * 1024, file)).map_err(corrupt)?;
    for i in 0..archive.len() {
        let mut f = archive.by_index(i).map_err(corrupt)?;
        let path = f.name().as_bytes().to_vec();
        if f.encrypted() {
            return Err(refused(&path, "encrypted zip entries are not supported"));
        }
        let unix = f.unix_mode();
        let kind = unix.map(|m| m & S_IFMT).filter(|t| *t != 0);
        let perm = unix.map(|m| m & 0o7777);
        if f.is_dir() || kind == Some(S_IFDIR) {
            sandbox.dir(&path, perm.unwrap_or(0o755))?;
        } else if kind == Some(S_IFLNK) {
            if f.size() > 4096 {
                return Err(refused(&path, "symlink target too long"));
            }
            let mut target = Vec::new();
            f.read_to_end(&mut target)
                .map_err(|e| EntryError::Corrupt(format!("reading entry {}: {}", shown(&path), chain(&e))))?;
            sandbox.symlink(&path, &target)?;
        } else if kind.is_none() || kind == Some(S_IFREG) {
            let size = f.size();
            sandbox.file(&path, perm.unwrap_or(0o644), None, size, &mut f)?;
        } else {
            return Err(refused(&path, "device files, fifos and sockets are not allowed"));
        }
    }
    sandbox.check_links()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_by_extension() {
        assert_eq!(Format::of("app-1.0.tar.gz"), Format::TarGz);
        assert_eq!(Format::of("APP.TGZ"), Format::TarGz);
        assert_eq!(Format::of("a.tar.xz"), Format::TarXz);
        assert_eq!(Format::of("a.txz"), Format::TarXz);
        assert_eq!(Format::of("a.tar"), Format::Tar);
        assert_eq!(Format::of("a.zip"), Format::Zip);
        assert_eq!(Format::of("start.sh"), Format::Plain("start.sh".into()));
        assert_eq!(Format::of("a.gz"), Format::Plain("a.gz".into()));
    }
}
