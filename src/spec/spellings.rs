//! The seeds' own spellings, folded into Steward's names before a document is decoded (DESIGN
//! § 7 "seed spellings"): seed 003's `unavailable`/`surge`/`ready`, a container's `command` and
//! `args` lists (Docker's ENTRYPOINT and CMD), a port's `port`, `env[].from`, a CronJob's
//! `parallelism`/`completions`/`active` beside its rule; seed 000's prose `env` as an object and
//! `environment`. Steward's names stay the documented ones and the ones written back.
//!
//! Both spellings given with different values is a mistake naming both. Each fold remembers
//! where its value was written, so a later mistake (a wrong type, a broken rule) names the
//! field as the user wrote it, and a YAML file's line of it.

use super::error::Path;
use super::SpecError;
use serde_json::{json, Map, Value};

/// A document in Steward's names, the mistakes found folding it, and where each folded value
/// was written.
#[derive(Debug, Default)]
pub struct Folded {
    pub doc: Value,
    /// Named as written already.
    errors: Vec<SpecError>,
    /// (path in Steward's names, path as written), most specific first within one fold.
    written: Vec<(String, String)>,
}

impl Folded {
    /// `path` (in Steward's names) as the user wrote it: the longest folded prefix replaced.
    pub fn as_written(&self, path: &str) -> String {
        let best = self.written.iter().filter(|(ours, _)| covers(ours, path)).max_by_key(|(ours, _)| ours.len());
        match best {
            Some((ours, theirs)) => format!("{theirs}{}", &path[ours.len()..]),
            None => path.to_string(),
        }
    }

    /// The fold's own mistakes, then `errors` (found on the folded document) with their paths
    /// as written.
    pub fn errors_as_written(&self, errors: Vec<SpecError>) -> Vec<SpecError> {
        let mut all = self.errors.clone();
        all.extend(errors.into_iter().map(|e| SpecError::new(self.as_written(&e.path), e.message)));
        all
    }

    fn wrote(&mut self, ours: impl ToString, theirs: impl ToString) {
        self.written.push((ours.to_string(), theirs.to_string()));
    }

    fn mistake(&mut self, at: &Path, message: impl Into<String>) {
        self.errors.push(SpecError::new(at.to_string(), message));
    }

    /// Moves `obj[theirs]` to `obj[ours]`: a conflict when both are there and differ.
    fn rename(&mut self, obj: &mut Map<String, Value>, at: &Path, theirs: &str, ours: &str) {
        let Some(value) = obj.remove(theirs) else { return };
        match obj.get(ours) {
            Some(existing) if *existing != value => {
                self.mistake(
                    &at.field(theirs),
                    format!("{theirs} and {ours} disagree ({value} and {existing}); give one"),
                );
            }
            _ => {
                self.wrote(at.field(ours), at.field(theirs));
                obj.insert(ours.to_string(), value);
            }
        }
    }
}

fn covers(prefix: &str, path: &str) -> bool {
    path == prefix || path.strip_prefix(prefix).is_some_and(|rest| rest.starts_with(['.', '[']))
}

/// `doc` in Steward's names.
pub fn fold(doc: &Value) -> Folded {
    let mut folded = Folded { doc: doc.clone(), ..Folded::default() };
    let mut doc = std::mem::take(&mut folded.doc);
    if let Some(root) = doc.as_object_mut() {
        strategy(root, &mut folded);
        cron_job(root, &mut folded);
        let template = Path::root().field("spec").field("template").field("spec");
        let spec = root.get_mut("spec").and_then(|s| s.get_mut("template")).and_then(|t| t.get_mut("spec"));
        if let Some(spec) = spec.and_then(Value::as_object_mut) {
            for (list, kind) in
                [("processes", Holder::Process), ("containers", Holder::Container), ("initializers", Holder::Container)]
            {
                let Some(items) = spec.get_mut(list).and_then(Value::as_array_mut) else { continue };
                for (i, item) in items.iter_mut().enumerate() {
                    if let Some(item) = item.as_object_mut() {
                        holder(item, &template.field(list).index(i), kind, &mut folded);
                    }
                }
            }
        }
    }
    folded.doc = doc;
    folded
}

