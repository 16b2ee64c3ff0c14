//! YAML documents (seeds 003 and 004 are written in it) read into the same document tree as JSON
//! and TOML, each value's position kept by its field path so that a mistake found later (by
//! decoding or validation, which know only paths) can name its line and column too.
//!
//! Built on saphyr-parser's events: YAML 1.2, its core schema for plain scalars (`null`, `~`,
//! booleans, decimal, octal `0o` and hex `0x` integers, floats), anchors and aliases, and
//! several documents in one stream (`---`).

use super::{SpecError, SpecErrors};
use saphyr_parser::{Event, Parser, ScalarStyle, Span};
use serde_json::{Map, Number, Value};
use std::collections::BTreeMap;

/// One document of a YAML stream, with where each of its values starts.
#[derive(Debug, Clone, PartialEq)]
pub struct YamlDocument {
    pub value: Value,
    /// Field path (`spec.template.spec.containers[0].image`) → 1-based line and column: a
    /// mapping's value at its key, an item at its start.
    positions: BTreeMap<String, (usize, usize)>,
}

impl YamlDocument {
    /// Where the value at `path` (or, when it is absent, its nearest enclosing one) was written.
    pub fn position(&self, path: &str) -> Option<(usize, usize)> {
        let mut path = path;
        loop {
            if let Some(at) = self.positions.get(path) {
                return Some(*at);
            }
            let cut = path.rfind(['.', '['])?;
            path = &path[..cut];
        }
    }

    /// `errors`, each message followed by the line and column of its field.
    pub fn locate(&self, errors: SpecErrors) -> SpecErrors {
        let located = errors.0.into_iter().map(|e| match self.position(&e.path).filter(|_| !e.path.is_empty()) {
            Some((line, column)) => SpecError::new(e.path, format!("{} (line {line}, column {column})", e.message)),
            None => e,
        });
        SpecErrors(located.collect())
    }
}

/// A mapping or sequence being read, with its path and anchor.
enum Open {
    Mapping { map: Map<String, Value>, key: Option<(String, (usize, usize))>, path: String, anchor: usize },
    Sequence { items: Vec<Value>, path: String, anchor: usize },
}

/// Every document of `text`, in order (empty ones left out). A syntax error names its line and
/// column.
pub fn parse(text: &str) -> Result<Vec<YamlDocument>, SpecErrors> {
    let syntax = |message: String| SpecErrors(vec![SpecError::new("", message)]);
    let mut documents = Vec::new();
    let mut reader = Reader::default();
    for event in Parser::new_from_str(text) {
        let (event, span) = event.map_err(|e| {
            let m = e.marker();
            syntax(format!("YAML syntax error at line {} column {}: {}", m.line(), m.col() + 1, e.info()))
        })?;
        if let Some(doc) = reader.take(event, span).map_err(|e| SpecErrors(vec![e]))? {
            if !doc.value.is_null() {
                documents.push(doc);
            }
        }
    }
    Ok(documents)
}

/// Folds the parser's events into documents.
#[derive(Default)]
struct Reader {
    open: Vec<Open>,
    anchors: BTreeMap<usize, Value>,
    positions: BTreeMap<String, (usize, usize)>,
    root: Option<Value>,
}

impl Reader {
    /// The next event; a document when one ends.
    fn take(&mut self, event: Event<'_>, span: Span) -> Result<Option<YamlDocument>, SpecError> {
        let at = (span.start.line(), span.start.col() + 1);
        match event {
            Event::DocumentStart(_) => {
                self.anchors.clear();
                self.positions.clear();
                self.root = None;
            }
            Event::DocumentEnd => {
                let value = self.root.take().unwrap_or(Value::Null);
                return Ok(Some(YamlDocument { value, positions: std::mem::take(&mut self.positions) }));
            }
            Event::Scalar(text, style, anchor, tag) => {
                let key_wanted = matches!(self.open.last(), Some(Open::Mapping { key: None, .. }));
                if key_wanted {
                    if let Some(Open::Mapping { key, .. }) = self.open.last_mut() {
                        *key = Some((text.into_owned(), at));
                    }
                    return Ok(None);
                }
                let plain = style == ScalarStyle::Plain;
                let tag = tag.map(|t| t.suffix.clone());
                let value = scalar(&text, plain, tag.as_deref());
                self.value(value, anchor, at)?;
            }
            Event::Alias(id) => {
                let value = self.anchors.get(&id).cloned().unwrap_or(Value::Null);
                self.value(value, 0, at)?;
            }
            Event::MappingStart(anchor, _) => {
                let path = self.child_path(at)?;
                self.open.push(Open::Mapping { map: Map::new(), key: None, path, anchor });
            }
            Event::SequenceStart(anchor, _) => {
                let path = self.child_path(at)?;
                self.open.push(Open::Sequence { items: Vec::new(), path, anchor });
            }
            Event::MappingEnd | Event::SequenceEnd => {
                let (value, anchor) = match self.open.pop() {
                    Some(Open::Mapping { map, anchor, .. }) => (Value::Object(map), anchor),
                    Some(Open::Sequence { items, anchor, .. }) => (Value::Array(items), anchor),
                    None => return Ok(None),
                };
                if anchor != 0 {
                    self.anchors.insert(anchor, value.clone());
                }
                self.place(value)?;
            }
            Event::StreamStart | Event::StreamEnd | Event::Nothing => {}
        }
        Ok(None)
    }

