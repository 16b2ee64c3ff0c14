//! `${variable}` templates of seed 000 (`${namespace}`, `${ports.http_port}`, ...).
//!
//! Commands are shell text, where `${HOME}` would also be shell syntax. Steward owns every
//! `${...}`: an unknown name is an error rather than an empty string or a silent pass-through.
//! To hand the shell a literal `${VAR}`, write `$${VAR}`; a bare `$VAR` is left alone.

use std::fmt;

/// A variable a template may name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Var {
    Namespace,
    ProcessName,
    InstanceId,
    HostIp,
    Port(String),
    WorkBaseDir,
    RunBaseDir,
    WorkPath,
    PidFile,
}

/// The plain variable names, as written between `${` and `}`.
pub const PLAIN_VARS: &[(&str, Var)] = &[
    ("namespace", Var::Namespace),
    ("processname", Var::ProcessName),
    ("instanceid", Var::InstanceId),
    ("hostip", Var::HostIp),
    ("work_base_dir", Var::WorkBaseDir),
    ("run_base_dir", Var::RunBaseDir),
    ("workPath", Var::WorkPath),
    ("pidFile", Var::PidFile),
];

impl fmt::Display for Var {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Var::Port(name) => write!(f, "${{ports.{name}}}"),
            other => {
                let name = PLAIN_VARS.iter().find(|(_, v)| v == other).map(|(n, _)| *n).unwrap_or("?");
                write!(f, "${{{name}}}")
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Var(Var),
}

/// A parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template(Vec<Piece>);

/// Why a template could not be parsed; the message names the offending text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateError(pub String);

impl Template {
    /// Parses `text`, returning every problem in it (unknown names, unterminated `${`).
    pub fn parse(text: &str) -> Result<Template, Vec<TemplateError>> {
        let (template, errors) = Template::parse_all(text);
        if errors.is_empty() {
            Ok(template)
        } else {
            Err(errors)
        }
    }

    /// Parses `text`, keeping the variables it could read alongside the problems it found,
    /// so validation can check those variables too.
    pub fn parse_all(text: &str) -> (Template, Vec<TemplateError>) {
        let mut pieces = Vec::new();
        let mut errors = Vec::new();
        let mut literal = String::new();
        let mut rest = text;
        while let Some(pos) = rest.find('$') {
            literal.push_str(&rest[..pos]);
            let after = &rest[pos..];
            if let Some(tail) = after.strip_prefix("$${") {
                literal.push_str("${");
                rest = tail;
            } else if let Some(tail) = after.strip_prefix("${") {
                match tail.find('}') {
                    None => {
                        errors.push(TemplateError(format!("unterminated `${{` in {:?}", shorten(after))));
                        literal.push_str(after);
                        rest = "";
                    }
                    Some(end) => {
                        let name = &tail[..end];
                        match lookup(name) {
                            Ok(var) => {
                                if !literal.is_empty() {
                                    pieces.push(Piece::Text(std::mem::take(&mut literal)));
                                }
                                pieces.push(Piece::Var(var));
                            }
                            Err(e) => errors.push(e),
                        }
                        rest = &tail[end + 1..];
                    }
                }
            } else {
                literal.push('$');
                rest = &after[1..];
            }
        }
        literal.push_str(rest);
        if !literal.is_empty() {
            pieces.push(Piece::Text(literal));
        }
        (Template(pieces), errors)
    }

    /// The variables this template names, in order of appearance.
    pub fn vars(&self) -> impl Iterator<Item = &Var> {
        self.0.iter().filter_map(|p| match p {
            Piece::Var(v) => Some(v),
            Piece::Text(_) => None,
        })
    }

    /// Substitutes every variable with `value(var)`.
    pub fn render(&self, mut value: impl FnMut(&Var) -> String) -> String {
        let mut out = String::new();
        for p in &self.0 {
            match p {
                Piece::Text(t) => out.push_str(t),
                Piece::Var(v) => out.push_str(&value(v)),
            }
        }
        out
    }
}

fn lookup(name: &str) -> Result<Var, TemplateError> {
    if let Some(port) = name.strip_prefix("ports.") {
        if port.is_empty() {
            return Err(TemplateError("`${ports.}` names no port".into()));
        }
        return Ok(Var::Port(port.to_string()));
    }
    if let Some((_, v)) = PLAIN_VARS.iter().find(|(n, _)| *n == name) {
        return Ok(v.clone());
    }
    let known: Vec<&str> = PLAIN_VARS.iter().map(|(n, _)| *n).collect();
    let hint = match super::error::did_you_mean(name, known.iter().copied()) {
        Some(s) => format!("; did you mean `${{{s}}}`?"),
        None => String::new(),
    };
    Err(TemplateError(format!(
        "unknown variable `${{{name}}}` (known: ${{{}}}, ${{ports.NAME}}; write `$${{{name}}}` for a literal){hint}",
        known.join("}, ${")
    )))
}

fn shorten(s: &str) -> String {
    s.chars().take(40).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_renders_seed_variables() {
        let t = Template::parse("${work_base_dir}/${namespace}.${processname}.${instanceid}/x").unwrap();
        let vars: Vec<_> = t.vars().cloned().collect();
        assert_eq!(vars, vec![Var::WorkBaseDir, Var::Namespace, Var::ProcessName, Var::InstanceId]);
        let out = t.render(|v| match v {
            Var::WorkBaseDir => "/w".into(),
            Var::Namespace => "ns".into(),
            Var::ProcessName => "app".into(),
            Var::InstanceId => "3".into(),
            _ => unreachable!(),
        });
        assert_eq!(out, "/w/ns.app.3/x");
    }

    #[test]
    fn ports_and_escapes() {
        let t = Template::parse("run --port ${ports.http_port} --home $${HOME} $PATH $").unwrap();
        assert_eq!(t.vars().cloned().collect::<Vec<_>>(), vec![Var::Port("http_port".into())]);
        assert_eq!(t.render(|_| "31000".into()), "run --port 31000 --home ${HOME} $PATH $");
    }

    #[test]
    fn unknown_and_unterminated_are_all_reported() {
        let errs = Template::parse("./start.sh --address ${hospip} ${ports.} ${x").unwrap_err();
        assert_eq!(errs.len(), 3);
        assert!(errs[0].0.contains("unknown variable `${hospip}`"), "{}", errs[0].0);
        assert!(errs[0].0.contains("did you mean `${hostip}`"), "{}", errs[0].0);
        assert!(errs[1].0.contains("names no port"));
        assert!(errs[2].0.contains("unterminated"));
    }

    #[test]
    fn display_round_trips_names() {
        assert_eq!(Var::WorkPath.to_string(), "${workPath}");
        assert_eq!(Var::Port("a".into()).to_string(), "${ports.a}");
    }
}
