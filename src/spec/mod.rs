//! The BCS process spec (seed 000): model, parsing from JSON or TOML, validation that reports
//! every mistake with its field path, and rendering of one instance.

pub mod app_id;
mod decode;
pub mod error;
pub mod model;
pub mod pod;
pub mod render;
pub mod source;
pub mod spellings;
pub mod template;
pub mod validate;
pub mod yaml;

pub use app_id::AppId;
pub use error::{SpecError, SpecErrors};
pub use model::ProcessSpec;
pub use render::{render, InstanceId, RenderContext, RenderedInstance, Roots};

/// The syntaxes a spec may be written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json,
    Toml,
    Yaml,
}

impl Format {
    /// By file extension (`.json`, `.toml`, `.yaml` or `.yml`), else by content.
    pub fn for_path(path: &std::path::Path, text: &str) -> Format {
        match path.extension().and_then(|e| e.to_str()) {
            Some("toml") => Format::Toml,
            Some("json") => Format::Json,
            Some("yaml" | "yml") => Format::Yaml,
            _ => Format::sniff(text),
        }
    }

    /// By content: JSON starts with `{`; TOML's first line of content is a `[table]` or a
    /// `key = value`; anything else is YAML (`key: value`, `---`).
    pub fn sniff(text: &str) -> Format {
        let first = text.lines().map(str::trim).find(|l| !l.is_empty() && !l.starts_with('#')).unwrap_or_default();
        if first.starts_with('{') {
            return Format::Json;
        }
        let equals = first.find('=');
        let colon = first.find(':');
        let toml_pair = equals.is_some_and(|e| colon.is_none_or(|c| e < c));
        if first.starts_with('[') || toml_pair {
            Format::Toml
        } else {
            Format::Yaml
        }
    }

    /// By an HTTP Content-Type, else by content.
    pub fn for_content_type(content_type: &str, text: &str) -> Format {
        if content_type.contains("toml") {
            Format::Toml
        } else if content_type.contains("yaml") {
            Format::Yaml
        } else if content_type.contains("json") {
            Format::Json
        } else {
            Format::sniff(text)
        }
    }

    /// The Content-Type a document of this format is sent with.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Json => "application/json",
            Format::Toml => "application/toml",
            Format::Yaml => "application/yaml",
        }
    }
}

/// Every document of `text`: one for JSON and TOML, each of a YAML stream's in order; a YAML
/// document keeps its positions, for naming the line and column of a later mistake.
pub fn parse_documents(
    text: &str,
    format: Format,
) -> Result<Vec<(serde_json::Value, Option<yaml::YamlDocument>)>, SpecErrors> {
    match format {
        Format::Yaml => Ok(yaml::parse(text)?.into_iter().map(|d| (d.value.clone(), Some(d))).collect()),
        _ => Ok(vec![(parse_document(text, format)?, None)]),
    }
}

/// Parses text into a document tree, naming the line and column of a syntax error.
pub fn parse_document(text: &str, format: Format) -> Result<serde_json::Value, SpecErrors> {
    let syntax = |message: String| SpecErrors(vec![SpecError::new("", message)]);
    match format {
        Format::Json => serde_json::from_str(text).map_err(|e| {
            let (line, column) = (e.line(), e.column());
            let full = e.to_string();
            let message = full.strip_suffix(&format!(" at line {line} column {column}")).unwrap_or(&full);
            syntax(format!("JSON syntax error at line {line} column {column}: {message}"))
        }),
        Format::Toml => {
            let table = text.parse::<toml::Table>().map_err(|e| {
                let at = e.span().map(|span| line_column(text, span.start));
                let place = at.map(|(l, c)| format!(" at line {l} column {c}")).unwrap_or_default();
                let message: Vec<&str> = e.message().lines().map(str::trim).filter(|l| !l.is_empty()).collect();
                syntax(format!("TOML syntax error{place}: {}", message.join("; ")))
            })?;
            serde_json::to_value(table).map_err(|e| syntax(format!("TOML value not representable: {e}")))
        }
        Format::Yaml => {
            let mut documents = yaml::parse(text)?;
            match documents.len() {
                0 => Err(syntax("the YAML holds no document".into())),
                1 => Ok(documents.remove(0).value),
                n => Err(syntax(format!(
                    "the YAML holds {n} documents where one is read (`steward apply -f` takes several)"
                ))),
            }
        }
    }
}

