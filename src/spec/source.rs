//! A spec file as a command line names it — a path, or `-` for standard input — read once and
//! cut into its documents: one for JSON and TOML, each of a YAML stream's in order. Every
//! command that reads spec files (`apply`, `validate`, `render`, `hook template apply`,
//! steward-sched's `deploy` and `depend apply`) reads them through here, so each takes the three
//! syntaxes, stdin and several documents alike, and names a mistake the same way.

use super::yaml::YamlDocument;
use super::{Format, SpecError, SpecErrors};
use serde_json::Value;
use std::io::Read;
use std::path::Path;

/// The path that means standard input.
pub const STDIN: &str = "-";

/// A file's text, read, and the syntax it is in.
#[derive(Debug, Clone)]
pub struct Source {
    /// How it is named in what is said: the path as given, or "stdin".
    pub name: String,
    pub text: String,
    pub format: Format,
}

/// One document of a [`Source`].
#[derive(Debug, Clone)]
pub struct Document {
    /// The source's name, with "(document N)" when the source holds several.
    pub label: String,
    pub value: Value,
    /// A YAML document's positions, for the line and column of a later mistake.
    located: Option<YamlDocument>,
    /// What is sent to a daemon: the text as written, or a YAML document as JSON.
    body: (String, Format),
}

impl Source {
    /// Reads `path` (`-`: standard input, its syntax told by its content); an error names it.
    pub fn read(path: &Path) -> Result<Source, String> {
        if path.as_os_str() == STDIN {
            let mut text = String::new();
            std::io::stdin().read_to_string(&mut text).map_err(|e| format!("cannot read stdin: {e}"))?;
            let format = Format::sniff(&text);
            return Ok(Source { name: "stdin".into(), text, format });
        }
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Ok(Source { name: path.display().to_string(), format: Format::for_path(path, &text), text })
    }

    /// Its documents in order; a syntax error, or a source without any, is an error.
    pub fn documents(&self) -> Result<Vec<Document>, SpecErrors> {
        let parsed = super::parse_documents(&self.text, self.format)?;
        if parsed.is_empty() {
            return Err(SpecErrors(vec![SpecError::new("", "no document in it")]));
        }
        let several = parsed.len() > 1;
        Ok(parsed
            .into_iter()
            .enumerate()
            .map(|(i, (value, located))| Document {
                label: if several { format!("{} (document {})", self.name, i + 1) } else { self.name.clone() },
                body: match self.format {
                    Format::Yaml => (value.to_string(), Format::Json),
                    format => (self.text.clone(), format),
                },
                value,
                located,
            })
            .collect())
    }
}

impl Document {
    /// A document that came as JSON (an API request's body): `label` names it in mistakes.
    pub fn of_value(label: &str, value: Value) -> Document {
        Document { label: label.to_string(), body: (value.to_string(), Format::Json), value, located: None }
    }

    /// `errors` with the line and column of each field, where the document knows them.
    pub fn locate(&self, errors: SpecErrors) -> SpecErrors {
        match &self.located {
            Some(y) => y.locate(errors),
            None => errors,
        }
    }

    /// The text to send a daemon and its syntax.
    pub fn body(&self) -> (&str, Format) {
        (&self.body.0, self.body.1)
    }

    /// Parses and validates it as a process spec against `roots`; mistakes located.
    pub fn spec(&self, roots: &super::Roots) -> Result<super::ProcessSpec, SpecErrors> {
        super::from_document(&self.value, roots).map_err(|e| self.locate(e))
    }
}

/// Why the documents of a file were not used.
#[derive(Debug)]
pub enum Refused {
    /// The file could not be read: the message names it.
    Unreadable(String),
    /// Each document that failed (its label) with its mistakes, located; a syntax error is the
    /// file's.
    Invalid(Vec<(String, SpecErrors)>),
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Unreadable(why) => f.write_str(why),
            Refused::Invalid(failed) => {
                let lines: Vec<String> = failed.iter().map(|(label, errors)| format!("{label}: {errors}")).collect();
                f.write_str(&lines.join("\n"))
            }
        }
    }
}

/// The documents of `path` (`-`: stdin), each with what `check` made of it; when any fails,
/// every failing one is named and none is used: "all validated before any is applied".
pub fn read_checked<T>(
    path: &Path,
    check: impl Fn(&Value) -> Result<T, SpecErrors>,
) -> Result<Vec<(Document, T)>, Refused> {
    let source = Source::read(path).map_err(Refused::Unreadable)?;
    let documents = source.documents().map_err(|errors| Refused::Invalid(vec![(source.name.clone(), errors)]))?;
    let mut checked = Vec::with_capacity(documents.len());
    let mut failed = Vec::new();
    for doc in documents {
        match check(&doc.value) {
            Ok(t) => checked.push((doc, t)),
            Err(errors) => failed.push((doc.label.clone(), doc.locate(errors))),
        }
    }
    if failed.is_empty() {
        Ok(checked)
    } else {
        Err(Refused::Invalid(failed))
    }
}
