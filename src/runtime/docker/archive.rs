//! Files into a running container through the engine's archive API (seed 001's local file,
//! `steward cp`): a one-entry tar with the file's mode and owner, unpacked by dockerd at the
//! path's directory, through the container's own mounts.

use super::{Docker, DockerError};
use bollard::query_parameters as q;
use futures_util::StreamExt;

/// A container's `/etc/passwd` is read up to this size to find a user by name.
const MAX_PASSWD_BYTES: u64 = 1 << 20;

impl Docker {
    /// Writes `data` to absolute `path` in container `id` with `mode`, owned by `uid:gid`. The
    /// directory must exist in the container.
    pub async fn copy_into(
        &self,
        id: &str,
        path: &str,
        data: &[u8],
        mode: u32,
        (uid, gid): (u32, u32),
    ) -> Result<(), DockerError> {
        let (dir, name) = path.rsplit_once('/').ok_or_else(|| DockerError::Api {
            container: id.into(),
            message: format!("{path:?} is not an absolute path"),
        })?;
        let failed = |e: std::io::Error| DockerError::Api { container: id.into(), message: format!("tar: {e}") };
        let mut archive = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(mode);
        header.set_uid(uid.into());
        header.set_gid(gid.into());
        header.set_mtime(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()));
        header.set_cksum();
        archive.append_data(&mut header, name, data).map_err(failed)?;
        let tar = archive.into_inner().map_err(failed)?;
        let options = q::UploadToContainerOptions {
            path: if dir.is_empty() { "/".into() } else { dir.into() },
            // A directory by the file's name is not replaced by the file.
            no_overwrite_dir_non_dir: Some("true".into()),
            copy_uidgid: None,
        };
        self.client()?
            .upload_to_container(id, Some(options), bollard::body_full(tar.into()))
            .await
            .map_err(|e| self.error(id, e))
    }

    /// A user of container `id` by name, from its `/etc/passwd`: (uid, gid).
    pub async fn container_user(&self, id: &str, name: &str) -> Result<(u32, u32), DockerError> {
        let missing = |why: String| DockerError::Api { container: id.into(), message: format!("user {name:?}: {why}") };
        let options = q::DownloadFromContainerOptions { path: "/etc/passwd".into() };
        let mut stream = self.client()?.download_from_container(id, Some(options));
        let mut tar = Vec::new();
        while let Some(chunk) = stream.next().await {
            tar.extend_from_slice(&chunk.map_err(|e| self.error(id, e))?);
            if tar.len() as u64 > MAX_PASSWD_BYTES + 4096 {
                return Err(missing("/etc/passwd is too large to read".into()));
            }
        }
        let mut archive = tar::Archive::new(tar.as_slice());
        let mut passwd = String::new();
        let mut entries = archive.entries().map_err(|e| missing(format!("cannot read /etc/passwd: {e}")))?;
        if let Some(entry) = entries.next() {
            use std::io::Read;
            let entry = entry.map_err(|e| missing(format!("cannot read /etc/passwd: {e}")))?;
            entry.take(MAX_PASSWD_BYTES).read_to_string(&mut passwd).map_err(|e| missing(e.to_string()))?;
        }
        passwd_user(&passwd, name).ok_or_else(|| missing("not in the container's /etc/passwd".into()))
    }
}

/// `name`'s uid and gid in a passwd file's text.
fn passwd_user(passwd: &str, name: &str) -> Option<(u32, u32)> {
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        if fields.next()? != name {
            return None;
        }
        let _password = fields.next()?;
        Some((fields.next()?.parse().ok()?, fields.next()?.parse().ok()?))
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn passwd_lines_give_uid_and_gid() {
        let text = "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65533:nobody:/:/sbin/nologin\nbad:x:y:1\n";
        assert_eq!(super::passwd_user(text, "nobody"), Some((65534, 65533)));
        assert_eq!(super::passwd_user(text, "root"), Some((0, 0)));
        assert_eq!(super::passwd_user(text, "bad"), None);
        assert_eq!(super::passwd_user(text, "nob"), None);
    }
}