/// 1-based line and column of byte `offset` in `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// Parses, normalizes and validates a spec, returning it or every mistake found.
/// `roots` are used to check that instance paths stay inside the configured directories.
pub fn parse(text: &str, format: Format, roots: &Roots) -> Result<ProcessSpec, SpecErrors> {
    if format == Format::Yaml {
        // Its mistakes with their lines and columns.
        let mut documents = parse_documents(text, format)?;
        if documents.len() == 1 {
            let (doc, located) = documents.remove(0);
            let found = from_document(&doc, roots);
            return found.map_err(|e| located.map_or(e.clone(), |y| y.locate(e)));
        }
    }
    let doc = parse_document(text, format)?;
    from_document(&doc, roots)
}

/// The rules that depend on the host applied to (see [`validate::within_host`]).
pub fn within_host(spec: &ProcessSpec, host: &validate::HostCapacity) -> Result<(), SpecErrors> {
    let mut found = error::Errors::default();
    validate::within_host(spec, host, &mut found);
    SpecErrors(found.0).into_result(())
}

/// The users a spec names, looked up on this host: `steward validate` here (the daemon's apply
/// checks them with [`within_host`]; steward-sched, elsewhere, does not).
pub fn users_on_this_host(spec: &ProcessSpec) -> Result<(), SpecErrors> {
    let mut found = error::Errors::default();
    validate::host_users::check(spec, validate::host_users::exists_here, &mut found);
    SpecErrors(found.0).into_result(())
}

/// Any other document of the project (a HookTemplate, say) read the same lenient way: every
/// mistake with its field path, unknown fields named.
pub fn decode_as<T: serde::de::DeserializeOwned>(doc: &serde_json::Value) -> (Option<T>, Vec<SpecError>) {
    decode::decode::<T>(doc)
}

/// Reads a document into the model without validating it: types, enum values, unknown fields
/// and alternative spellings only. Every mistake found is returned with the model, each at its
/// field as written.
pub fn decode(doc: &serde_json::Value) -> (Option<ProcessSpec>, Vec<SpecError>) {
    let (spec, errors, folded) = decode_folded(doc);
    (spec, folded.errors_as_written(errors))
}

/// The seeds' spellings folded ([`spellings`]), then decoded and normalized; the mistakes at
/// their paths in Steward's names, with the fold to name them as written.
fn decode_folded(doc: &serde_json::Value) -> (Option<ProcessSpec>, Vec<SpecError>, spellings::Folded) {
    let folded = spellings::fold(doc);
    let (spec, mut errors) = decode::decode::<ProcessSpec>(&folded.doc);
    let spec = spec.map(|mut s| {
        errors.extend(s.normalize());
        s
    });
    (spec, errors, folded)
}

/// Decodes `doc` and checks it by `rules`: every mistake, each at its field as written, in
/// document order. The daemon's check ([`from_document`]) and steward-sched's (rules that hold
/// on any host) differ only in their rules.
pub fn check_document(
    doc: &serde_json::Value,
    rules: impl FnOnce(&ProcessSpec, &mut error::Errors),
) -> Result<ProcessSpec, SpecErrors> {
    let (spec, decode_errors, folded) = decode_folded(doc);
    let Some(spec) = spec else {
        return Err(SpecErrors(folded.errors_as_written(decode_errors)));
    };
    let mut found = error::Errors::default();
    rules(&spec, &mut found);
    let mut all = folded.errors_as_written(with_rule_errors(decode_errors, found.0));
    sort_in_document_order(&mut all, doc);
    SpecErrors(all).into_result(spec)
}