/// Seed 003's Deployment: `strategy.unavailable`/`surge`, and `ready` beside `strategy` (the
/// seed's controller level, here the spec's top) or inside it.
fn strategy(root: &mut Map<String, Value>, folded: &mut Folded) {
    let at = Path::root().field("strategy");
    if let Some(ready) = root.remove("ready") {
        let strategy = root.entry("strategy").or_insert_with(|| json!({}));
        match strategy.as_object_mut() {
            Some(s) => match s.get("minReadySeconds").or_else(|| s.get("ready")) {
                Some(existing) if *existing != ready => {
                    folded.mistake(
                        &Path::root().field("ready"),
                        format!("ready and strategy.minReadySeconds disagree ({ready} and {existing}); give one"),
                    );
                }
                _ => {
                    folded.wrote(at.field("minReadySeconds"), Path::root().field("ready"));
                    s.insert("minReadySeconds".into(), ready);
                    s.remove("ready");
                }
            },
            None => folded.mistake(&Path::root().field("ready"), "beside a strategy that is not an object"),
        }
    }
    if let Some(s) = root.get_mut("strategy").and_then(Value::as_object_mut) {
        for (theirs, ours) in [("unavailable", "maxUnavailable"), ("surge", "maxSurge"), ("ready", "minReadySeconds")] {
            folded.rename(s, &at, theirs, ours);
        }
    }
}

