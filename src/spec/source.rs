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

/// Reads `path` and cuts it into documents; a failure is said as "NAME: why".
pub fn documents_of(path: &Path) -> Result<Vec<Document>, String> {
    let source = Source::read(path)?;
    source.documents().map_err(|e| format!("{}: {e}", source.name))
}