/// As [`parse`], from an already parsed document (an API request body, say).
pub fn from_document(doc: &serde_json::Value, roots: &Roots) -> Result<ProcessSpec, SpecErrors> {
    check_document(doc, |spec, found| {
        validate::validate(spec, found);
        trial_render(spec, roots, found);
    })
}

/// A document's decode mistakes followed by the rules it breaks, less the rules broken only by
/// a field that could not be decoded: it holds a neutral stand-in (0, "", the first enum value),
/// and a rule failing on the stand-in would only repeat the mistake.
pub fn with_rule_errors(decode_errors: Vec<SpecError>, mut rule_errors: Vec<SpecError>) -> Vec<SpecError> {
    let poisoned: Vec<String> = decode_errors.iter().map(poisoned_prefix).collect();
    rule_errors.retain(|e| !poisoned.iter().any(|p| covers(p, &e.path)));
    let mut all = decode_errors;
    all.extend(rule_errors);
    all
}

/// The part of the spec a decode mistake makes unreliable: the field itself, or for an unknown
/// enum value (which decides the meaning of its siblings, like a check's `type`) its object.
fn poisoned_prefix(e: &SpecError) -> String {
    if e.message.starts_with("must be one of") {
        match e.path.rfind(['.', '[']) {
            Some(cut) => e.path[..cut].to_string(),
            None => e.path.clone(),
        }
    } else {
        e.path.clone()
    }
}

fn covers(prefix: &str, path: &str) -> bool {
    path == prefix || path.strip_prefix(prefix).is_some_and(|rest| rest.starts_with(['.', '[']))
}

/// Orders errors as their fields appear in the file, so a report reads top to bottom.
/// A missing field sorts at its parent's place; errors keep their order within one field.
fn sort_in_document_order(errors: &mut [SpecError], doc: &serde_json::Value) {
    fn walk(v: &serde_json::Value, path: error::Path, order: &mut std::collections::HashMap<String, usize>) {
        let n = order.len();
        order.insert(path.to_string(), n);
        match v {
            serde_json::Value::Object(map) => map.iter().for_each(|(k, v)| walk(v, path.field(k), order)),
            serde_json::Value::Array(items) => {
                items.iter().enumerate().for_each(|(i, v)| walk(v, path.index(i), order))
            }
            _ => {}
        }
    }
    let mut order = std::collections::HashMap::new();
    walk(doc, error::Path::root(), &mut order);
    let rank = |path: &str| {
        let mut p = path;
        loop {
            if let Some(n) = order.get(p) {
                return *n;
            }
            match p.rfind(['.', '[']) {
                Some(cut) => p = &p[..cut],
                None => return 0,
            }
        }
    };
    errors.sort_by_cached_key(|e| rank(&e.path));
}

/// Renders instances with placeholder ports and host IP, so that path rules (inside the roots,
/// no `..`) are checked before anything runs. Runs on invalid specs too, adding only errors for
/// fields that have none yet, so one report holds every mistake.
fn trial_render(spec: &ProcessSpec, roots: &Roots, errors: &mut error::Errors) {
    let placeholder_ports = spec.placeholder_ports();
    let ctx = RenderContext { roots, host_ip: "127.0.0.1".into(), allocated_ports: &placeholder_ports };
    // Paths differ between instances only by ${instanceid}; the first and last cover them.
    // An instance count that is itself wrong (0) still gets its paths checked for instance 0.
    let last = spec.spec.instance.saturating_sub(1);
    let indexes = if last == 0 { vec![0] } else { vec![0, last] };
    for index in indexes {
        let Err(found) = render::render_any_index(spec, index, &ctx) else { continue };
        for err in found.0 {
            if !errors.0.iter().any(|e| e.path == err.path) {
                errors.0.push(err);
            }
        }
    }
}

/// Reads and parses a spec file; errors name the file's fields.
pub fn load_file(path: &std::path::Path, roots: &Roots) -> Result<ProcessSpec, SpecErrors> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| SpecErrors(vec![SpecError::new("", format!("cannot read {}: {e}", path.display()))]))?;
    parse(&text, Format::for_path(path, &text), roots)
}