/// Seed 003's CronJob writes a run's `parallelism`, `completions` and `active` beside its rule;
/// Steward keeps them in `job`, as for a plain job.
fn cron_job(root: &mut Map<String, Value>, folded: &mut Folded) {
    let Some(cron) = root.get_mut("cronJob").and_then(Value::as_object_mut) else { return };
    let moved: Vec<(&str, Value)> =
        ["parallelism", "completions", "active"].into_iter().filter_map(|k| cron.remove(k).map(|v| (k, v))).collect();
    if moved.is_empty() {
        return;
    }
    let job = root.entry("job").or_insert_with(|| json!({}));
    let Some(job) = job.as_object_mut() else {
        folded.mistake(&Path::root().field("cronJob"), "has a run's fields while job is not an object");
        return;
    };
    for (key, value) in moved {
        let (ours, theirs) = (Path::root().field("job").field(key), Path::root().field("cronJob").field(key));
        match job.get(key) {
            Some(existing) if *existing != value => {
                folded.mistake(
                    &theirs,
                    format!("cronJob.{key} and job.{key} disagree ({value} and {existing}); give one"),
                );
            }
            _ => {
                folded.wrote(&ours, &theirs);
                job.insert(key.to_string(), value);
            }
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Holder {
    Process,
    Container,
}

/// A process's or a container's spellings.
fn holder(item: &mut Map<String, Value>, at: &Path, kind: Holder, folded: &mut Folded) {
    env(item, at, folded);
    env_from_stores(item, at, folded);
    ports(item, at, kind, folded);
    if kind == Holder::Container {
        command(item, at, folded);
    }
}

/// Seed 000's prose: `env` (or `environment`) as an object of NAME: value.
fn env(item: &mut Map<String, Value>, at: &Path, folded: &mut Folded) {
    let environment = item.remove("environment");
    let mut lists = Vec::new();
    for (written, value) in [("env", item.remove("env")), ("environment", environment)] {
        let Some(value) = value else { continue };
        let list = match value {
            // `{name: A, value: 1}` is one variable missing its list's brackets, not the
            // variables `name` and `value`: left for the decoder to call what it is.
            Value::Object(vars) if !looks_like_one_variable(&vars) => {
                for (i, name) in vars.keys().enumerate() {
                    lists.push((at.field("env").index(i), at.field(written).field(name), written));
                }
                Value::Array(vars.into_iter().map(|(name, value)| json!({"name": name, "value": value})).collect())
            }
            other => {
                lists.push((at.field("env"), at.field(written), written));
                other
            }
        };
        match item.get("env") {
            Some(existing) if *existing != list => {
                folded.mistake(&at.field("environment"), "environment and env disagree; give one");
            }
            _ => {
                item.insert("env".into(), list);
            }
        }
    }
    // Where each was written, unless both were given (then env's places stand).
    let both = lists.iter().any(|l| l.2 == "env") && lists.iter().any(|l| l.2 == "environment");
    for (ours, theirs, written) in lists {
        if !(both && written == "environment") && theirs.to_string() != ours.to_string() {
            folded.wrote(ours, theirs);
        }
    }
}

fn looks_like_one_variable(vars: &Map<String, Value>) -> bool {
    vars.contains_key("name") && vars.keys().all(|k| ["name", "value", "from"].contains(&k.as_str()))
}

/// Seed 003's `env[].from: {type: Config|ConfigMap|Secret, name, key, optional}`: the variable
/// takes that key's value at each (re)start, exactly as a secret's or configmap's item of type
/// env does, so it becomes one.
fn env_from_stores(item: &mut Map<String, Value>, at: &Path, folded: &mut Folded) {
    let env_at = at.field("env");
    let Some(vars) = item.get_mut("env").and_then(Value::as_array_mut) else { return };
    if !vars.iter().any(|v| v.get("from").is_some()) {
        return;
    }
    // The variables kept are renumbered: each is still named where it was written.
    let written: Vec<String> = (0..vars.len()).map(|i| folded.as_written(&env_at.index(i).to_string())).collect();
    folded.written.retain(|(ours, _)| !covers(&env_at.to_string(), ours));
    let mut refs = Vec::new();
    let mut kept = Vec::with_capacity(vars.len());
    for (mut var, var_at) in std::mem::take(vars).into_iter().zip(written) {
        let Some(from) = var.as_object_mut().and_then(|v| v.remove("from")) else {
            folded.wrote(env_at.index(kept.len()), &var_at);
            kept.push(var);
            continue;
        };
        let from_at = format!("{var_at}.from");
        match from_reference(&var, &from) {
            Ok((store, reference)) => refs.push((store, reference, var_at)),
            Err((field, why)) => folded.errors.push(SpecError::new(format!("{from_at}{field}"), why)),
        }
    }
    *vars = kept;
    for (store, reference, var_at) in refs {
        let list = item.entry(store).or_insert_with(|| json!([]));
        let Some(list) = list.as_array_mut() else {
            folded.mistake(&at.field(store), "is not a list, so env[].from cannot add to it");
            continue;
        };
        let ours = at.field(store).index(list.len());
        let name_field = if store == "secrets" { "secretName" } else { "name" };
        folded.wrote(&ours, format!("{var_at}.from"));
        folded.wrote(ours.field(name_field), format!("{var_at}.from.name"));
        folded.wrote(ours.field("optional"), format!("{var_at}.from.optional"));
        folded.wrote(ours.field("items").index(0).field("dataKey"), format!("{var_at}.from.key"));
        folded.wrote(ours.field("items").index(0).field("keyOrPath"), format!("{var_at}.name"));
        list.push(reference);
    }
}

/// The secret or configmap reference (its list's name, the reference) an `env[].from` means;
/// Err: (the field under `from`, why).
fn from_reference(var: &Value, from: &Value) -> Result<(&'static str, Value), (String, String)> {
    if var.get("value").is_some() {
        return Err((String::new(), "value and from are either-or (seed 003); give one".into()));
    }
    let Some(from) = from.as_object() else {
        return Err((String::new(), "expected an object {type, name, key, optional}".into()));
    };
    if let Some(unknown) = from.keys().find(|k| !["type", "name", "key", "optional"].contains(&k.as_str())) {
        return Err((
            format!(".{unknown}"),
            format!("unknown field `{unknown}` (known fields: type, name, key, optional)"),
        ));
    }
    let store = match from.get("type").map(|t| t.as_str().unwrap_or_default()).unwrap_or("Config") {
        t if t.eq_ignore_ascii_case("config") || t.eq_ignore_ascii_case("configmap") => "configmaps",
        t if t.eq_ignore_ascii_case("secret") => "secrets",
        other => return Err((".type".into(), format!("must be one of Config, ConfigMap, Secret, not {other:?}"))),
    };
    let name_field = if store == "secrets" { "secretName" } else { "name" };
    let field = |k: &str| from.get(k).cloned().unwrap_or(Value::Null);
    let item =
        json!({"type": "env", "dataKey": field("key"), "keyOrPath": var.get("name").cloned().unwrap_or(Value::Null)});
    let mut reference = json!({name_field: field("name"), "items": [item]});
    if let Some(optional) = from.get("optional") {
        reference["optional"] = optional.clone();
    }
    Ok((store, reference))
}

/// A port's `port`: seed 003's container port (protocol HTTP unless given, as the seed's
/// default), seed 000's prose process port (its host port).
fn ports(item: &mut Map<String, Value>, at: &Path, kind: Holder, folded: &mut Folded) {
    let Some(ports) = item.get_mut("ports").and_then(Value::as_array_mut) else { return };
    let ours = if kind == Holder::Container { "containerPort" } else { "hostPort" };
    for (i, port) in ports.iter_mut().enumerate() {
        let Some(port) = port.as_object_mut() else { continue };
        if !port.contains_key("port") {
            continue;
        }
        if kind == Holder::Container && !port.contains_key("protocol") {
            port.insert("protocol".into(), json!("HTTP"));
        }
        folded.rename(port, &at.field("ports").index(i), "port", ours);
    }
}

/// Seed 003's `command: [..]` (Docker's ENTRYPOINT) and `args: [..]` (its CMD) as Steward's
/// `command: {value, arguments}` (seed 001): the entrypoint's first word is the value, the rest
/// and then the args its arguments, which is the command line Docker runs either way.
fn command(item: &mut Map<String, Value>, at: &Path, folded: &mut Folded) {
    let args = item.remove("args");
    let command_at = at.field("command");
    match (item.remove("command"), args) {
        (None, None) => {}
        (Some(Value::Array(words)), args) => {
            let mut words = words.into_iter();
            let value = words.next().unwrap_or_else(|| json!(""));
            let mut arguments: Vec<Value> = words.collect();
            if let Some(args) = &args {
                match args {
                    Value::Array(more) => arguments.extend(more.iter().cloned()),
                    _ => folded.mistake(&at.field("args"), "expected a list of strings (Docker's CMD)"),
                }
            }
            folded.wrote(command_at.field("value"), command_at.index(0));
            let arguments_written = if args.is_some() { at.field("args") } else { command_at.clone() };
            folded.wrote(command_at.field("arguments"), &arguments_written);
            item.insert("command".into(), json!({"value": value, "arguments": arguments}));
        }
        (command, Some(args)) => {
            let mut command = command.unwrap_or_else(|| json!({}));
            match command.as_object_mut() {
                Some(c) => match c.get("arguments") {
                    Some(existing) if *existing != args => {
                        folded.mistake(&at.field("args"), "args and command.arguments disagree; give one");
                    }
                    _ => {
                        folded.wrote(command_at.field("arguments"), at.field("args"));
                        c.insert("arguments".into(), args);
                    }
                },
                None => folded.mistake(&command_at, "expected a list (Docker's ENTRYPOINT) or {value, arguments}"),
            }
            item.insert("command".into(), command);
        }
        (Some(command), None) => {
            item.insert("command".into(), command);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::spec::{decode, from_document, Roots};
    use serde_json::json;

    fn roots() -> Roots {
        crate::config::Config::default().roots()
    }

    fn pod(top: serde_json::Value, container: serde_json::Value) -> serde_json::Value {
        let mut doc = json!({
            "apiVersion": "v4", "kind": "pod",
            "metadata": {"name": "web", "namespace": "demo"},
            "spec": {"instance": 2, "template": {"spec": {"containers": [container]}}}
        });
        for (k, v) in top.as_object().unwrap() {
            doc[k] = v.clone();
        }
        doc
    }

    #[test]
    fn seed_003_spellings_read_as_stewards_own() {
        let seed = pod(
            json!({"strategy": {"unavailable": 1, "surge": "25%"}, "ready": 5}),
            json!({
                "name": "web", "image": "busybox:1.36",
                "command": ["sh", "-c"], "args": ["exec httpd -f -p 8080"],
                "ports": [{"name": "http", "port": 8080}],
                "env": [
                    {"name": "GREETING", "value": "hi"},
                    {"name": "LEVEL", "from": {"type": "ConfigMap", "name": "cfg", "key": "level"}},
                    {"name": "TOKEN", "from": {"type": "Secret", "name": "creds", "key": "token", "optional": true}}
                ]
            }),
        );
        let ours = pod(
            json!({"strategy": {"maxUnavailable": 1, "maxSurge": "25%", "minReadySeconds": 5}}),
            json!({
                "name": "web", "image": "busybox:1.36",
                "command": {"value": "sh", "arguments": ["-c", "exec httpd -f -p 8080"]},
                "ports": [{"name": "http", "containerPort": 8080, "protocol": "HTTP"}],
                "env": [{"name": "GREETING", "value": "hi"}],
                "configmaps": [{"name": "cfg", "items": [{"type": "env", "dataKey": "level", "keyOrPath": "LEVEL"}]}],
                "secrets": [{"secretName": "creds", "optional": true,
                             "items": [{"type": "env", "dataKey": "token", "keyOrPath": "TOKEN"}]}]
            }),
        );
        let seed = from_document(&seed, &roots()).unwrap_or_else(|e| panic!("{e}"));
        let ours = from_document(&ours, &roots()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(seed, ours);
    }

    #[test]
    fn seed_000_prose_env_and_a_cron_jobs_run_fields() {
        let process = |env: serde_json::Value| {
            json!({
                "apiVersion": "v4", "kind": "process",
                "metadata": {"name": "tick", "namespace": "demo"},
                "cronJob": {"rule": "*/5 * * * *", "parallelism": 2, "completions": 3, "active": 60},
                "spec": {"instance": 1, "template": {"spec": {"processes": [{
                    "procName": "sh", "startCmd": "true",
                    "workPath": "${work_base_dir}/${namespace}.${processname}.${instanceid}",
                    "ports": [{"name": "http", "port": 0}],
                    "env": env
                }]}}}
            })
        };
        let (object, errors) = decode(&process(json!({"hostip": "${hostip}", "MODE": "fast"})));
        assert!(errors.is_empty(), "{errors:?}");
        let (list, errors) =
            decode(&process(json!([{"name": "hostip", "value": "${hostip}"}, {"name": "MODE", "value": "fast"}])));
        assert!(errors.is_empty(), "{errors:?}");
        let (object, list) = (object.unwrap(), list.unwrap());
        assert_eq!(object, list);
        let job = object.job.as_ref().expect("the cron job's run fields land in job");
        assert_eq!((job.parallelism, job.completions, job.active), (2, 3, 60));
        assert_eq!(object.spec.template.spec.processes[0].ports[0].host_port, 0);
        // `environment`, the seed's field list's name.
        let mut doc = process(json!(null));
        let p = &mut doc["spec"]["template"]["spec"]["processes"][0];
        p.as_object_mut().unwrap().remove("env");
        p["environment"] = json!({"MODE": "fast"});
        let (spec, errors) = decode(&doc);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(spec.unwrap().spec.template.spec.processes[0].env[0].name, "MODE");
    }

    #[test]
    fn both_spellings_differing_are_refused_naming_both() {
        let doc = pod(
            json!({"strategy": {"surge": 2, "maxSurge": 1}, "ready": 3, "cronJob": {"rule": "* * * * *", "parallelism": 2}, "job": {"parallelism": 1}}),
            json!({"name": "web", "image": "busybox:1.36",
                   "command": {"value": "sh", "arguments": ["-x"]}, "args": ["-c"],
                   "ports": [{"name": "http", "port": 80, "containerPort": 81}],
                   "env": [{"name": "A", "value": "1", "from": {"name": "cfg", "key": "a"}}]}),
        );
        let e = from_document(&doc, &roots()).unwrap_err().to_string();
        for expected in [
            "strategy.surge: surge and maxSurge disagree (2 and 1)",
            "cronJob.parallelism: cronJob.parallelism and job.parallelism disagree",
            "containers[0].args: args and command.arguments disagree",
            "containers[0].ports[0].port: port and containerPort disagree (80 and 81)",
            "containers[0].env[0].from: value and from are either-or",
        ] {
            assert!(e.contains(expected), "{expected}\n{e}");
        }
        // The same value twice is no conflict.
        let same =
            pod(json!({"strategy": {"surge": 1, "maxSurge": 1}}), json!({"name": "web", "image": "busybox:1.36"}));
        from_document(&same, &roots()).unwrap_or_else(|e| panic!("{e}"));
    }

    #[test]
    fn a_mistake_in_a_folded_field_is_named_as_written() {
        let doc = pod(
            json!({"strategy": {"surge": "lots"}, "ready": "soon"}),
            json!({"name": "web", "image": "busybox:1.36", "command": ["sh"], "args": "x",
                   "ports": [{"name": "http", "port": 0}],
                   "env": [{"name": "K", "value": "v"}, {"name": "A", "from": {"type": "Vault", "name": "cfg", "key": "a"}},
                           {"name": "B", "from": {"name": "", "key": "b"}}, {"name": "", "value": "v"}]}),
        );
        let e = from_document(&doc, &roots()).unwrap_err().to_string();
        let c = "spec.template.spec.containers[0]";
        for expected in [
            "strategy.surge: expected a count or a percentage".to_string(),
            "ready: expected a non-negative integer".to_string(),
            format!("{c}.args: expected a list of strings"),
            format!("{c}.ports[0].port: 0 must be 1-65535"),
            format!("{c}.env[1].from.type: must be one of Config, ConfigMap, Secret"),
            format!("{c}.env[2].from.name: is required"),
            format!("{c}.env[3].name:"),
        ] {
            assert!(e.contains(&expected), "{expected}\n{e}");
        }
        for ours in ["strategy.maxSurge", "strategy.minReadySeconds", "configmaps", "command.arguments"] {
            assert!(!e.contains(&format!("{ours}:")) && !e.contains(&format!("{ours}[")), "{ours}: {e}");
        }
    }
}
