//! The bearer token a client presents to a daemon's remote listener, read from a token file.
//! steward-sched (its cluster file's `token_file`) and `steward --token-file` read it the same
//! way.

use std::path::{Path, PathBuf};

/// A token file that could not be read, or that holds no token.
#[derive(Debug, thiserror::Error)]
#[error("{}: {message}", path.display())]
pub struct TokenFileError {
    pub path: PathBuf,
    pub message: String,
}

/// The token in `path`: the first word of its first line that is neither blank nor a `#`
/// comment, so a copy of a line of the daemon's tokens file (`TOKEN [read|write]`) works too.
pub fn read_token_file(path: &Path) -> Result<String, TokenFileError> {
    let err = |message: String| TokenFileError { path: path.to_path_buf(), message };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    let line = text.lines().map(str::trim).find(|l| !l.is_empty() && !l.starts_with('#'));
    match line.and_then(|l| l.split_whitespace().next()) {
        Some(token) => Ok(token.to_string()),
        None => Err(err("holds no token".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_word_of_the_first_line_that_is_not_a_comment() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "# the operator's\n\n  secret-0123456789 write\nother\n").unwrap();
        assert_eq!(read_token_file(&path).unwrap(), "secret-0123456789");
        std::fs::write(&path, "# nothing but comments\n\n").unwrap();
        let e = read_token_file(&path).unwrap_err().to_string();
        assert!(e.contains("token") && e.ends_with("holds no token"), "{e}");
        let e = read_token_file(&dir.path().join("missing")).unwrap_err().to_string();
        assert!(e.contains("missing") && e.contains("No such file"), "{e}");
    }
}
