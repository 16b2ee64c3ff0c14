//! Spec errors: every mistake carries the field path it was found at, so a user
//! fixing a pasted BCS file can go straight to it.

use std::fmt;

/// One mistake in a spec, e.g. `spec.template.spec.processes[0].pidFile: ...`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SpecError {
    /// Field path in the file's own spelling (`metadata.name`, `...ports[1].hostPort`).
    /// Empty for mistakes about the whole document (syntax errors).
    pub path: String,
    pub message: String,
}

impl SpecError {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        SpecError { path: path.into(), message: message.into() }
    }
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// All mistakes found in one spec, in document order.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct SpecErrors(pub Vec<SpecError>);

impl fmt::Display for SpecErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.len();
        write!(f, "{n} error{}", if n == 1 { "" } else { "s" })?;
        for e in &self.0 {
            write!(f, "\n  {e}")?;
        }
        Ok(())
    }
}

impl SpecErrors {
    pub fn into_result<T>(self, value: T) -> Result<T, SpecErrors> {
        if self.0.is_empty() {
            Ok(value)
        } else {
            Err(self)
        }
    }
}

/// Collects errors while walking a spec; paths are built with [`Path`].
#[derive(Debug, Default)]
pub struct Errors(pub Vec<SpecError>);

impl Errors {
    pub fn add(&mut self, path: &Path, message: impl Into<String>) {
        self.0.push(SpecError::new(path.to_string(), message));
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn finish<T>(self, value: T) -> Result<T, SpecErrors> {
        SpecErrors(self.0).into_result(value)
    }
}

/// A field path under construction: `Path::root().field("spec").index(0)`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Path(String);

impl Path {
    pub fn root() -> Self {
        Path(String::new())
    }
    pub fn field(&self, name: &str) -> Path {
        if self.0.is_empty() {
            Path(name.to_string())
        } else {
            Path(format!("{}.{name}", self.0))
        }
    }
    pub fn index(&self, i: usize) -> Path {
        Path(format!("{}[{i}]", self.0))
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The closest of `candidates` to `word`, if it is close enough to be a likely typo.
pub fn did_you_mean<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let lower = word.to_ascii_lowercase();
    candidates
        .into_iter()
        .map(|c| (edit_distance(&lower, &c.to_ascii_lowercase()), c))
        .filter(|(d, c)| *d <= 2.max(c.len() / 4))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_render_like_the_file() {
        let p = Path::root().field("spec").field("processes").index(2).field("pidFile");
        assert_eq!(p.to_string(), "spec.processes[2].pidFile");
    }

    #[test]
    fn suggestions_catch_typos_only() {
        let fields = ["startCmd", "stopCmd", "startGracePeriod"];
        assert_eq!(did_you_mean("stratCmd", fields), Some("startCmd"));
        assert_eq!(did_you_mean("startgraceperiod", fields), Some("startGracePeriod"));
        assert_eq!(did_you_mean("banana", fields), None);
    }

    #[test]
    fn error_list_display_counts_and_lists() {
        let errs = SpecErrors(vec![SpecError::new("a.b", "bad"), SpecError::new("", "syntax")]);
        assert_eq!(errs.to_string(), "2 errors\n  a.b: bad\n  syntax");
    }
}