    /// The path of the value about to start, recorded at `at` (a mapping's value at its key).
    fn child_path(&mut self, at: (usize, usize)) -> Result<String, SpecError> {
        let (path, at) = match self.open.last() {
            None => (String::new(), at),
            Some(Open::Sequence { items, path, .. }) => (format!("{path}[{}]", items.len()), at),
            Some(Open::Mapping { key: Some((key, key_at)), path, .. }) => {
                (if path.is_empty() { key.clone() } else { format!("{path}.{key}") }, *key_at)
            }
            Some(Open::Mapping { key: None, path, .. }) => {
                return Err(SpecError::new(path.clone(), "a mapping or sequence as a key is not supported"));
            }
        };
        self.positions.entry(path.clone()).or_insert(at);
        Ok(path)
    }

    /// A finished scalar or alias.
    fn value(&mut self, value: Value, anchor: usize, at: (usize, usize)) -> Result<(), SpecError> {
        self.child_path(at)?;
        if anchor != 0 {
            self.anchors.insert(anchor, value.clone());
        }
        self.place(value)
    }

    /// Puts a finished value into what encloses it.
    fn place(&mut self, value: Value) -> Result<(), SpecError> {
        match self.open.last_mut() {
            None => self.root = Some(value),
            Some(Open::Sequence { items, .. }) => items.push(value),
            Some(Open::Mapping { map, key, path, .. }) => {
                let (name, _) = key.take().unwrap_or_default();
                if map.contains_key(&name) {
                    let at = if path.is_empty() { name.clone() } else { format!("{path}.{name}") };
                    return Err(SpecError::new(at, "given twice in one mapping"));
                }
                map.insert(name, value);
            }
        }
        Ok(())
    }
}

/// A scalar by YAML 1.2's core schema: only a plain one (or one tagged so) is anything but a
/// string. `.inf` and `.nan` stay strings: JSON has no such numbers.
fn scalar(text: &str, plain: bool, tag: Option<&str>) -> Value {
    match tag {
        Some("str") => return Value::String(text.to_string()),
        Some("null") => return Value::Null,
        Some("bool" | "int" | "float") => {}
        _ if !plain => return Value::String(text.to_string()),
        _ => {}
    }
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Value::Null,
        "true" | "True" | "TRUE" => return Value::Bool(true),
        "false" | "False" | "FALSE" => return Value::Bool(false),
        _ => {}
    }
    if let Some(n) = integer(text) {
        return Value::Number(n.into());
    }
    let decimal = |t: &str| {
        let digits = t.trim_start_matches(['-', '+']);
        !digits.is_empty()
            && digits.starts_with(|c: char| c.is_ascii_digit() || c == '.')
            && digits.chars().all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '-' | '+'))
    };
    if decimal(text) {
        if let Some(n) = text.parse::<f64>().ok().and_then(Number::from_f64) {
            return Value::Number(n);
        }
    }
    Value::String(text.to_string())
}

/// A decimal, `0o` octal or `0x` hex integer.
fn integer(text: &str) -> Option<i64> {
    let (sign, digits) = match text.strip_prefix('-') {
        Some(rest) => (-1, rest),
        None => (1, text.strip_prefix('+').unwrap_or(text)),
    };
    let value = if let Some(hex) = digits.strip_prefix("0x") {
        i64::from_str_radix(hex, 16).ok()?
    } else if let Some(octal) = digits.strip_prefix("0o") {
        i64::from_str_radix(octal, 8).ok()?
    } else if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        digits.parse().ok()?
    } else {
        return None;
    };
    Some(sign * value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_the_core_schema_and_keeps_positions() {
        let text = "apiVersion: v4\nmetadata:\n  name: web\n  labels: {a: '1'}\nspec:\n  instance: 2\n  ratio: 0.5\n  on: true\n  none: ~\n  hex: 0x1F\n  list:\n    - 1\n    - \"2\"\n";
        let docs = parse(text).unwrap();
        assert_eq!(docs.len(), 1);
        assert_eq!(
            docs[0].value,
            json!({"apiVersion": "v4", "metadata": {"name": "web", "labels": {"a": "1"}},
                   "spec": {"instance": 2, "ratio": 0.5, "on": true, "none": null, "hex": 31, "list": [1, "2"]}})
        );
        assert_eq!(docs[0].position("metadata.name"), Some((3, 3)));
        assert_eq!(docs[0].position("spec.list[1]"), Some((13, 7)));
        // Absent: the nearest enclosing value's.
        assert_eq!(docs[0].position("spec.list[1].x"), Some((13, 7)));
        assert_eq!(docs[0].position("spec.missing"), Some((5, 1)));
    }

    #[test]
    fn several_documents_anchors_and_mistakes() {
        let docs = parse("---\na: &x {b: 1}\nc: *x\n---\n---\nd: 2\n").unwrap();
        assert_eq!(
            docs.iter().map(|d| d.value.clone()).collect::<Vec<_>>(),
            [json!({"a": {"b": 1}, "c": {"b": 1}}), json!({"d": 2})]
        );
        let e = parse("a: 1\nb: [1, 2\n").unwrap_err();
        assert!(e.0[0].message.starts_with("YAML syntax error at line"), "{e}");
        let e = parse("a: 1\na: 2\n").unwrap_err();
        assert_eq!(e.0[0].path, "a");
        let doc = &parse("spec:\n  strategy:\n    surge: x\n").unwrap()[0];
        let located = doc.locate(SpecErrors(vec![SpecError::new("spec.strategy.surge", "not a number")]));
        assert_eq!(located.0[0].message, "not a number (line 3, column 5)");
    }
}
