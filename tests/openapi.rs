//! docs/openapi.json is the API's contract. Checked here: it is an OpenAPI 3.0 document whose
//! operations are exactly the routes `api::router()` serves; the daemon serves this very file; the
//! serde output of the API's types matches its schemas variant by variant; and real responses of a
//! real stewardd — every status code and content type the document lists that a test can provoke —
//! are documented for their operation and validate against the schemas there.
//!
//! Schemas are checked by a small validator of the JSON-schema subset the document uses (type,
//! nullable, enum, required, properties, additionalProperties, items, oneOf with discriminator,
//! allOf, minimum/maximum, minLength, minItems). It refuses any keyword it does not know, so the
//! document cannot grow a constraint that is silently left unchecked.

mod common;

use common::{id, spec, Daemon};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};
use steward::health::Health;
use steward::hooks::MeasurementPhase;
use steward::protocol::sched::{Disconnected, Gap, NodeHeartbeat};
use steward::protocol::{
    AppOnNode, Applied, ContainerExited, DaemonEvent, Deleted, DeployCause, DesiredChange, ErrorBody, ErrorResponse,
    Event, EventBody, ExitStatus, HealthBody, HealthChanged, Heartbeat, InstanceChange, InstanceList, InstanceOnNode,
    InstanceStatus, JournalBounds, Kind, LogLine, NoDetail, NodeDocument, NodeItem, NodeLine, OomKilled, PortsDocument,
    ReadyChanged, ResourcesDocument, RestartedBy, ScaleInPhase, SchedEvent, SchedLine, SpecUpdated, State, StopGoal,
    StreamLine, Transition, Usage, ValuesBody, ValuesList, ValuesSummary,
};
use steward::spec::model::RestartPolicyKind;

const DOC_FILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/openapi.json");
const API_SOURCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/api/mod.rs");
const METHODS: [&str; 8] = ["get", "put", "post", "delete", "options", "head", "patch", "trace"];

fn doc() -> Value {
    let text = std::fs::read_to_string(DOC_FILE).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{DOC_FILE} is not JSON: {e}"))
}

// ---------------------------------------------------------------------------------------------
// The schema checker.

/// Keywords that only annotate.
const ANNOTATIONS: [&str; 6] = ["description", "example", "default", "format", "title", "discriminator"];
/// Keywords the checker enforces.
const ASSERTIONS: [&str; 15] = [
    "$ref",
    "type",
    "nullable",
    "enum",
    "required",
    "properties",
    "additionalProperties",
    "items",
    "oneOf",
    "allOf",
    "minimum",
    "maximum",
    "minLength",
    "minItems",
    "maxItems",
];

struct Checker<'a> {
    doc: &'a Value,
}

impl<'a> Checker<'a> {
    fn new(doc: &'a Value) -> Checker<'a> {
        Checker { doc }
    }

    /// `#/components/...` to what it points at.
    fn resolve(&self, reference: &str) -> &'a Value {
        let pointer = reference.strip_prefix('#').unwrap_or_else(|| panic!("only local $refs: {reference}"));
        self.doc.pointer(pointer).unwrap_or_else(|| panic!("$ref {reference} points nowhere"))
    }

    /// Follows a `$ref` (of a schema, response or parameter), if the object is one.
    fn deref(&self, v: &'a Value) -> &'a Value {
        match v.get("$ref").and_then(Value::as_str) {
            Some(r) => self.deref(self.resolve(r)),
            None => v,
        }
    }

    fn schema(&self, name: &str) -> &'a Value {
        self.resolve(&format!("#/components/schemas/{name}"))
    }

    fn check(&self, schema: &Value, v: &Value) -> Result<(), String> {
        let mut errors = Vec::new();
        self.validate(schema, v, "$", &mut errors);
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("\n"))
        }
    }

    fn validate(&self, schema: &Value, v: &Value, at: &str, errors: &mut Vec<String>) {
        let Some(s) = schema.as_object() else {
            errors.push(format!("{at}: schema is not an object: {schema}"));
            return;
        };
        if let Some(r) = s.get("$ref").and_then(Value::as_str) {
            return self.validate(self.resolve(r), v, at, errors);
        }
        for k in s.keys() {
            assert!(
                ASSERTIONS.contains(&k.as_str()) || ANNOTATIONS.contains(&k.as_str()),
                "unknown keyword {k} at {at}"
            );
        }
        if v.is_null() && s.get("nullable") == Some(&Value::Bool(true)) {
            return;
        }
        if let Some(t) = s.get("type").and_then(Value::as_str) {
            let ok = match t {
                "object" => v.is_object(),
                "array" => v.is_array(),
                "string" => v.is_string(),
                "integer" => v.is_i64() || v.is_u64(),
                "number" => v.is_number(),
                "boolean" => v.is_boolean(),
                other => panic!("unknown type {other} at {at}"),
            };
            if !ok {
                errors.push(format!("{at}: {v} is not of type {t}"));
                return;
            }
        } else if v.is_null() && !s.contains_key("allOf") && !s.contains_key("oneOf") && !s.contains_key("enum") {
            // OpenAPI 3.0 has no "null" type: without nullable, null matches no typed schema.
            errors.push(format!("{at}: null where the schema is not nullable"));
            return;
        }
        if let Some(e) = s.get("enum").and_then(Value::as_array) {
            if !e.contains(v) {
                errors.push(format!("{at}: {v} is not one of {}", Value::Array(e.clone())));
            }
        }
        if let Some(n) = v.as_f64() {
            if let Some(min) = s.get("minimum").and_then(Value::as_f64) {
                if n < min {
                    errors.push(format!("{at}: {v} < minimum {min}"));
                }
            }
            if let Some(max) = s.get("maximum").and_then(Value::as_f64) {
                if n > max {
                    errors.push(format!("{at}: {v} > maximum {max}"));
                }
            }
        }
        if let (Some(text), Some(min)) = (v.as_str(), s.get("minLength").and_then(Value::as_u64)) {
            if (text.chars().count() as u64) < min {
                errors.push(format!("{at}: {v} is shorter than {min}"));
            }
        }
        if let Some(items) = v.as_array() {
            if let Some(min) = s.get("minItems").and_then(Value::as_u64) {
                if (items.len() as u64) < min {
                    errors.push(format!("{at}: fewer than {min} items"));
                }
            }
            if let Some(max) = s.get("maxItems").and_then(Value::as_u64) {
                if (items.len() as u64) > max {
                    errors.push(format!("{at}: more than {max} items"));
                }
            }
            if let Some(item_schema) = s.get("items") {
                for (i, item) in items.iter().enumerate() {
                    self.validate(item_schema, item, &format!("{at}[{i}]"), errors);
                }
            }
        }
        if let Some(map) = v.as_object() {
            let props = s.get("properties").and_then(Value::as_object);
            for name in s.get("required").and_then(Value::as_array).into_iter().flatten() {
                let name = name.as_str().unwrap();
                if !map.contains_key(name) {
                    errors.push(format!("{at}: required property {name} is missing"));
                }
            }
            for (k, val) in map {
                match props.and_then(|p| p.get(k)) {
                    Some(p) => self.validate(p, val, &format!("{at}.{k}"), errors),
                    None => match s.get("additionalProperties") {
                        Some(Value::Bool(false)) => errors.push(format!("{at}: undocumented property {k}")),
                        Some(Value::Bool(true)) | None => {}
                        Some(extra) => self.validate(extra, val, &format!("{at}.{k}"), errors),
                    },
                }
            }
        }
        for sub in s.get("allOf").and_then(Value::as_array).into_iter().flatten() {
            self.validate(sub, v, at, errors);
        }
        if let Some(variants) = s.get("oneOf").and_then(Value::as_array) {
            self.one_of(s, variants, v, at, errors);
        }
    }

    fn one_of(
        &self,
        s: &serde_json::Map<String, Value>,
        variants: &[Value],
        v: &Value,
        at: &str,
        errors: &mut Vec<String>,
    ) {
        let results: Vec<Vec<String>> = variants
            .iter()
            .map(|variant| {
                let mut e = Vec::new();
                self.validate(variant, v, at, &mut e);
                e
            })
            .collect();
        let matching: Vec<usize> = (0..variants.len()).filter(|i| results[*i].is_empty()).collect();
        // With a discriminator, the variant the tag names is the one that must match.
        if let Some(d) = s.get("discriminator") {
            let prop = d["propertyName"].as_str().unwrap();
            let Some(tag) = v.get(prop).and_then(Value::as_str) else {
                errors.push(format!("{at}: no discriminator {prop} in {v}"));
                return;
            };
            let Some(target) = d["mapping"].get(tag).and_then(Value::as_str) else {
                errors.push(format!("{at}: {prop} {tag:?} is not in the discriminator's mapping"));
                return;
            };
            let i = variants.iter().position(|x| x["$ref"] == target).expect("mapping target is one of the oneOf");
            if !results[i].is_empty() {
                errors.push(format!("{at}: as {target}:\n  {}", results[i].join("\n  ")));
                return;
            }
        }
        match matching.len() {
            1 => {}
            0 => errors.push(format!(
                "{at}: {v} matches none of oneOf:\n  {}",
                results.iter().map(|r| r.join("; ")).collect::<Vec<_>>().join("\n  ")
            )),
            n => errors.push(format!("{at}: {v} matches {n} variants of oneOf ({matching:?})")),
        }
    }

    /// Every `$ref` resolves and every schema keyword is one the checker knows (or annotates).
    fn lint(&self, v: &Value, at: &str, in_schema: bool) {
        match v {
            Value::Object(map) => {
                if let Some(r) = map.get("$ref").and_then(Value::as_str) {
                    self.resolve(r);
                }
                if in_schema {
                    for k in map.keys() {
                        assert!(
                            ASSERTIONS.contains(&k.as_str()) || ANNOTATIONS.contains(&k.as_str()),
                            "{at}: keyword {k} is not one tests/openapi.rs checks"
                        );
                    }
                }
                for (k, child) in map {
                    let child_at = format!("{at}/{k}");
                    if in_schema {
                        match k.as_str() {
                            "properties" => {
                                for (name, p) in child.as_object().unwrap() {
                                    self.lint(p, &format!("{child_at}/{name}"), true);
                                }
                            }
                            "items" | "additionalProperties" if child.is_object() => self.lint(child, &child_at, true),
                            "oneOf" | "allOf" => {
                                for (i, p) in child.as_array().unwrap().iter().enumerate() {
                                    self.lint(p, &format!("{child_at}/{i}"), true);
                                }
                            }
                            _ => {}
                        }
                    } else if k == "schema" || at == "#/components/schemas" {
                        self.lint(child, &child_at, true);
                    } else {
                        self.lint(child, &child_at, false);
                    }
                }
            }
            Value::Array(items) => {
                for (i, x) in items.iter().enumerate() {
                    self.lint(x, &format!("{at}/{i}"), in_schema);
                }
            }
            _ => {}
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The document on its own.

#[test]
fn document_is_openapi_3_0() {
    let doc = doc();
    let version = doc["openapi"].as_str().expect("openapi version");
    assert!(version.starts_with("3.0."), "openapi {version}: this document is OpenAPI 3.0.x");
    assert_eq!(doc["info"]["version"], env!("CARGO_PKG_VERSION"), "info.version is the crate's version");
    assert!(doc["info"]["title"].is_string());
    let checker = Checker::new(&doc);
    checker.lint(&doc, "#", false);
    let mut ids = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        assert!(path.starts_with('/'), "{path}");
        for (method, op) in item.as_object().unwrap() {
            if method == "parameters" {
                continue;
            }
            assert!(METHODS.contains(&method.as_str()), "{path}: {method} is not an HTTP method");
            let op_id = op["operationId"].as_str().unwrap_or_else(|| panic!("{method} {path}: no operationId"));
            assert!(ids.insert(op_id.to_string()), "operationId {op_id} twice");
            let responses = op["responses"].as_object().unwrap_or_else(|| panic!("{method} {path}: no responses"));
            assert!(!responses.is_empty());
            for (status, r) in responses {
                assert!(status.len() == 3 && status.parse::<u16>().is_ok(), "{method} {path}: status {status}");
                assert!(checker.deref(r)["description"].is_string(), "{method} {path} {status}: description");
            }
            // Every path template variable is declared as a required path parameter.
            let declared: BTreeSet<String> = item
                .get("parameters")
                .into_iter()
                .chain(op.get("parameters"))
                .flat_map(|p| p.as_array().unwrap())
                .map(|p| checker.deref(p))
                .filter(|p| p["in"] == "path")
                .inspect(|p| assert_eq!(p["required"], true, "{method} {path}: path parameter {}", p["name"]))
                .map(|p| p["name"].as_str().unwrap().to_string())
                .collect();
            let in_template: BTreeSet<String> = path
                .split('/')
                .filter_map(|seg| seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
                .map(String::from)
                .collect();
            assert_eq!(declared, in_template, "{method} {path}: path parameters");
        }
    }
    // The schemas' own examples are valid.
    let spec_example = &doc["components"]["schemas"]["ProcessSpec"]["example"];
    checker.check(checker.schema("ProcessSpec"), spec_example).unwrap();
}

/// `(METHOD, path)` of every `.route("path", get(..).delete(..))` in src/api/mod.rs, read as text.
fn router_routes() -> BTreeSet<(String, String)> {
    let routes = parse_routes(&std::fs::read_to_string(API_SOURCE).unwrap());
    assert!(routes.len() >= 5, "found too few routes in src/api/mod.rs: {routes:?}");
    routes
}

fn parse_routes(src: &str) -> BTreeSet<(String, String)> {
    // `.fallback(` and `.method_not_allowed_fallback(` serve no route, only the 404/405 errors
    // the document's description states; they need no operation.
    for unsupported in [".nest(", ".merge(", ".route_service(", ".nest_service("] {
        assert!(!src.contains(unsupported), "src/api/mod.rs uses {unsupported}: teach tests/openapi.rs to read it");
    }
    let method_call = regex::Regex::new(r"(?:^|\.|::)\s*(get|post|put|delete|patch|head|options|trace)\s*\(").unwrap();
    let mut routes = BTreeSet::new();
    let mut rest = src;
    while let Some(start) = rest.find(".route(") {
        let args_start = start + ".route(".len();
        // The call's arguments: up to the matching parenthesis (no parentheses in the path).
        let mut depth = 1;
        let mut end = args_start;
        for (i, c) in rest[args_start..].char_indices() {
            match c {
                '(' => depth += 1,
                ')' => depth -= 1,
                _ => {}
            }
            if depth == 0 {
                end = args_start + i;
                break;
            }
        }
        let args = rest[args_start..end].trim();
        let path_end = args[1..].find('"').expect("route path literal") + 1;
        assert!(args.starts_with('"'), "route without a literal path: {args}");
        let path = &args[1..path_end];
        let handlers = args[path_end + 1..].trim_start().strip_prefix(',').expect("route's method router").trim();
        let methods: Vec<String> = method_call.captures_iter(handlers).map(|c| c[1].to_uppercase()).collect();
        assert!(!methods.is_empty(), "no methods in route {path}: {handlers}");
        for m in methods {
            assert!(routes.insert((m.clone(), path.to_string())), "{m} {path} routed twice");
        }
        rest = &rest[end..];
    }
    routes
}

#[test]
fn route_parser_reads_chained_and_wrapped_routes() {
    let src = r#"
        Router::new()
            .route("/a", get(a))
            .route("/b/{x}", get(status).delete(delete))
            .route(
                "/c/{x}/{y}",
                axum::routing::post(handlers::c)
                    .put(put_it),
            )
            .route("/m", get(metrics::metrics))
    "#;
    let got: Vec<(String, String)> = parse_routes(src).into_iter().collect();
    let want: Vec<(String, String)> = [
        ("DELETE", "/b/{x}"),
        ("GET", "/a"),
        ("GET", "/b/{x}"),
        ("GET", "/m"),
        ("POST", "/c/{x}/{y}"),
        ("PUT", "/c/{x}/{y}"),
    ]
    .iter()
    .map(|(m, p)| (m.to_string(), p.to_string()))
    .collect();
    assert_eq!(got, want);
}

#[test]
fn document_operations_are_the_routes_served() {
    let doc = doc();
    let documented: BTreeSet<(String, String)> = doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, item)| {
            item.as_object()
                .unwrap()
                .keys()
                .filter(|m| METHODS.contains(&m.as_str()))
                .map(move |m| (m.to_uppercase(), path.clone()))
        })
        .collect();
    let served = router_routes();
    let undocumented: Vec<_> = served.difference(&documented).collect();
    let unserved: Vec<_> = documented.difference(&served).collect();
    assert!(
        undocumented.is_empty() && unserved.is_empty(),
        "served but not in docs/openapi.json: {undocumented:?}\nin docs/openapi.json but not served: {unserved:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// The API's types, every variant, against the schemas.

fn all_exit_statuses() -> Vec<ExitStatus> {
    let all = vec![
        ExitStatus::Code(3),
        ExitStatus::Code(-1),
        ExitStatus::Signal(9),
        ExitStatus::Unknown,
        ExitStatus::Removed,
    ];
    // A new variant breaks this match: add it above (and to the document).
    for e in &all {
        match e {
            ExitStatus::Code(_) | ExitStatus::Signal(_) | ExitStatus::Unknown | ExitStatus::Removed => {}
        }
    }
    all
}

fn all_states() -> Vec<State> {
    let mut all = vec![State::Staging, State::Starting, State::Running, State::Stopped];
    for goal in [
        StopGoal::Stop,
        StopGoal::Restart,
        StopGoal::Delete,
        StopGoal::Fail { reason: "health check".into() },
        StopGoal::Fence,
    ] {
        match goal {
            StopGoal::Stop | StopGoal::Restart | StopGoal::Delete | StopGoal::Fail { .. } | StopGoal::Fence => {}
        }
        all.push(State::Stopping { goal });
    }
    for status in all_exit_statuses() {
        all.push(State::Exited { status });
    }
    all.push(State::Failed { reason: "exited with code 1; not restarted".into() });
    all.push(State::Backoff { until_ms: 1_795_310_198_172 });
    all.push(State::Lost { reason: "dockerd at /var/run/docker.sock is unreachable".into() });
    for s in &all {
        match s {
            State::Staging
            | State::Starting
            | State::Running
            | State::Stopping { .. }
            | State::Stopped
            | State::Exited { .. }
            | State::Failed { .. }
            | State::Backoff { .. }
            | State::Lost { .. } => {}
        }
    }
    all
}

#[test]
fn serde_output_of_every_variant_matches_the_schemas() {
    let doc = doc();
    let c = Checker::new(&doc);
    for e in all_exit_statuses() {
        let v = serde_json::to_value(e).unwrap();
        c.check(c.schema("ExitStatus"), &v).unwrap_or_else(|err| panic!("ExitStatus {v}: {err}"));
    }
    let mut kinds = BTreeSet::new();
    for s in all_states() {
        let v = serde_json::to_value(&s).unwrap();
        c.check(c.schema("State"), &v).unwrap_or_else(|err| panic!("State {v}: {err}"));
        let kind = serde_json::to_value(s.kind()).unwrap();
        c.check(c.schema("StateKind"), &kind).unwrap_or_else(|err| panic!("Kind {kind}: {err}"));
        kinds.insert(kind.as_str().unwrap().to_string());
    }
    let documented: BTreeSet<String> =
        c.schema("StateKind")["enum"].as_array().unwrap().iter().map(|k| k.as_str().unwrap().to_string()).collect();
    assert_eq!(kinds, documented, "StateKind's enum is every Kind");
    let mapped: BTreeSet<String> =
        c.schema("State")["discriminator"]["mapping"].as_object().unwrap().keys().cloned().collect();
    assert_eq!(mapped, documented, "State's discriminator maps every Kind");

    // InstanceStatus with every optional part absent, then present.
    let mut status = InstanceStatus {
        id: id("ns", "app", 0),
        state: State::Stopped,
        pid: None,
        pids: vec![],
        last_exit: None,
        last_exit_reason: None,
        message: String::new(),
        restarts: 0,
        last_start_ms: None,
        updated_ms: 1,
        ports: BTreeMap::new(),
        usage: None,
        health: None,
        checks: vec![],
        ready: false,
        containers: vec![],
        spec_generation: 1,
        run_generation: 0,
        revision: 2,
        run_revision: 1,
        limits: None,
        kept: false,
    };
    for full in [false, true] {
        if full {
            status.state = State::Running;
            status.pid = Some(42);
            status.pids = vec![Some(42), None];
            status.last_exit = Some(ExitStatus::Signal(15));
            status.last_start_ms = Some(2);
            status.ports.insert("http".into(), 31000);
            status.usage =
                Some(Usage { cpu_usage_usec: 1, memory_bytes: 2, oom_kills: 0, tasks: 3, tasks_max: Some(64) });
            status.limits = Some(steward::spec::model::InstanceLimits { cpu_cores: Some(0.5), memory_mib: None });
            status.health = Some("unhealthy".into());
            status.checks = vec![
                Some(Health {
                    healthy: Some(false),
                    consecutive_failures: 2,
                    last_failure: Some("connection refused".into()),
                    checked_ms: Some(3),
                }),
                Some(Health::default()),
                None,
            ];
            status.kept = true;
            status.containers = vec![steward::runtime::docker::ContainerInfo {
                id: "1a60aa85685e".into(),
                name: "steward-ns.app.0-main".into(),
                pid: 42,
                start_at: "2026-11-23T02:46:57.670721637Z".into(),
                status: "running".into(),
                network_mode: "bridge".into(),
                ip_address: "172.17.0.2".into(),
                oom_killed: true,
                ..Default::default()
            }];
        }
        let v = serde_json::to_value(&status).unwrap();
        c.check(c.schema("InstanceStatus"), &v).unwrap_or_else(|err| panic!("InstanceStatus {v}: {err}"));
    }
}

// ---------------------------------------------------------------------------------------------
// Every protocol type, every variant, against its schema; and each reads back as itself.

/// Checks `value`'s serde output against schema `name` and that it deserializes to itself.
fn conforms_as<T>(c: &Checker, name: &str, value: &T)
where
    T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let v = serde_json::to_value(value).unwrap();
    c.check(c.schema(name), &v).unwrap_or_else(|err| panic!("{name} {v}: {err}"));
    let back: T = serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{name} {v} does not read back: {e}"));
    assert_eq!(&back, value, "{name} {v} reads back as another value");
}

fn container() -> steward::runtime::docker::ContainerInfo {
    steward::runtime::docker::ContainerInfo {
        id: "1a60aa85685e".into(),
        name: "steward-ns.app.0-main".into(),
        status: "exited".into(),
        exit_code: 137,
        ..Default::default()
    }
}

fn all_instance_changes() -> Vec<InstanceChange> {
    let mut all = vec![InstanceChange::Created { state: State::Staging }];
    // A transition with only what every one has, then with everything.
    let bare = Transition::new(Kind::Starting, &State::Running, "main process running", "", vec![], &[]);
    assert_eq!((bare.state.is_none(), bare.message.is_none(), bare.pids.is_none()), (true, true, true));
    all.push(InstanceChange::Transition(bare));
    let ended = State::Exited { status: ExitStatus::Code(1) };
    all.push(InstanceChange::Transition(Transition::new(
        Kind::Running,
        &ended,
        "main process exited with code 1",
        "not restarted",
        vec![Some(42), None],
        &[container()],
    )));
    // Before 0.2 a transition had no reason; before issue 32 it always had state, message, pids.
    all.push(InstanceChange::Transition(Transition {
        from: Kind::Stopped,
        to: Kind::Staging,
        reason: None,
        state: Some(State::Staging),
        message: Some(String::new()),
        pids: Some(vec![]),
        containers: None,
    }));
    all.push(InstanceChange::SpecUpdated { detail: SpecUpdated { generation: 2 } });
    all.push(InstanceChange::Reloaded { detail: NoDetail {} });
    all.push(InstanceChange::Restarted { detail: RestartedBy { by: "restartCmd".into() } });
    for (healthy, last_failure) in [(Some(false), Some("connection refused".to_string())), (None, None)] {
        all.push(InstanceChange::HealthChanged { detail: HealthChanged { process: 0, healthy, last_failure } });
    }
    for (ready, reason) in [(true, None), (false, Some("GET http://127.0.0.1:8080/ready: HTTP 503".to_string()))] {
        all.push(InstanceChange::ReadyChanged { detail: ReadyChanged { ready, process: 0, reason } });
    }
    all.push(InstanceChange::OomKilled { detail: OomKilled { reason: "the OOM killer ended it".into() } });
    for (outcome, secs, message) in
        [("pulled", Some(1.5), ""), ("joined", Some(1.4), ""), ("presentAfterFailedPull", None, "denied")]
    {
        let detail = steward::protocol::ImagePulled {
            image: "127.0.0.1:5000/tiny:v1".into(),
            outcome: outcome.into(),
            secs,
            message: message.into(),
        };
        all.push(InstanceChange::ImagePulled { detail });
    }
    for container in [None, Some("side".to_string())] {
        let detail = steward::protocol::FileCopied {
            path: "/tmp/settings.ini".into(),
            bytes: 7,
            container,
            owner: "65534:65534".into(),
            mode: "0600".into(),
        };
        all.push(InstanceChange::FileCopied { detail });
    }
    for status in all_exit_statuses() {
        let detail = ContainerExited { container: "steward-ns.app.0-main".into(), status };
        all.push(InstanceChange::ContainerExited { detail });
    }
    all.push(InstanceChange::Deleted);
    for c in &all {
        // A new variant breaks this match: add it above (and to the document).
        match c {
            InstanceChange::Created { .. }
            | InstanceChange::Transition(_)
            | InstanceChange::SpecUpdated { .. }
            | InstanceChange::Reloaded { .. }
            | InstanceChange::Restarted { .. }
            | InstanceChange::HealthChanged { .. }
            | InstanceChange::ReadyChanged { .. }
            | InstanceChange::OomKilled { .. }
            | InstanceChange::ImagePulled { .. }
            | InstanceChange::FileCopied { .. }
            | InstanceChange::ContainerExited { .. }
            | InstanceChange::Deleted => {}
        }
    }
    all
}

fn all_daemon_events() -> Vec<DaemonEvent> {
    let (namespace, name) = ("ns".to_string(), "creds".to_string());
    let all = vec![
        DaemonEvent::Applied { app: "ns/app".into(), generation: 1, instances: 3, selection: None },
        DaemonEvent::Applied { app: "ns/app".into(), generation: 2, instances: 3, selection: Some(vec![0, 2]) },
        DaemonEvent::AppDeleted { app: "ns/app".into() },
        DaemonEvent::SecretUpdated { namespace: namespace.clone(), name: name.clone(), keys: vec!["user".into()] },
        DaemonEvent::SecretDeleted { namespace: namespace.clone(), name: name.clone() },
        DaemonEvent::ConfigmapUpdated { namespace: namespace.clone(), name: name.clone(), keys: vec![] },
        DaemonEvent::ConfigmapDeleted { namespace, name },
        DaemonEvent::VolumeRemoved { namespace: "ns".into(), name: "world".into(), ordinal: 1, volume: "save".into() },
        DaemonEvent::ScaleIn {
            app: "ns/world".into(),
            ordinal: 2,
            run: "world-scale-in-2-g4".into(),
            step: "kept".into(),
            reason: "hook run ns/world-scale-in-2-g4 is Failed: players 5".into(),
        },
        DaemonEvent::ScaleIn {
            app: "ns/world".into(),
            ordinal: 1,
            run: "world-scale-in-1-g4".into(),
            step: "waiting".into(),
            reason: String::new(),
        },
        DaemonEvent::RolloutStarted { app: "ns/app".into(), revision: 2, from: 1 },
        DaemonEvent::RolloutBatch { app: "ns/app".into(), revision: 2, steps: Default::default() },
        DaemonEvent::RolloutBatch {
            app: "ns/app".into(),
            revision: 2,
            steps: steward::protocol::RolloutSteps {
                replaced: vec![0, 1],
                held: vec![2],
                started: vec![3],
                spares_added: vec![4],
                spares_removed: vec![5],
            },
        },
        DaemonEvent::RolloutPaused { app: "ns/app".into(), revision: 2 },
        DaemonEvent::RolloutResumed { app: "ns/app".into(), revision: 2 },
        DaemonEvent::RolloutCompleted { app: "ns/app".into(), revision: 2 },
        DaemonEvent::RolloutFailed { app: "ns/app".into(), revision: 2, reason: "instance 3 exited".into() },
        DaemonEvent::RolloutRolledBack { app: "ns/app".into(), revision: 2, to: 1, new_revision: 3 },
        DaemonEvent::RolloutGate { app: "ns/app".into(), revision: 2, gate: 1, what: "hook check".into() },
        DaemonEvent::JobRunEnded {
            app: "ns/app".into(),
            index: 3,
            phase: steward::protocol::RunPhase::Failed,
            exit_code: Some(3),
            reason: "exited 3".into(),
        },
        DaemonEvent::JobRunEnded {
            app: "ns/app".into(),
            index: 4,
            phase: steward::protocol::RunPhase::Failed,
            exit_code: None,
            reason: "stopped at its active deadline (5 s)".into(),
        },
        DaemonEvent::JobEnded { app: "ns/app".into(), phase: "complete".into(), reason: String::new() },
        DaemonEvent::CronTick { app: "ns/app".into(), tick_ms: 5, outcome: "missed".into(), missed: 2 },
        DaemonEvent::JobEnded { app: "ns/app".into(), phase: "failed".into(), reason: "7 failure(s)".into() },
        DaemonEvent::HookTemplateUpdated { namespace: "ns".into(), name: "t".into() },
        DaemonEvent::HookTemplateDeleted { namespace: "ns".into(), name: "t".into() },
        DaemonEvent::HookRunCreated { namespace: "ns".into(), name: "r".into(), template: "t".into() },
        DaemonEvent::HookRunMeasured {
            namespace: "ns".into(),
            name: "r".into(),
            metric: "m".into(),
            phase: steward::hooks::MeasurementPhase::Failed,
            value: Some("32".into()),
        },
        DaemonEvent::HookRunMeasured {
            namespace: "ns".into(),
            name: "r".into(),
            metric: "m".into(),
            phase: steward::hooks::MeasurementPhase::Error,
            value: None,
        },
        DaemonEvent::HookRunFinished {
            namespace: "ns".into(),
            name: "r".into(),
            phase: steward::hooks::MetricPhase::Failed,
            message: "metric m Failed".into(),
        },
        DaemonEvent::HookRunDeleted { namespace: "ns".into(), name: "r".into() },
    ];
    for e in &all {
        match e {
            DaemonEvent::Applied { .. }
            | DaemonEvent::AppDeleted { .. }
            | DaemonEvent::SecretUpdated { .. }
            | DaemonEvent::SecretDeleted { .. }
            | DaemonEvent::ConfigmapUpdated { .. }
            | DaemonEvent::ConfigmapDeleted { .. }
            | DaemonEvent::VolumeRemoved { .. }
            | DaemonEvent::ScaleIn { .. }
            | DaemonEvent::RolloutStarted { .. }
            | DaemonEvent::RolloutBatch { .. }
            | DaemonEvent::RolloutPaused { .. }
            | DaemonEvent::RolloutResumed { .. }
            | DaemonEvent::RolloutCompleted { .. }
            | DaemonEvent::RolloutFailed { .. }
            | DaemonEvent::RolloutRolledBack { .. }
            | DaemonEvent::RolloutGate { .. }
            | DaemonEvent::JobRunEnded { .. }
            | DaemonEvent::JobEnded { .. }
            | DaemonEvent::CronTick { .. }
            | DaemonEvent::HookTemplateUpdated { .. }
            | DaemonEvent::HookTemplateDeleted { .. }
            | DaemonEvent::HookRunCreated { .. }
            | DaemonEvent::HookRunMeasured { .. }
            | DaemonEvent::HookRunFinished { .. }
            | DaemonEvent::HookRunDeleted { .. } => {}
        }
    }
    all
}

fn all_sched_events() -> Vec<SchedEvent> {
    let (node, instance, app) = ("h1".to_string(), "ns/app/0".to_string(), "ns/app".to_string());
    let app_key = app.clone();
    let all = vec![
        SchedEvent::NodeUp { node: node.clone() },
        SchedEvent::NodeBack { node: node.clone() },
        SchedEvent::NodeLost { node: node.clone(), silent_secs: 45.5 },
        SchedEvent::InstanceLost { instance: instance.clone(), node: node.clone() },
        SchedEvent::NotRescheduled {
            app: Some(app.clone()),
            instance: None,
            node: node.clone(),
            policy: RestartPolicyKind::OnFailure,
            reason: "restartPolicy reschedules on Lost only when Always".into(),
        },
        SchedEvent::NotRescheduled {
            app: None,
            instance: Some(instance.clone()),
            node: node.clone(),
            policy: RestartPolicyKind::Never,
            reason: "restartPolicy Never".into(),
        },
        SchedEvent::Rescheduled {
            instance: instance.clone(),
            from: node.clone(),
            to: Some("h2".into()),
            reason: "lost".into(),
        },
        SchedEvent::Rescheduled { instance: instance.clone(), from: node.clone(), to: None, reason: "failed".into() },
        SchedEvent::RescheduleFailed { app, from: node.clone(), error: "no node".into() },
        SchedEvent::StrayDeleted { instance: instance.clone(), node: node.clone(), ok: true },
        SchedEvent::NodeReconciled { node: node.clone() },
        SchedEvent::RemoteCheckInvalid { instance: instance.clone(), message: "no port".into() },
        SchedEvent::RemoteHealth {
            instance: instance.clone(),
            node: node.clone(),
            healthy: None,
            message: String::new(),
        },
        SchedEvent::RemoteCheckRestart {
            instance: instance.clone(),
            node: node.clone(),
            reason: "3 failures".into(),
            ok: false,
        },
        SchedEvent::DeleteDone { app: app_key.clone(), node: node.clone(), removed: 2 },
        SchedEvent::InstanceStopped { instance: instance.clone(), node: node.clone() },
        SchedEvent::InstanceStarted { instance, node },
        SchedEvent::ClusterReloaded { added: vec!["h4".into()], removed: vec![], changed: vec!["h2".into()] },
        SchedEvent::ClusterReloadFailed { error: "cluster file /etc/steward/cluster.toml: lists no [[node]]".into() },
        SchedEvent::Leading { who: "sched1-4242".into() },
        SchedEvent::LeadershipLost { who: "sched1-4242".into(), reason: "the lease expired".into() },
        SchedEvent::PendingApplied { app: app_key.clone() },
        SchedEvent::InstanceMissing { instance: "ns/app/3".into(), node: "h2".into() },
        SchedEvent::MaintenanceChanged { on: true, reason: "moving racks".into() },
        SchedEvent::RevisionBehind { app: app_key.clone(), node: "h2".into(), revision: Some(3), error: None },
        SchedEvent::EndpointsUpdated { app: app_key.clone(), revision: 4, ready: 2, nodes: 3, of: 3 },
        SchedEvent::DesiredHanded {
            node: "h3".into(),
            dropped_apps: vec![app_key.clone()],
            dropped_endpoints: vec![app_key.clone()],
            lacking: vec![],
            draining_apps: vec!["game/world".into()],
        },
        SchedEvent::DependencyStarted {
            dependency: "infra/cache".into(),
            instance: "game/cache/0".into(),
            node: "h1".into(),
            error: Some("no answer".into()),
        },
        SchedEvent::DependencyIdle {
            dependency: "infra/cache".into(),
            instance: "infra/cache/0".into(),
            node: "h1".into(),
            grace_secs: 300,
        },
        SchedEvent::DependencyRemoved {
            dependency: "infra/cache".into(),
            instance: "infra/cache/0".into(),
            node: "h1".into(),
            ok: true,
        },
    ];
    for e in &all {
        match e {
            SchedEvent::NodeUp { .. }
            | SchedEvent::NodeBack { .. }
            | SchedEvent::NodeLost { .. }
            | SchedEvent::InstanceLost { .. }
            | SchedEvent::NotRescheduled { .. }
            | SchedEvent::Rescheduled { .. }
            | SchedEvent::RescheduleFailed { .. }
            | SchedEvent::StrayDeleted { .. }
            | SchedEvent::NodeReconciled { .. }
            | SchedEvent::RemoteCheckInvalid { .. }
            | SchedEvent::RemoteHealth { .. }
            | SchedEvent::RemoteCheckRestart { .. }
            | SchedEvent::DeleteDone { .. }
            | SchedEvent::InstanceStopped { .. }
            | SchedEvent::InstanceStarted { .. }
            | SchedEvent::ClusterReloaded { .. }
            | SchedEvent::ClusterReloadFailed { .. }
            | SchedEvent::Leading { .. }
            | SchedEvent::LeadershipLost { .. }
            | SchedEvent::PendingApplied { .. }
            | SchedEvent::InstanceMissing { .. }
            | SchedEvent::MaintenanceChanged { .. }
            | SchedEvent::RevisionBehind { .. }
            | SchedEvent::EndpointsUpdated { .. }
            | SchedEvent::DesiredHanded { .. }
            | SchedEvent::DependencyStarted { .. }
            | SchedEvent::DependencyIdle { .. }
            | SchedEvent::DependencyRemoved { .. } => {}
        }
    }
    all
}

fn all_desired_changes() -> Vec<DesiredChange> {
    let (app, node) = ("ns/app".to_string(), "h1".to_string());
    let placements = BTreeMap::from([("0".to_string(), node.clone())]);
    let all = vec![
        DeployCause::Deployed.change(&app, placements.clone()),
        DeployCause::Scaled { instances: 1 }.change(&app, placements.clone()),
        DeployCause::Rescheduled { reason: "lost".into() }.change(&app, placements.clone()),
        DeployCause::PendingApplied.change(&app, placements.clone()),
        DeployCause::Restarted.change(&app, placements),
        DesiredChange::Restarted { app: app.clone(), instance: Some(2) },
        DesiredChange::ConfigChanged { key: "reconcileSecs".into(), value: 3 },
        DesiredChange::Applied { app: app.clone() },
        DesiredChange::Lost { app: app.clone(), node: node.clone(), instances: vec![0] },
        DesiredChange::NodeBack { app: app.clone(), node: node.clone() },
        DesiredChange::Failed { instance: "ns/app/0".into(), node: node.clone() },
        DesiredChange::RolloutStarted { app: app.clone() },
        DesiredChange::RolloutNode { app: app.clone(), node, revision: 4 },
        DesiredChange::RolloutPaused { app: app.clone() },
        DesiredChange::RolloutResumed { app: app.clone() },
        DesiredChange::RolloutCompleted { app: app.clone() },
        DesiredChange::RolloutFailed { app: app.clone(), reason: "h2: instance 3 of revision 2: exited".into() },
        DesiredChange::HookTemplateStored { namespace: "ns".into(), name: "check".into() },
        DesiredChange::HookTemplateDeleted { namespace: "ns".into(), name: "check".into() },
        DesiredChange::Deleting { app: app.clone(), nodes: vec!["h2".into()] },
        DesiredChange::DeletedOn { app: app.clone(), node: "h2".into() },
        DesiredChange::Stopped { app: app.clone(), instances: vec![0] },
        DesiredChange::Started { app: app.clone(), instances: vec![0] },
        DesiredChange::MaintenanceOn { reason: "moving racks".into() },
        DesiredChange::MaintenanceOff {},
        DesiredChange::Cordoned { node: "h2".into(), preferred: true, reason: "disk".into() },
        DesiredChange::Uncordoned { node: "h2".into() },
        DesiredChange::ConstraintSet {
            constraint: steward::protocol::Constraint {
                kind: "node".into(),
                value: "h3".into(),
                equal: false,
                soft: true,
                since_ms: 1,
            },
        },
        DesiredChange::ConstraintRemoved { kind: "node".into(), value: Some("h3".into()) },
        DesiredChange::NotifyAdded { url: "http://127.0.0.1:9/hook".into() },
        DesiredChange::NotifyRemoved { url: "http://127.0.0.1:9/hook".into() },
        DesiredChange::Drifted { app: app.clone(), instance: 1, from: "h2".into(), to: "h3".into() },
        DesiredChange::NodeState { node: "h2".into(), state: steward::protocol::NodeState::Lost },
        DesiredChange::DependencyStored { dependency: "infra/cache".into(), revision: 2 },
        DesiredChange::DependencyCopies {
            dependency: "infra/cache".into(),
            copy: "h1/game".into(),
            what: "idle".into(),
        },
        DesiredChange::DependencyDeleted { dependency: "infra/cache".into() },
        DesiredChange::AppDeleted { app },
    ];
    for c in &all {
        match c {
            DesiredChange::Deployed { .. }
            | DesiredChange::Scaled { .. }
            | DesiredChange::Rescheduled { .. }
            | DesiredChange::Restarted { .. }
            | DesiredChange::ConfigChanged { .. }
            | DesiredChange::Applied { .. }
            | DesiredChange::Lost { .. }
            | DesiredChange::NodeBack { .. }
            | DesiredChange::Failed { .. }
            | DesiredChange::RolloutStarted { .. }
            | DesiredChange::RolloutNode { .. }
            | DesiredChange::RolloutPaused { .. }
            | DesiredChange::RolloutResumed { .. }
            | DesiredChange::RolloutCompleted { .. }
            | DesiredChange::RolloutFailed { .. }
            | DesiredChange::HookTemplateStored { .. }
            | DesiredChange::HookTemplateDeleted { .. }
            | DesiredChange::Deleting { .. }
            | DesiredChange::DeletedOn { .. }
            | DesiredChange::Stopped { .. }
            | DesiredChange::Started { .. }
            | DesiredChange::MaintenanceOn { .. }
            | DesiredChange::MaintenanceOff {}
            | DesiredChange::Cordoned { .. }
            | DesiredChange::Uncordoned { .. }
            | DesiredChange::ConstraintSet { .. }
            | DesiredChange::ConstraintRemoved { .. }
            | DesiredChange::NotifyAdded { .. }
            | DesiredChange::NotifyRemoved { .. }
            | DesiredChange::Drifted { .. }
            | DesiredChange::NodeState { .. }
            | DesiredChange::DependencyStored { .. }
            | DesiredChange::DependencyCopies { .. }
            | DesiredChange::DependencyDeleted { .. }
            | DesiredChange::AppDeleted { .. } => {}
        }
    }
    all
}

/// The `type` of each value, as a set.
fn types_of<T: serde::Serialize>(all: &[T]) -> BTreeSet<String> {
    all.iter().map(|x| serde_json::to_value(x).unwrap()["type"].as_str().unwrap().to_string()).collect()
}

fn mapping(c: &Checker, name: &str) -> BTreeSet<String> {
    c.schema(name)["discriminator"]["mapping"].as_object().unwrap().keys().cloned().collect()
}

#[test]
fn every_protocol_type_matches_its_schema() {
    let doc = doc();
    let c = Checker::new(&doc);
    let mut bodies: Vec<EventBody> =
        all_instance_changes().into_iter().map(|change| EventBody::instance("ns/app/0", change)).collect();
    bodies.extend(all_daemon_events().into_iter().map(EventBody::Daemon));
    for (seq, body) in bodies.iter().enumerate() {
        conforms_as(&c, "EventBody", body);
        let event = Event { seq: seq as u64 + 1, at_ms: 1_795_310_198_172, body: body.clone() };
        conforms_as(&c, "Event", &event);
        let line = NodeLine { node: "h1".into(), item: NodeItem::Event(event) };
        conforms_as(&c, "NodeLine", &line);
    }
    let mut documented = types_of(&all_instance_changes());
    documented.extend(types_of(&all_daemon_events()));
    assert_eq!(documented, mapping(&c, "EventBody"), "EventBody's mapping is every body type");

    // A body about one instance keeps `instance` first, as the journal always had it.
    let text = serde_json::to_string(&EventBody::instance("ns/app/0", InstanceChange::Deleted)).unwrap();
    assert_eq!(text, r#"{"instance":"ns/app/0","type":"deleted"}"#);
    // A newer daemon's body is kept whole, not refused.
    let newer = json!({"instance": "ns/app/0", "type": "paused", "detail": {"by": "operator"}});
    let read: EventBody = serde_json::from_value(newer.clone()).unwrap();
    assert_eq!(read, EventBody::Other(newer));
    assert_eq!((read.kind().as_str(), read.instance_id()), ("paused", Some("ns/app/0")));

    let beat = StreamLine::Heartbeat { heartbeat: Heartbeat { at_ms: 5, last_seq: 9 } };
    conforms_as(&c, "Heartbeat", &beat);

    for sched in all_sched_events() {
        conforms_as(&c, "SchedEvent", &sched);
        conforms_as(&c, "SchedLine", &SchedLine::now(sched));
    }
    assert_eq!(types_of(&all_sched_events()), mapping(&c, "SchedEvent"), "SchedEvent's mapping is every type");
    for item in [
        NodeItem::Heartbeat { heartbeat: NodeHeartbeat { last_seq: 3 } },
        NodeItem::Gap { gap: Gap { from: 4, to: 9 } },
        NodeItem::Disconnected { disconnected: Disconnected { reason: "the stream ended".into(), resume_after: 9 } },
        NodeItem::Resync { resync: steward::protocol::sched::Resync { was: 10, last_seq: 0 } },
    ] {
        conforms_as(&c, "NodeLine", &NodeLine { node: "h1".into(), item });
    }
    for change in all_desired_changes() {
        conforms_as(&c, "DesiredChange", &change);
    }
    assert_eq!(types_of(&all_desired_changes()), mapping(&c, "DesiredChange"), "DesiredChange's mapping");

    // The node document, with and without a pending port range, with and without the kernel's
    // ephemeral range (and its overlap).
    let ephemeral = steward::ephemeral_ports::Ephemeral { range: (31500, 60999), reserved: Vec::new() };
    for (configured, with_ephemeral) in [((31000, 31999), false), ((31000, 32999), true)] {
        let ports = PortsDocument::new((31000, 31999), 998, configured);
        let ports = if with_ephemeral { ports.with_ephemeral(&ephemeral) } else { ports };
        let node = NodeDocument {
            hostname: "h1".into(),
            host_ip: "10.0.0.1".into(),
            cpus: 8,
            cpu_usage_percent: 12.5,
            load_average: 0.25,
            memory_total_bytes: 16 << 30,
            memory_available_bytes: 8 << 30,
            memory_used_bytes: 8 << 30,
            labels: BTreeMap::from([("rack".into(), "a1".into())]),
            attributes: BTreeMap::new(),
            os: "linux".into(),
            arch: "amd64".into(),
            zone: with_ephemeral.then(|| "sh-a".into()),
            region: with_ephemeral.then(|| "sh".into()),
            instance_type: with_ephemeral.then(|| "c6.large".into()),
            ports,
            resources: ResourcesDocument::new(
                steward::resources::HostResources {
                    capacity: steward::resources::Requests { milli_cpu: 8000, memory_bytes: 16 << 30 },
                    reserved: steward::resources::Requests { milli_cpu: 500, memory_bytes: 1 << 30 },
                },
                steward::resources::Requests { milli_cpu: 250, memory_bytes: 128 << 20 },
            ),
            instances: 1,
            apps: vec![AppOnNode {
                namespace: "ns".into(),
                name: "app".into(),
                labels: BTreeMap::new(),
                instances: vec![
                    InstanceOnNode { index: 0, state: Kind::Running, ready: true, kept: false },
                    InstanceOnNode { index: 2, state: Kind::Stopped, ready: false, kept: true },
                ],
                hash: "0123456789abcdef".into(),
            }],
            events: JournalBounds {
                first_seq: 1,
                last_seq: 7,
                retention: 100_000,
                max_bytes: 1 << 26,
                bytes: 900,
                journal_id: 1_795_310_198_172_000_000,
            },
            version: env!("CARGO_PKG_VERSION").into(),
            desired_mark: steward::protocol::DesiredMark { boot: 1_795_310_198_172_004_242, mark: 12 },
            kept_volumes: if with_ephemeral { vec!["ns/world/1".into()] } else { Vec::new() },
            pod_dns: with_ephemeral.then(|| "10.96.0.10".into()),
        };
        assert_eq!(node.ports.pending.is_some(), configured != (31000, 31999));
        conforms_as(&c, "Node", &node);
    }

    conforms_as(&c, "Health", &HealthBody::ok());
    let applied = Applied {
        instances: vec!["ns/app/0".into()],
        generation: 1,
        revision: 1,
        changed: vec![],
        created: vec![],
        unchanged: true,
        rollout: false,
    };
    conforms_as(&c, "Applied", &applied);
    let rolling = Applied { changed: vec!["ns/app/0".into()], unchanged: false, rollout: true, ..applied };
    conforms_as(&c, "Applied", &rolling);
    conforms_as(&c, "AppDeleted", &Deleted { deleted: vec!["ns/app/0".into()] });
    let summary = ValuesSummary { namespace: "ns".into(), name: "creds".into(), keys: vec!["k".into()], updated_ms: 1 };
    conforms_as(&c, "ValuesSummary", &summary);
    conforms_as(&c, "ValuesList", &ValuesList { items: vec![summary] });
    let kept = steward::protocol::KeptVolume {
        namespace: "ns".into(),
        name: "world".into(),
        ordinal: 1,
        volume: "save".into(),
        path: "/var/lib/steward/volumes/ns/world/1/save".into(),
        bytes: 12,
        instance: Some("ns/world/1".into()),
    };
    conforms_as(&c, "KeptVolume", &kept);
    conforms_as(
        &c,
        "VolumeList",
        &steward::protocol::VolumeList {
            items: vec![kept.clone(), steward::protocol::KeptVolume { instance: None, ..kept }],
        },
    );
    conforms_as(&c, "ValuesBody", &ValuesBody { data: BTreeMap::from([("k".into(), "v".into())]) });
    for time in [None, Some("2026-11-23T02:46:57.670721637Z".to_string())] {
        let line = LogLine { process: "main".into(), stream: "stdout".into(), time, line: "hello".into() };
        conforms_as(&c, "LogLine", &line);
    }
    let spec_error = steward::spec::SpecError::new("metadata.name", "is required");
    for (field, errors) in [(None, vec![]), (Some("metadata.name".to_string()), vec![spec_error])] {
        let code = if errors.is_empty() { "not_found" } else { "invalid_spec" };
        let error = ErrorResponse { error: ErrorBody { code: code.into(), message: "x".into(), field, errors } };
        conforms_as(&c, "Error", &error);
    }
    conforms_as(&c, "InstanceList", &InstanceList { instances: vec![] });
    use steward::protocol::{Rollout, RolloutBody, RolloutPhase, RolloutProgress};
    let revision = steward::protocol::RevisionInfo {
        revision: 2,
        hash: "0123456789abcdef".into(),
        created_ms: 1,
        applied_by: "user root (uid 0)".into(),
        current: true,
        outcome: Some(RolloutPhase::Failed { reason: "instance 3 of revision 2: exited".into() }),
    };
    let one = steward::protocol::RevisionSpec {
        app: "ns/app".into(),
        info: revision.clone(),
        // A spec as the store keeps it: serde's output of the parsed spec.
        spec: serde_json::to_value(
            serde_json::from_value::<steward::spec::ProcessSpec>(spec("app", 1, json!({}), json!({}))).unwrap(),
        )
        .unwrap(),
    };
    conforms_as(&c, "RevisionSpec", &one);
    conforms_as(
        &c,
        "RevisionList",
        &steward::protocol::RevisionList { app: "ns/app".into(), revisions: vec![revision] },
    );
    conforms_as(&c, "UndoRequest", &steward::protocol::UndoRequest { to_revision: Some(1) });
    conforms_as(&c, "UndoRequest", &steward::protocol::UndoRequest::default());
    let progress = RolloutProgress { instances: 10, updated: 4, ready: 3, spares: 1 };
    conforms_as(
        &c,
        "RolloutBody",
        &RolloutBody {
            app: "ns/app".into(),
            revision: 1,
            rollout: None,
            progress: Default::default(),
            scale_in: vec![],
        },
    );
    let scale_in = [steward::protocol::ScaleInPhase::Waiting, ScaleInPhase::Kept, ScaleInPhase::Held].map(|phase| {
        steward::protocol::ScaleIn {
            ordinal: 2,
            since_ms: 5,
            run: "world-scale-in-2-g4".into(),
            phase,
            reason: if phase == ScaleInPhase::Waiting { String::new() } else { "hook run … is Failed".into() },
        }
    });
    let body = RolloutBody {
        app: "ns/world".into(),
        revision: 1,
        rollout: None,
        progress: Default::default(),
        scale_in: scale_in.to_vec(),
    };
    conforms_as(&c, "RolloutBody", &body);
    let phases = [
        RolloutPhase::Progressing,
        RolloutPhase::Paused,
        RolloutPhase::Complete,
        RolloutPhase::Failed { reason: "instance 3 of revision 2: exited".into() },
    ];
    for phase in phases {
        let rollout = Rollout {
            target: 3,
            from: 2,
            last_good: 1,
            phase,
            started_ms: 1,
            updated_ms: 2,
            held: Some((3, 2)),
            spares: vec![10],
            kept: vec![11],
            steps: 5,
            rollback: true,
            rollback_of: Some(2),
            gate: 2,
            gate_started_ms: 3,
            message: "hook run ns/app-2-1-check".into(),
        };
        conforms_as(&c, "Rollout", &rollout);
        let body = RolloutBody {
            app: "ns/app".into(),
            revision: 2,
            rollout: Some(rollout),
            progress: progress.clone(),
            scale_in: vec![],
        };
        conforms_as(&c, "RolloutBody", &body);
    }

    // Hooks (issue 19): a template, a run of it with each kind of measurement, the listings.
    let template = steward::hooks::parse_template(
        &json!({"kind": "HookTemplate", "metadata": {"name": "t", "namespace": "ns"},
                "spec": {"args": [{"name": "port"}, {"name": "q", "value": "up"}],
                         "metrics": [{"name": "web", "count": 2, "interval": "1s", "successCondition": "asInt(result) < 30",
                                      "provider": {"web": {"url": "http://127.0.0.1:{{ args.port }}/",
                                                           "headers": [{"key": "X", "value": "{{ args.q }}"}], "jsonPath": "{$.age}"}}},
                                     {"name": "prom", "failureCondition": "result[0] > 1", "noData": "inconclusive",
                                      "provider": {"prometheus": {"address": "http://127.0.0.1:9090", "query": "{{ args.q }}"}}}]}})
        .to_string(),
        steward::spec::Format::Json,
    )
    .unwrap();
    conforms_as(&c, "HookTemplate", &template);
    conforms_as(&c, "HookTemplateList", &steward::hooks::run::HookTemplateList { items: vec![template.summary()] });
    let args = BTreeMap::from([("port".to_string(), "80".to_string())]);
    let labels = BTreeMap::from([("steward/app".to_string(), "ns/app".to_string())]);
    let mut run = steward::hooks::HookRun::new(&template, "r", &args, labels, 1).unwrap();
    conforms_as(&c, "HookRun", &run);
    use steward::hooks::metric::Measurement;
    for (i, phase) in [MeasurementPhase::Failed, MeasurementPhase::Error].into_iter().enumerate() {
        let mut m = run.status.metric_results[i].clone();
        let value = (phase == MeasurementPhase::Failed).then(|| "32".to_string());
        m.record(
            Measurement { phase, value, started_at_ms: 2, finished_at_ms: 3, message: "GET".into() },
            &template.spec.metrics[i],
        );
        run.update(i, m, 4);
    }
    run.terminate(5);
    conforms_as(&c, "HookRun", &run);
    conforms_as(&c, "HookRunList", &steward::hooks::run::HookRunList { items: vec![run.summary()] });
    let create = steward::hooks::CreateHookRun {
        template: "t".into(),
        namespace: "ns".into(),
        name: Some("r".into()),
        args,
        labels: BTreeMap::new(),
    };
    conforms_as(&c, "CreateHookRun", &create);

    // Jobs (issue 20): running with an active and a failed run, then failed.
    use steward::protocol::{JobBody, JobList, JobPhase, JobRun, JobStatus, RunPhase};
    let mut status = JobStatus::new(1);
    status.next_index = 2;
    status.not_before_ms = 5;
    status.failed = 1;
    status.runs = vec![
        JobRun {
            index: 0,
            phase: RunPhase::Failed,
            started_ms: 1,
            ended_ms: Some(2),
            exit_code: Some(3),
            reason: "exited 3".into(),
            restarts: 1,
        },
        JobRun {
            index: 1,
            phase: RunPhase::Active,
            started_ms: 6,
            ended_ms: None,
            exit_code: None,
            reason: String::new(),
            restarts: 0,
        },
    ];
    let body = JobBody { app: "ns/job".into(), completions: 2, parallelism: 1, active: 1, status: status.clone() };
    conforms_as(&c, "JobBody", &body);
    status.phase = JobPhase::Failed { reason: "past its jobDeadline (60 s)".into() };
    status.finished_ms = Some(9);
    let failed = JobBody { status: status.clone(), ..body.clone() };
    conforms_as(&c, "JobList", &JobList { items: vec![body, failed] });
    use steward::protocol::{CronBody, CronExecution, CronList, CronStatus};
    let mut cron = CronStatus::new(1);
    cron.next_tick_ms = Some(2);
    cron.last_tick_ms = Some(1);
    cron.suspended = true;
    cron.last_success_ms = Some(1);
    cron.last_failure_ms = Some(1);
    cron.last_failure = "replaced by a newer tick (Replace)".into();
    cron.executions = vec![
        CronExecution { tick_ms: 1, triggered: true, job: status.clone() },
        CronExecution { tick_ms: 2, triggered: false, job: JobStatus::new(2) },
    ];
    let body = CronBody {
        app: "ns/c".into(),
        rule: "*/5 * * * *".into(),
        time_zone: "UTC".into(),
        policy: "Forbid".into(),
        suspended: true,
        status: cron,
    };
    conforms_as(&c, "CronList", &CronList { items: vec![body] });
}

#[test]
fn the_checker_rejects_what_the_document_forbids() {
    let doc = doc();
    let c = Checker::new(&doc);
    let status = json!({
        "id": {"namespace": "a", "name": "b", "index": 0}, "state": {"state": "Running"}, "pid": 1, "pids": [1],
        "lastExit": null, "message": "", "restarts": 0, "lastStartMs": null, "updatedMs": 1, "ports": {}, "usage": null,
        "health": null, "checks": [], "specGeneration": 1, "runGeneration": 1
    });
    c.check(c.schema("InstanceStatus"), &status).unwrap();
    let bad = |path: &str, v: Value| {
        let mut s = status.clone();
        match v {
            Value::Null if path.starts_with('-') => {
                s.as_object_mut().unwrap().remove(&path[1..]);
            }
            v => *s.pointer_mut(path).unwrap_or_else(|| panic!("{path}")) = v,
        }
        assert!(c.check(c.schema("InstanceStatus"), &s).is_err(), "accepted {s}");
    };
    bad("-pids", Value::Null); // required
    bad("/restarts", json!(-1)); // minimum
    bad("/restarts", json!("0")); // type
    bad("/message", Value::Null); // not nullable
    bad("/ports", json!({"http": 70000})); // additionalProperties' maximum
    bad("/state", json!({"state": "Sleeping"})); // discriminator mapping
    bad("/state", json!({"state": "Backoff"})); // the variant's required untilMs
    bad("/state", json!({"state": "Running", "goal": {"kind": "Stop"}})); // closed variant
    bad("/lastExit", json!({"code": 1, "signal": 2})); // oneOf: none
    bad("/lastExit", json!("known")); // enum
    bad("/pids", json!([1.5])); // items
    bad("/health", json!("sick")); // enum
    bad("/checks", json!([{"healthy": true}])); // the item's required properties
    bad("/id", json!({"namespace": "a", "name": "b", "index": 0, "extra": 1})); // additionalProperties false
    let mut extra = status.clone();
    extra["health"] = json!("ok");
    assert!(c.check(c.schema("InstanceStatus"), &extra).is_err(), "undocumented field accepted");
    assert!(c.check(c.schema("ErrorBody"), &json!({"code": "invalid_spec", "message": "x", "errors": []})).is_err());
    assert!(c.check(c.schema("Event"), &json!({"seq": 1, "at_ms": 1, "body": {"type": "deleted"}})).is_err());
    c.check(c.schema("Event"), &json!({"seq": 1, "at_ms": 1, "body": {"type": "deleted", "instance": "a/b/0"}}))
        .unwrap();
}

#[tokio::test]
async fn every_api_error_matches_the_error_schema_and_its_status() {
    use axum::response::IntoResponse;
    use steward::api::error::ApiError;
    use steward::spec::{SpecError, SpecErrors};
    use steward::supervisor::SupervisorError;
    let doc = doc();
    let c = Checker::new(&doc);
    let errors = vec![
        ApiError::bad_request("bad").field("state"),
        ApiError::forbidden("no"),
        ApiError::internal("oops"),
        ApiError::invalid_spec(SpecErrors(vec![SpecError::new("", "TOML syntax error")])),
        ApiError::invalid_spec(SpecErrors(vec![
            SpecError::new("metadata.name", "is required"),
            SpecError::new("kind", "is required"),
        ])),
        SupervisorError::NotFound("a/b/0".into()).into(),
        SupervisorError::Failed("cannot reload".into()).into(),
        SupervisorError::Conflict("port 31000 is taken".into()).into(),
        SupervisorError::Invalid("secret name \"a b\" must be ...".into()).into(),
        SupervisorError::Store(steward::store::StoreError::AlreadyOpen {
            path: "/var/lib/steward/state/steward.redb".into(),
        })
        .into(),
        SupervisorError::Cgroups("gone".into()).into(),
        SupervisorError::Io(std::io::Error::other("io")).into(),
    ];
    let code_status = [
        ("bad_request", 400),
        ("forbidden", 403),
        ("not_found", 404),
        ("failed", 409),
        ("conflict", 409),
        ("invalid", 422),
        ("invalid_spec", 422),
        ("unavailable", 503),
        ("internal", 500),
    ];
    for e in errors {
        let resp = e.into_response();
        let status = resp.status().as_u16();
        let ct = resp.headers()["content-type"].to_str().unwrap().to_string();
        assert_eq!(ct, "application/json");
        let body = axum::body::to_bytes(resp.into_body(), usize::MAX).await.unwrap();
        let v: Value = serde_json::from_slice(&body).unwrap();
        c.check(c.schema("Error"), &v).unwrap_or_else(|err| panic!("{v}: {err}"));
        let code = v["error"]["code"].as_str().unwrap();
        assert_eq!(code_status.iter().find(|(c, _)| *c == code).map(|(_, s)| *s), Some(status), "{v}");
    }
}

// ---------------------------------------------------------------------------------------------
// A real daemon.

struct Resp {
    status: u16,
    content_type: Option<String>,
    body: Vec<u8>,
}

impl Resp {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{}: not JSON ({e}): {}", self.status, String::from_utf8_lossy(&self.body)))
    }
}

const NOBODY: libc::c_long = 65534;

/// A connection to the daemon; with `nobody`, made by a thread that is uid/gid 65534 (the peer
/// credentials the daemon sees are the connecting thread's).
fn connect(socket: &Path, nobody: bool) -> tokio::net::UnixStream {
    let socket = socket.to_path_buf();
    let std = if nobody {
        std::thread::spawn(move || {
            // Raw syscalls change only this thread (glibc's wrappers would change every thread).
            unsafe {
                assert_eq!(libc::syscall(libc::SYS_setgroups, 0 as libc::c_long, std::ptr::null::<libc::gid_t>()), 0);
                assert_eq!(libc::syscall(libc::SYS_setresgid, NOBODY, NOBODY, NOBODY), 0);
                assert_eq!(libc::syscall(libc::SYS_setresuid, NOBODY, NOBODY, NOBODY), 0);
            }
            UnixStream::connect(&socket).unwrap()
        })
        .join()
        .unwrap()
    } else {
        UnixStream::connect(&socket).unwrap()
    };
    std.set_nonblocking(true).unwrap();
    tokio::net::UnixStream::from_std(std).unwrap()
}

async fn send(
    d: &Daemon,
    nobody: bool,
    method: &str,
    path: &str,
    body: Option<(&str, Vec<u8>)>,
) -> hyper::Response<hyper::body::Incoming> {
    let stream = connect(&d.socket, nobody);
    let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await.unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut req =
        hyper::Request::builder().method(method).uri(format!("http://localhost{path}")).header("host", "localhost");
    let body = match body {
        Some((ct, bytes)) => {
            req = req.header("content-type", ct);
            Full::new(Bytes::from(bytes))
        }
        None => Full::new(Bytes::new()),
    };
    sender.send_request(req.body(body).unwrap()).await.unwrap()
}

async fn call_as(d: &Daemon, nobody: bool, method: &str, path: &str, body: Option<(&str, Vec<u8>)>) -> Resp {
    let resp = send(d, nobody, method, path, body).await;
    let status = resp.status().as_u16();
    let content_type = resp.headers().get("content-type").map(|v| v.to_str().unwrap().to_string());
    let body = tokio::time::timeout(Duration::from_secs(30), resp.into_body().collect())
        .await
        .unwrap_or_else(|_| panic!("{method} {path}: body did not end"))
        .unwrap()
        .to_bytes()
        .to_vec();
    Resp { status, content_type, body }
}

async fn call(d: &Daemon, method: &str, path: &str, body: Option<(&str, Vec<u8>)>) -> Resp {
    call_as(d, false, method, path, body).await
}

/// A request with a 2 MiB body, over a plain socket: the daemon answers 413 and hangs up
/// before the body is all sent, which an HTTP client reports as a broken pipe, not as the answer.
async fn too_large(d: &Daemon, method: &'static str, path: &'static str) -> Resp {
    use std::io::{Read, Write};
    let socket = d.socket.clone();
    tokio::task::spawn_blocking(move || {
        let mut s = UnixStream::connect(&socket).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let body = vec![b' '; 2 * 1024 * 1024];
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        s.write_all(head.as_bytes()).unwrap();
        let _ = s.write_all(&body); // may be cut short by the answer
        let mut raw = Vec::new();
        let _ = s.read_to_end(&mut raw);
        let text = String::from_utf8_lossy(&raw).to_string();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no HTTP answer: {text:?}"));
        let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
        let content_type = head
            .lines()
            .find_map(|l| l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case("content-type")))
            .map(|(_, v)| v.trim().to_string());
        Resp { status, content_type, body: body.as_bytes().to_vec() }
    })
    .await
    .unwrap()
}

/// Checks a response against the document: its status is documented for the operation, its
/// content type (or its having no body) is documented for that status, and its body validates
/// against that content's schema (NDJSON: each line). Returns the media type.
fn conforms(c: &Checker, method: &str, template: &str, r: &Resp) -> Option<String> {
    let what = format!("{method} {template} -> {}", r.status);
    let op = &c.doc["paths"][template][method.to_lowercase()];
    assert!(op.is_object(), "{method} {template} is not documented");
    let response = op["responses"].get(r.status.to_string()).unwrap_or_else(|| {
        panic!("{what}: status not documented; body {}", String::from_utf8_lossy(&r.body));
    });
    let response = c.deref(response);
    let Some(content) = response.get("content").and_then(Value::as_object) else {
        assert!(r.body.is_empty(), "{what}: documented without a body, got {}", String::from_utf8_lossy(&r.body));
        return None;
    };
    let ct = r.content_type.as_deref().unwrap_or_else(|| panic!("{what}: no content-type"));
    let media = ct.split(';').next().unwrap().trim().to_string();
    let schema = &content
        .get(&media)
        .unwrap_or_else(|| panic!("{what}: content-type {ct} not documented (only {:?})", content.keys()))["schema"];
    let text = std::str::from_utf8(&r.body).unwrap_or_else(|_| panic!("{what}: body is not UTF-8"));
    let values: Vec<Value> = match media.as_str() {
        "application/json" => vec![r.json()],
        "application/x-ndjson" => {
            assert!(text.is_empty() || text.ends_with('\n'), "{what}: NDJSON ends with a newline");
            text.lines()
                .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{what}: line {l:?}: {e}")))
                .collect()
        }
        m if m.starts_with("text/") => vec![Value::String(text.to_string())],
        m => panic!("{what}: no check for {m}"),
    };
    for v in &values {
        c.check(schema, v).unwrap_or_else(|e| panic!("{what}: {v}\ndoes not match the document:\n{e}"));
    }
    Some(media)
}

/// Calls and checks; returns the response.
async fn checked(
    c: &Checker<'_>,
    d: &Daemon,
    method: &str,
    template: &str,
    path: &str,
    body: Option<(&str, Vec<u8>)>,
) -> Resp {
    let r = call(d, method, path, body).await;
    conforms(c, method, template, &r);
    r
}

const INSTANCE: &str = "/v1/instances/{namespace}/{name}/{index}";
const ACTION: &str = "/v1/instances/{namespace}/{name}/{index}/{action}";

fn json_body(v: &Value) -> Option<(&'static str, Vec<u8>)> {
    Some(("application/json", v.to_string().into_bytes()))
}

#[tokio::test]
async fn the_daemon_serves_this_document() {
    let d = Daemon::start("openapi-doc");
    let doc = doc();
    let c = Checker::new(&doc);
    let r = checked(&c, &d, "GET", "/v1/openapi.json", "/v1/openapi.json", None).await;
    assert_eq!(r.content_type.as_deref(), Some("application/json"));
    assert_eq!(r.body, std::fs::read(DOC_FILE).unwrap(), "GET /v1/openapi.json is docs/openapi.json, byte for byte");
}

#[tokio::test]
async fn real_responses_match_the_document() {
    const REVISIONS: &str = "/v1/apps/{namespace}/{name}/revisions";
    let d = Daemon::start_with("openapi", "allow_read_for_all = true\n");
    let doc = doc();
    let c = Checker::new(&doc);
    let mut statuses: BTreeSet<(String, String, u16)> = BTreeSet::new();
    macro_rules! check {
        ($method:expr, $template:expr, $path:expr) => {
            check!($method, $template, $path, None)
        };
        ($method:expr, $template:expr, $path:expr, $body:expr) => {{
            let r = checked(&c, &d, $method, $template, &$path, $body).await;
            statuses.insert(($method.to_string(), $template.to_string(), r.status));
            r
        }};
    }

    // Reads, before anything exists.
    check!("GET", "/v1/openapi.json", "/v1/openapi.json");
    let r = check!("GET", "/v1/health", "/v1/health");
    assert_eq!(r.json()["version"], env!("CARGO_PKG_VERSION"));
    check!("GET", "/v1/node", "/v1/node");
    let r = check!("GET", "/v1/whoami", "/v1/whoami");
    assert_eq!(r.json()["server"], "stewardd");
    check!("GET", "/metrics", "/metrics");
    assert_eq!(check!("GET", "/v1/instances", "/v1/instances").json(), json!({"instances": []}));

    // Apply: JSON with an allocated port, TOML, a spec with mistakes, not UTF-8, too large.
    let web = spec(
        "web",
        2,
        json!({"ports": [{"name": "http", "hostPort": 0, "protocol": "TCP"}], "reloadCmd": "true"}),
        json!({}),
    );
    let r = check!("POST", "/v1/apply", "/v1/apply", json_body(&web));
    assert_eq!(r.status, 202);
    assert_eq!(
        r.json(),
        json!({"instances": ["test/web/0", "test/web/1"], "generation": 1, "revision": 1,
               "changed": ["test/web/0", "test/web/1"], "created": ["test/web/0", "test/web/1"], "unchanged": false})
    );
    let toml = "apiVersion = \"v4\"\nkind = \"process\"\n[metadata]\nname = \"tom\"\nnamespace = \"test\"\n\
                [[spec.template.spec.processes]]\nprocName = \"sh\"\n\
                workPath = \"${work_base_dir}/${namespace}.${processname}.${instanceid}\"\n\
                startCmd = \"exec sleep 1000\"\nstartGracePeriod = 0\n";
    let r = check!("POST", "/v1/apply", "/v1/apply", Some(("application/toml", toml.as_bytes().to_vec())));
    assert_eq!(r.status, 202);
    let r = check!("POST", "/v1/apply", "/v1/apply", json_body(&json!({"kind": "process"})));
    assert_eq!(r.status, 422);
    assert!(r.json()["error"]["errors"].as_array().unwrap().len() > 1);
    let r = check!("POST", "/v1/apply", "/v1/apply", Some(("text/plain", b"garbage {".to_vec())));
    assert_eq!((r.status, r.json()["error"]["code"].as_str()), (422, Some("invalid_spec")));
    let r = check!("POST", "/v1/apply", "/v1/apply", Some(("application/json", vec![0xff, 0xfe])));
    assert_eq!(r.status, 400);
    // A placement (instances=): ids must parse and lie below spec.instance.
    let r = check!("POST", "/v1/apply", "/v1/apply?instances=0,x", json_body(&web));
    assert_eq!((r.status, r.json()["error"]["field"].as_str()), (400, Some("instances")));
    let r = check!("POST", "/v1/apply", "/v1/apply?instances=1,2", json_body(&web));
    assert_eq!((r.status, r.json()["error"]["field"].as_str()), (422, Some("instances")));
    let r = too_large(&d, "POST", "/v1/apply").await;
    conforms(&c, "POST", "/v1/apply", &r);
    assert_eq!(r.status, 413);
    statuses.insert(("POST".into(), "/v1/apply".into(), 413));
    let r = call_as(&d, true, "POST", "/v1/apply", json_body(&web)).await;
    conforms(&c, "POST", "/v1/apply", &r);
    assert_eq!(r.status, 403);
    statuses.insert(("POST".into(), "/v1/apply".into(), 403));

    // States with data: Exited, Failed, Backoff.
    let exits = |name: &str, code: u32, policy: Value| {
        spec(name, 1, json!({"startCmd": format!("exit {code}")}), json!({"restartPolicy": policy}))
    };
    check!("POST", "/v1/apply", "/v1/apply", json_body(&exits("ex", 3, json!({"policy": "Never"}))));
    check!("POST", "/v1/apply", "/v1/apply", json_body(&exits("bo", 4, json!({"policy": "Always", "interval": 60}))));
    check!(
        "POST",
        "/v1/apply",
        "/v1/apply",
        json_body(&exits("fa", 5, json!({"policy": "Always", "interval": 0, "maxtimes": 1})))
    );
    d.wait_state(&id("test", "web", 0), Kind::Running, 20).await;
    d.wait_state(&id("test", "web", 1), Kind::Running, 20).await;
    d.wait_state(&id("test", "tom", 0), Kind::Running, 20).await;
    d.wait_state(&id("test", "ex", 0), Kind::Exited, 20).await;
    d.wait_state(&id("test", "bo", 0), Kind::Backoff, 20).await;
    d.wait_state(&id("test", "fa", 0), Kind::Failed, 20).await;

    // Lists and one instance at a time, in every state there is.
    let r = check!("GET", "/v1/instances", "/v1/instances");
    assert_eq!(r.json()["instances"].as_array().unwrap().len(), 6);
    for state in ["Running", "exited", "BACKOFF", "Failed", ""] {
        check!("GET", "/v1/instances", format!("/v1/instances?state={state}&namespace=test"));
    }
    check!("GET", "/v1/instances", "/v1/instances?name=web");
    let r = check!("GET", "/v1/instances", "/v1/instances?state=bogus");
    assert_eq!((r.status, r.json()["error"]["field"].as_str()), (400, Some("state")));
    let r = check!("GET", "/v1/instances", "/v1/instances?name=a&name=b");
    assert_eq!((r.status, r.json()["error"]["field"].as_str()), (400, Some("query")));
    for name in ["web", "tom", "ex", "bo", "fa"] {
        let r = check!("GET", INSTANCE, format!("/v1/instances/test/{name}/0"));
        assert_eq!(r.status, 200);
    }
    let r = check!("GET", INSTANCE, "/v1/instances/test/web/0");
    let web0 = r.json();
    assert!(web0["usage"].is_object() && web0["ports"]["http"].is_u64(), "{web0}");
    assert_eq!(check!("GET", INSTANCE, "/v1/instances/test/nope/0").status, 404);
    // A fixed port another instance holds.
    let port = web0["ports"]["http"].clone();
    let taker = spec("taker", 1, json!({"ports": [{"name": "http", "hostPort": port, "protocol": "TCP"}]}), json!({}));
    let r = check!("POST", "/v1/apply", "/v1/apply", json_body(&taker));
    assert_eq!((r.status, r.json()["error"]["code"].as_str()), (409, Some("conflict")), "{}", r.json());
    assert_eq!(check!("GET", INSTANCE, "/v1/instances/test/web/x").status, 400);
    assert_eq!(check!("GET", INSTANCE, "/v1/instances/%FF/web/0").status, 400);

    // Logs: the lines (200, with the run marker), a bad stream (400), unknown (404).
    const LOGS: &str = "/v1/instances/{namespace}/{name}/{index}/logs";
    let r = check!("GET", LOGS, "/v1/instances/test/web/0/logs?tail=5&stream=stdout");
    assert_eq!(r.status, 200);
    let text = String::from_utf8(r.body.clone()).unwrap();
    assert!(text.lines().any(|l| l.contains("--- steward: run started")), "{text}");
    assert_eq!(check!("GET", LOGS, "/v1/instances/test/web/0/logs?stream=x").status, 400);
    assert_eq!(check!("GET", LOGS, "/v1/instances/test/nope/0/logs").status, 404);

    // Files (`steward cp`): written (200), outside the workPath (400), not Running (409),
    // unknown (404), refused (403).
    const FILES: &str = "/v1/instances/{namespace}/{name}/{index}/files";
    let bytes = |b: &[u8]| Some(("application/octet-stream", b.to_vec()));
    let r = check!("PUT", FILES, "/v1/instances/test/web/0/files?path=copied.txt&mode=rw", bytes(b"hello"));
    assert_eq!((r.status, r.json()["mode"].as_str(), r.json()["bytes"].as_u64()), (200, Some("0600"), Some(5)));
    let r = check!("PUT", FILES, "/v1/instances/test/web/0/files?path=/etc/steward-openapi", bytes(b"x"));
    assert_eq!((r.status, r.json()["error"]["field"].as_str()), (400, Some("path")), "{}", r.json());
    let r = check!("PUT", FILES, "/v1/instances/test/web/0/files?path=x&mode=x", bytes(b"x"));
    assert_eq!((r.status, r.json()["error"]["field"].as_str()), (400, Some("mode")));
    let r = check!("PUT", FILES, "/v1/instances/test/ex/0/files?path=x", bytes(b"x"));
    assert_eq!((r.status, r.json()["error"]["code"].as_str()), (409, Some("failed")));
    assert_eq!(check!("PUT", FILES, "/v1/instances/test/nope/0/files?path=x", bytes(b"x")).status, 404);
    let r = call_as(&d, true, "PUT", "/v1/instances/test/web/0/files?path=y", bytes(b"y")).await;
    conforms(&c, "PUT", FILES, &r);
    assert_eq!(r.status, 403);

    // Endpoints (issue 27): kept (204), listed and read (200), a long poll answered at its
    // timeout (200), stale (409), not these endpoints (422), none (404), removed (204), refused (403).
    const EPS: &str = "/v1/endpoints/{namespace}/{name}";
    let mut e = json!({"namespace": "test", "name": "web", "revision": 2, "updatedMs": 1,
                       "ports": {"http": [{"ip": "127.0.0.1", "port": 31000, "node": "h1", "instance": 0}]}});
    assert_eq!(check!("PUT", EPS, "/v1/endpoints/test/web", json_body(&e)).status, 204);
    assert_eq!(check!("GET", "/v1/endpoints", "/v1/endpoints?namespace=test").json()["items"][0], e);
    let r = check!("GET", "/v1/endpoints", "/v1/endpoints?namespace=a&namespace=b");
    assert_eq!((r.status, r.json()["error"]["field"].as_str()), (400, Some("query")));
    assert_eq!(check!("GET", EPS, "/v1/endpoints/test/web").json(), e);
    let r = check!("GET", EPS, "/v1/endpoints/test/web?after=2&timeout=0.2");
    assert_eq!((r.status, &r.json()["revision"]), (200, &json!(2)), "the kept revision at the timeout");
    let r = check!("GET", EPS, "/v1/endpoints/test/web?after=1&timeout=999");
    assert_eq!((r.status, r.json()["error"]["field"].as_str()), (400, Some("timeout")));
    e["revision"] = json!(1);
    assert_eq!(check!("PUT", EPS, "/v1/endpoints/test/web", json_body(&e)).status, 409);
    e["name"] = json!("other");
    assert_eq!(check!("PUT", EPS, "/v1/endpoints/test/web", json_body(&e)).status, 422);
    assert_eq!(check!("GET", EPS, "/v1/endpoints/test/nope").status, 404);
    for method in ["PUT", "DELETE"] {
        let r = call_as(&d, true, method, "/v1/endpoints/test/web", json_body(&e)).await;
        conforms(&c, method, EPS, &r);
        assert_eq!(r.status, 403);
        statuses.insert((method.to_string(), EPS.to_string(), 403));
    }
    assert_eq!(check!("DELETE", EPS, "/v1/endpoints/test/web").status, 204);
    assert_eq!(check!("DELETE", EPS, "/v1/endpoints/test/web").status, 404);
    let r = too_large(&d, "PUT", "/v1/endpoints/test/big").await;
    conforms(&c, "PUT", EPS, &r);
    assert_eq!(r.status, 413);
    statuses.insert(("PUT".into(), EPS.into(), 413));

    // A desired set (issue 43): taken (200), of another run (409), not a set (422), too large
    // (413), refused (403).
    const DESIRED: &str = "/v1/desired";
    let mark = check!("GET", "/v1/node", "/v1/node").json()["desiredMark"].clone();
    let set = json!({"asOf": mark, "apps": ["test/web"], "endpoints": []});
    let r = check!("PUT", DESIRED, DESIRED, json_body(&set));
    assert_eq!((r.status, &r.json()["droppedApps"]), (200, &json!([])), "test/web was applied by hand");
    let other = json!({"asOf": {"boot": 1, "mark": 0}, "apps": [], "endpoints": []});
    assert_eq!(check!("PUT", DESIRED, DESIRED, json_body(&other)).status, 409);
    assert_eq!(check!("PUT", DESIRED, DESIRED, json_body(&json!({"apps": 1}))).status, 422);
    let r = call_as(&d, true, "PUT", DESIRED, json_body(&set)).await;
    conforms(&c, "PUT", DESIRED, &r);
    assert_eq!(r.status, 403);
    statuses.insert(("PUT".into(), DESIRED.into(), 403));
    let r = too_large(&d, "PUT", DESIRED).await;
    conforms(&c, "PUT", DESIRED, &r);
    assert_eq!(r.status, 413);
    statuses.insert(("PUT".into(), DESIRED.into(), 413));

    // Actions: waited for (200), not waited for (202), failing (409), unknown (404), refused (403).
    let r = check!("POST", ACTION, "/v1/instances/test/web/0/reload?timeout=10");
    assert_eq!(r.status, 200);
    let r = check!("POST", ACTION, "/v1/instances/test/web/1/stop?timeout=10");
    assert_eq!((r.status, &r.json()["state"]), (200, &json!({"state": "Stopped"})));
    let r = check!("POST", ACTION, "/v1/instances/test/web/1/reload?timeout=10");
    assert_eq!((r.status, r.json()["error"]["code"].as_str()), (409, Some("failed")));
    let r = check!("POST", ACTION, "/v1/instances/test/web/1/start");
    assert_eq!(r.status, 202);
    d.wait_state(&id("test", "web", 1), Kind::Running, 20).await;
    let r = check!("POST", ACTION, "/v1/instances/test/web/1/restart");
    assert_eq!(r.status, 202);
    let r = check!("POST", ACTION, "/v1/instances/test/web/0/restart?timeout=0");
    assert_eq!(r.status, 202);
    let r = check!("POST", ACTION, "/v1/instances/test/bo/0/start?timeout=10");
    assert_eq!(r.status, 200);
    assert_eq!(check!("POST", ACTION, "/v1/instances/test/nope/0/start").status, 404);
    assert_eq!(check!("POST", ACTION, "/v1/instances/test/web/0/bogus?timeout=1").status, 404);
    assert_eq!(check!("POST", ACTION, "/v1/instances/test/web/zero/start").status, 400);
    let r = check!("POST", ACTION, "/v1/instances/test/web/0/start?timeout=soon");
    assert_eq!((r.status, r.json()["error"]["code"].as_str()), (400, Some("bad_request")));
    let r = check!("POST", ACTION, "/v1/instances/test/web/0/start?timeout=NaN");
    assert_eq!((r.status, r.json()["error"]["field"].as_str()), (400, Some("timeout")));
    assert_eq!(check!("POST", ACTION, "/v1/instances/test/web/0/bogus").status, 404, "checked before it is spawned");
    let r = call_as(&d, true, "POST", "/v1/instances/test/web/0/stop", None).await;
    conforms(&c, "POST", ACTION, &r);
    assert_eq!(r.status, 403);

    // A changed spec for existing instances (specUpdated).
    let mut web2 = web.clone();
    web2["spec"]["template"]["spec"]["processes"][0]["startCmd"] = json!("exec sleep 1001");
    let r = check!("POST", "/v1/apply", "/v1/apply", json_body(&web2));
    assert_eq!(r.json()["rollout"], true, "a changed spec rolls out: {}", r.json());

    // Rollouts: followed to the end (rolloutStarted, rolloutBatch, rolloutCompleted), unknown
    // (404), paused, resumed, restarted, refused (403), nothing to pause (409); a failing
    // revision with autoRollback (rolloutFailed, rolloutRolledBack).
    const ROLLOUT: &str = "/v1/apps/{namespace}/{name}/rollout";
    let wait_phase = |app: &'static str, phase: &'static str| {
        let d = &d;
        async move {
            for _ in 0..400 {
                let r = call(d, "GET", &format!("/v1/apps/test/{app}/rollout"), None).await;
                if r.json()["rollout"]["phase"] == phase {
                    return r;
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            panic!("{app}: rollout never {phase}\n{}", d.log());
        }
    };
    wait_phase("web", "complete").await;
    let r = check!("GET", ROLLOUT, "/v1/apps/test/web/rollout");
    assert_eq!(r.json()["progress"], json!({"instances": 2, "updated": 2, "ready": 2, "spares": 0}), "{}", r.json());
    assert_eq!(check!("GET", ROLLOUT, "/v1/apps/test/none/rollout").status, 404);
    // A rollout with steps (issue 19): a pause of 0 s, then every instance (rolloutGate).
    let stepped = |version: &str| {
        spec(
            "stepped",
            1,
            json!({"env": [{"name": "V", "value": version}], "startCmd": "exec sleep 1000"}),
            json!({"strategy": {"steps": [{"pause": 0}]}}),
        )
    };
    check!("POST", "/v1/apply", "/v1/apply", json_body(&stepped("1")));
    check!("POST", "/v1/apply", "/v1/apply", json_body(&stepped("2")));
    wait_phase("stepped", "complete").await;
    let r = check!("GET", ROLLOUT, "/v1/apps/test/stepped/rollout");
    assert_eq!(r.json()["rollout"]["gate"], 1, "{}", r.json());
    let slow = |version: &str| {
        spec(
            "slow",
            2,
            json!({"env": [{"name": "V", "value": version}], "startCmd": "exec sleep 1000"}),
            json!({"strategy": {"minReadySeconds": 30}}),
        )
    };
    check!("POST", "/v1/apply", "/v1/apply", json_body(&slow("1")));
    check!("POST", "/v1/apply", "/v1/apply", json_body(&slow("2")));
    const PAUSE: &str = "/v1/apps/{namespace}/{name}/rollout/pause";
    const RESUME: &str = "/v1/apps/{namespace}/{name}/rollout/resume";
    const RESTART: &str = "/v1/apps/{namespace}/{name}/rollout/restart";
    for (template, path) in [(PAUSE, "pause"), (RESUME, "resume"), (RESTART, "restart")] {
        let r = call_as(&d, true, "POST", &format!("/v1/apps/test/slow/rollout/{path}"), None).await;
        conforms(&c, "POST", template, &r);
        assert_eq!(r.status, 403);
        statuses.insert(("POST".into(), template.into(), 403));
        assert_eq!(check!("POST", template, format!("/v1/apps/test/none/rollout/{path}")).status, 404);
    }
    let r = check!("POST", PAUSE, "/v1/apps/test/slow/rollout/pause");
    assert_eq!((r.status, &r.json()["rollout"]["phase"]), (200, &json!("paused")), "{}", r.json());
    let r = check!("POST", RESUME, "/v1/apps/test/slow/rollout/resume");
    assert_eq!((r.status, &r.json()["rollout"]["phase"]), (200, &json!("progressing")), "{}", r.json());
    let r = check!("POST", RESTART, "/v1/apps/test/slow/rollout/restart");
    assert_eq!((r.status, r.json()["rollout"].as_bool()), (202, Some(true)), "{}", r.json());
    assert_eq!(check!("POST", PAUSE, "/v1/apps/test/web/rollout/pause").status, 409, "web's rollout is complete");
    let mut bad = spec("bad", 1, json!({"startCmd": "exec sleep 1000"}), json!({}));
    check!("POST", "/v1/apply", "/v1/apply", json_body(&bad));
    d.wait_state(&id("test", "bad", 0), Kind::Running, 20).await;
    bad["spec"]["template"]["spec"]["processes"][0]["startCmd"] = json!("exit 3");
    bad["restartPolicy"] = json!({"policy": "Never"});
    let r = check!("POST", "/v1/apply", "/v1/apply?autoRollback=true", json_body(&bad));
    assert_eq!(r.status, 202);
    wait_phase("bad", "complete").await;
    let r = check!("GET", REVISIONS, "/v1/apps/test/bad/revisions");
    assert_eq!(r.json()["revisions"].as_array().map(Vec::len), Some(3), "rolled back as revision 3: {}", r.json());

    // Delete: waited for (204), not waited for (202), unknown (404), refused (403).
    let r = call_as(&d, true, "DELETE", "/v1/instances/test/ex/0", None).await;
    conforms(&c, "DELETE", INSTANCE, &r);
    assert_eq!(r.status, 403);
    assert_eq!(check!("DELETE", INSTANCE, "/v1/instances/test/ex/0?timeout=10").status, 204);
    assert_eq!(check!("DELETE", INSTANCE, "/v1/instances/test/tom/0").status, 202);
    assert_eq!(check!("DELETE", INSTANCE, "/v1/instances/test/ex/0").status, 404);
    assert_eq!(check!("DELETE", INSTANCE, "/v1/instances/test/ex/0?timeout=x").status, 400);

    // Revisions (web2 made revision 2) and undo: listed, unknown (404), refused (403), not a
    // request (400), no such revision (404), the current one (422), done (202).
    const UNDO: &str = "/v1/apps/{namespace}/{name}/undo";
    const REVISION: &str = "/v1/apps/{namespace}/{name}/revisions/{revision}";
    let r = check!("GET", REVISIONS, "/v1/apps/test/web/revisions");
    assert_eq!(r.json()["revisions"].as_array().map(Vec::len), Some(2), "{}", r.json());
    assert_eq!(check!("GET", REVISIONS, "/v1/apps/test/none/revisions").status, 404);
    // One revision and its spec: read (200), not a number (400), not kept or no app (404).
    let r = check!("GET", REVISION, "/v1/apps/test/web/revisions/2");
    assert_eq!(
        (r.status, &r.json()["spec"]["spec"]["template"]["spec"]["processes"][0]["startCmd"]),
        (200, &json!("exec sleep 1001")),
        "{}",
        r.json()
    );
    assert_eq!(check!("GET", REVISION, "/v1/apps/test/web/revisions/two").status, 400);
    assert_eq!(check!("GET", REVISION, "/v1/apps/test/web/revisions/99").status, 404);
    assert_eq!(check!("GET", REVISION, "/v1/apps/test/none/revisions/1").status, 404);
    let r = call_as(&d, true, "POST", "/v1/apps/test/web/undo", None).await;
    conforms(&c, "POST", UNDO, &r);
    assert_eq!(r.status, 403);
    statuses.insert(("POST".into(), UNDO.into(), 403));
    assert_eq!(check!("POST", UNDO, "/v1/apps/test/web/undo", json_body(&json!([1]))).status, 400);
    assert_eq!(check!("POST", UNDO, "/v1/apps/test/web/undo", json_body(&json!({"toRevision": 99}))).status, 404);
    assert_eq!(check!("POST", UNDO, "/v1/apps/test/web/undo", json_body(&json!({"toRevision": 2}))).status, 422);
    let r = check!("POST", UNDO, "/v1/apps/test/web/undo", json_body(&json!({})));
    assert_eq!((r.status, r.json()["revision"].as_u64()), (202, Some(3)));

    // A whole app: deleted within the timeout (200, the instances), refused (403), unknown (404).
    const APP: &str = "/v1/apps/{namespace}/{name}";
    let r = call_as(&d, true, "DELETE", "/v1/apps/test/web", None).await;
    conforms(&c, "DELETE", APP, &r);
    assert_eq!(r.status, 403);
    assert_eq!(check!("DELETE", APP, "/v1/apps/test/web?timeout=x").status, 400);
    assert_eq!(check!("DELETE", APP, "/v1/apps/test/web").status, 202);
    check!("POST", "/v1/apply", "/v1/apply", json_body(&spec("gone", 2, json!({}), json!({}))));
    let r = check!("DELETE", APP, "/v1/apps/test/gone?timeout=20");
    assert_eq!(r.status, 200);
    assert_eq!(r.json(), json!({"deleted": ["test/gone/0", "test/gone/1"]}));
    assert_eq!(check!("DELETE", APP, "/v1/apps/test/gone").status, 404);

    // Secrets and configmaps: written, listed (never values), refused, deleted.
    for plural in ["secrets", "configmaps"] {
        let list = format!("/v1/{plural}");
        let one = format!("/v1/{plural}/{{namespace}}/{{name}}");
        let db = format!("/v1/{plural}/test/db");
        assert_eq!(check!("GET", &list, list).json(), json!({"items": []}));
        let r = check!("PUT", &one, db, json_body(&json!({"data": {"user": "u", "password": "p"}})));
        assert_eq!(r.status, 200);
        assert_eq!(r.json()["keys"], json!(["password", "user"]));
        let r = check!("GET", &list, format!("{list}?namespace=test"));
        assert_eq!(r.json()["items"][0]["name"], "db");
        assert!(!String::from_utf8_lossy(&r.body).contains("\"p\""), "values are never listed");
        assert_eq!(check!("GET", &list, format!("{list}?namespace=a&namespace=b")).status, 400);
        let r = check!("PUT", &one, db, json_body(&json!({"password": "p"})));
        assert_eq!((r.status, r.json()["error"]["field"].as_str()), (400, Some("data")));
        let r = check!("PUT", &one, format!("/v1/{plural}/test/a%20b"), json_body(&json!({"data": {"k": "v"}})));
        assert_eq!((r.status, r.json()["error"]["code"].as_str()), (422, Some("invalid")));
        assert_eq!(
            check!("PUT", &one, format!("/v1/{plural}/%FF/db"), json_body(&json!({"data": {"k": "v"}}))).status,
            400
        );
        let r = call_as(&d, true, "PUT", &db, json_body(&json!({"data": {"k": "v"}}))).await;
        conforms(&c, "PUT", &one, &r);
        assert_eq!(r.status, 403);
        let r = call_as(&d, true, "DELETE", &db, None).await;
        conforms(&c, "DELETE", &one, &r);
        assert_eq!(r.status, 403);
        assert_eq!(check!("DELETE", &one, db).status, 204);
        assert_eq!(check!("DELETE", &one, db).status, 404);
        assert_eq!(check!("DELETE", &one, format!("/v1/{plural}/%FF/db")).status, 400);
        for m in ["PUT", "DELETE"] {
            statuses.insert((m.to_string(), one.clone(), 403));
        }
    }

    // Kept volumes: one an ordinal of a pod left (made here as its first start makes it).
    {
        const VOLUMES: &str = "/v1/volumes";
        const VOLUME: &str = "/v1/volumes/{namespace}/{name}/{index}/{volume}";
        assert_eq!(check!("GET", VOLUMES, VOLUMES).json(), json!({"items": []}));
        let kept = d.path().join("volumes/test/world/1/save");
        std::fs::create_dir_all(&kept).unwrap();
        std::fs::write(kept.join("data"), "12345").unwrap();
        let r = check!("GET", VOLUMES, format!("{VOLUMES}?namespace=test"));
        // The disk it takes: whole blocks.
        let bytes = r.json()["items"][0]["bytes"].as_u64().unwrap();
        assert_eq!(r.json()["items"][0]["ordinal"].as_u64(), Some(1));
        assert!(bytes >= 5 && bytes % 512 == 0, "{bytes}");
        assert_eq!(check!("GET", VOLUMES, format!("{VOLUMES}?namespace=a&namespace=b")).status, 400);
        let r = check!("DELETE", VOLUME, "/v1/volumes/test/world/1/..");
        assert_eq!((r.status, r.json()["error"]["field"].as_str()), (422, Some("volume")));
        assert_eq!(check!("DELETE", VOLUME, "/v1/volumes/test/world/x/save").status, 400);
        let r = call_as(&d, true, "DELETE", "/v1/volumes/test/world/1/save", None).await;
        conforms(&c, "DELETE", VOLUME, &r);
        assert_eq!(r.status, 403);
        statuses.insert(("DELETE".into(), VOLUME.into(), 403));
        // In use: an instance of that ordinal exists here.
        let user = spec("world", 2, json!({"startCmd": "exec sleep 1000"}), json!({}));
        check!("POST", "/v1/apply", "/v1/apply", json_body(&user));
        assert_eq!(check!("DELETE", VOLUME, "/v1/volumes/test/world/1/save").status, 409);
        assert_eq!(check!("GET", VOLUMES, VOLUMES).json()["items"][0]["instance"], "test/world/1");
        check!("DELETE", APP, "/v1/apps/test/world?timeout=20");
        assert_eq!(check!("DELETE", VOLUME, "/v1/volumes/test/world/1/save").status, 204);
        assert!(!kept.exists());
        assert_eq!(check!("DELETE", VOLUME, "/v1/volumes/test/world/1/save").status, 404);
    }
    let r = too_large(&d, "PUT", "/v1/secrets/test/big").await;
    conforms(&c, "PUT", "/v1/secrets/{namespace}/{name}", &r);
    assert_eq!(r.status, 413);
    let r = too_large(&d, "PUT", "/v1/configmaps/test/big").await;
    conforms(&c, "PUT", "/v1/configmaps/{namespace}/{name}", &r);
    assert_eq!(r.status, 413);
    for plural in ["secrets", "configmaps"] {
        statuses.insert(("PUT".into(), format!("/v1/{plural}/{{namespace}}/{{name}}"), 413));
    }

    // Jobs (issue 20): one that completes (jobRunEnded, jobEnded), listed and read.
    let mut one = spec("once", 1, json!({"startCmd": "exit 0", "startGracePeriod": 0}), json!({}));
    one["job"] = json!({"completions": 1});
    one["restartPolicy"] = json!({"policy": "Never"});
    assert_eq!(check!("POST", "/v1/apply", "/v1/apply", json_body(&one)).status, 202);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = check!("GET", "/v1/jobs/{namespace}/{name}", "/v1/jobs/test/once");
        if r.json()["status"]["phase"] == "complete" {
            break;
        }
        assert!(Instant::now() < deadline, "the job did not complete: {}", r.json());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(check!("GET", "/v1/jobs/{namespace}/{name}", "/v1/jobs/test/none").status, 404);
    assert_eq!(check!("GET", "/v1/jobs", "/v1/jobs?namespace=test").json()["items"][0]["app"], "test/once");
    assert_eq!(check!("GET", "/v1/jobs", "/v1/jobs?namespace=a&namespace=b").status, 400);

    // Cron jobs (issue 20): a tick every second (cronTick), read, triggered, suspended, resumed.
    const CRON: &str = "/v1/cronjobs/{namespace}/{name}";
    const CRON_ACTION: &str = "/v1/cronjobs/{namespace}/{name}/{action}";
    let mut every = spec("every", 1, json!({"startCmd": "exit 0", "startGracePeriod": 0}), json!({}));
    every["cronJob"] = json!({"rule": "* * * * * *"});
    every["restartPolicy"] = json!({"policy": "Never"});
    assert_eq!(check!("POST", "/v1/apply", "/v1/apply", json_body(&every)).status, 202);
    let deadline = Instant::now() + Duration::from_secs(20);
    while check!("GET", CRON, "/v1/cronjobs/test/every").json()["status"]["started"].as_u64() < Some(1) {
        assert!(Instant::now() < deadline, "no tick");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(check!("GET", CRON, "/v1/cronjobs/test/none").status, 404);
    assert_eq!(check!("GET", "/v1/cronjobs", "/v1/cronjobs?namespace=test").json()["items"][0]["app"], "test/every");
    assert_eq!(check!("GET", "/v1/cronjobs", "/v1/cronjobs?namespace=a&namespace=b").status, 400);
    for action in ["suspend", "trigger", "resume"] {
        let r = check!("POST", CRON_ACTION, format!("/v1/cronjobs/test/every/{action}"));
        assert_eq!(r.status, 200, "{action}: {}", r.json());
    }
    assert_eq!(check!("POST", CRON_ACTION, "/v1/cronjobs/test/every/explode").status, 404);
    let r = check!("POST", CRON_ACTION, "/v1/cronjobs/test/every/suspend?force=true");
    assert_eq!((r.status, r.json()["error"]["field"].as_str()), (400, Some("force")));
    assert_eq!(check!("POST", CRON_ACTION, "/v1/cronjobs/test/every/trigger?force=maybe").status, 400);
    assert_eq!(check!("POST", CRON_ACTION, "/v1/cronjobs/test/every/trigger?force=true").status, 200);
    let r = call_as(&d, true, "POST", "/v1/cronjobs/test/every/trigger", None).await;
    conforms(&c, "POST", CRON_ACTION, &r);
    assert_eq!(r.status, 403);
    statuses.insert(("POST".into(), CRON_ACTION.into(), 403));
    let r = check!("DELETE", "/v1/apps/{namespace}/{name}", "/v1/apps/test/every?timeout=20");
    assert_eq!(r.status, 200, "{}", r.json());

    // HookTemplates and HookRuns (issue 19): stored, listed, refused, run to a verdict against a
    // closed port, terminated, deleted.
    const HOOK_TEMPLATE: &str = "/v1/hooktemplates/{namespace}/{name}";
    const HOOK_RUN: &str = "/v1/hookruns/{namespace}/{name}";
    const TERMINATE: &str = "/v1/hookruns/{namespace}/{name}/terminate";
    assert_eq!(check!("GET", "/v1/hooktemplates", "/v1/hooktemplates").json(), json!({"items": []}));
    assert_eq!(check!("GET", "/v1/hooktemplates", "/v1/hooktemplates?namespace=a&namespace=b").status, 400);
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let hook_template = |name: &str, metric: Value| {
        json!({"kind": "HookTemplate", "metadata": {"name": name, "namespace": "test"},
               "spec": {"args": [{"name": "port"}], "metrics": [metric]}})
    };
    let web = json!({"web": {"url": "http://127.0.0.1:{{ args.port }}/"}});
    let once = hook_template("once", json!({"name": "m", "consecutiveErrorLimit": 0, "provider": web}));
    let r = check!("PUT", HOOK_TEMPLATE, "/v1/hooktemplates/test/once", json_body(&once));
    assert_eq!((r.status, &r.json()["metrics"]), (200, &json!(["m"])), "{}", r.json());
    let slow = hook_template("slow", json!({"name": "m", "interval": "1h", "provider": web}));
    assert_eq!(check!("PUT", HOOK_TEMPLATE, "/v1/hooktemplates/test/slow", json_body(&slow)).status, 200);
    let r = check!("PUT", HOOK_TEMPLATE, "/v1/hooktemplates/test/other", json_body(&once));
    assert_eq!((r.status, r.json()["error"]["field"].as_str()), (422, Some("metadata.name")));
    let bad = hook_template("once", json!({"name": "m", "count": 3, "provider": web}));
    let r = check!("PUT", HOOK_TEMPLATE, "/v1/hooktemplates/test/once", json_body(&bad));
    assert_eq!((r.status, r.json()["error"]["code"].as_str()), (422, Some("invalid_spec")));
    let r = check!("PUT", HOOK_TEMPLATE, "/v1/hooktemplates/test/once", Some(("application/json", vec![0xff])));
    assert_eq!(r.status, 400);
    let r = too_large(&d, "PUT", "/v1/hooktemplates/test/big").await;
    conforms(&c, "PUT", HOOK_TEMPLATE, &r);
    assert_eq!(r.status, 413);
    assert_eq!(check!("GET", HOOK_TEMPLATE, "/v1/hooktemplates/test/once").json()["spec"]["metrics"][0]["name"], "m");
    assert_eq!(check!("GET", HOOK_TEMPLATE, "/v1/hooktemplates/test/none").status, 404);
    assert_eq!(
        check!("GET", "/v1/hooktemplates", "/v1/hooktemplates?namespace=test").json()["items"]
            .as_array()
            .unwrap()
            .len(),
        2
    );

    let create = |template: &str, name: &str| json!({"template": template, "namespace": "test", "name": name, "args": {"port": closed.to_string()}});
    let r = check!("POST", "/v1/hookruns", "/v1/hookruns", json_body(&create("once", "r1")));
    assert_eq!((r.status, &r.json()["kind"]), (201, &json!("HookRun")), "{}", r.json());
    assert_eq!(check!("POST", "/v1/hookruns", "/v1/hookruns", json_body(&create("once", "r1"))).status, 409);
    assert_eq!(check!("POST", "/v1/hookruns", "/v1/hookruns", json_body(&create("none", "r9"))).status, 404);
    let r =
        check!("POST", "/v1/hookruns", "/v1/hookruns", json_body(&json!({"template": "once", "namespace": "test"})));
    assert_eq!(r.status, 422, "the arg port has no value");
    assert!(r.json()["error"]["message"].as_str().unwrap().contains("args.port"), "{}", r.json());
    let r = check!("POST", "/v1/hookruns", "/v1/hookruns", json_body(&json!({"tmpl": "once"})));
    assert_eq!((r.status, r.json()["error"]["field"].as_str()), (400, Some("template")));
    let r = too_large(&d, "POST", "/v1/hookruns").await;
    conforms(&c, "POST", "/v1/hookruns", &r);
    assert_eq!(r.status, 413);
    let r = check!("GET", HOOK_RUN, "/v1/hookruns/test/r1?wait=20");
    assert_eq!(r.json()["status"]["phase"], "Error", "one error over consecutiveErrorLimit 0: {}", r.json());
    assert_eq!(check!("GET", HOOK_RUN, "/v1/hookruns/test/r1?wait=x").status, 400);
    assert_eq!(check!("GET", HOOK_RUN, "/v1/hookruns/test/none").status, 404);
    assert_eq!(check!("GET", "/v1/hookruns", "/v1/hookruns?label=x").status, 400);
    assert_eq!(check!("GET", "/v1/hookruns", "/v1/hookruns?label=a=b").json(), json!({"items": []}));
    assert_eq!(check!("GET", "/v1/hookruns", "/v1/hookruns").json()["items"][0]["phase"], "Error");
    assert_eq!(check!("POST", "/v1/hookruns", "/v1/hookruns", json_body(&create("slow", "r2"))).status, 201);
    let r = check!("POST", TERMINATE, "/v1/hookruns/test/r2/terminate");
    assert_eq!((r.status, &r.json()["status"]["message"]), (200, &json!("terminated")), "{}", r.json());
    assert_eq!(check!("POST", TERMINATE, "/v1/hookruns/test/none/terminate").status, 404);
    assert_eq!(check!("DELETE", HOOK_RUN, "/v1/hookruns/test/r1").status, 204);
    assert_eq!(check!("DELETE", HOOK_RUN, "/v1/hookruns/test/r1").status, 404);
    assert_eq!(check!("DELETE", HOOK_TEMPLATE, "/v1/hooktemplates/test/once").status, 204);
    assert_eq!(check!("DELETE", HOOK_TEMPLATE, "/v1/hooktemplates/test/once").status, 404);
    for (m, template, path, body) in [
        ("PUT", HOOK_TEMPLATE, "/v1/hooktemplates/test/slow", json_body(&slow)),
        ("DELETE", HOOK_TEMPLATE, "/v1/hooktemplates/test/slow", None),
        ("POST", "/v1/hookruns", "/v1/hookruns", json_body(&create("slow", "r3"))),
        ("DELETE", HOOK_RUN, "/v1/hookruns/test/r2", None),
        ("POST", TERMINATE, "/v1/hookruns/test/r2/terminate", None),
    ] {
        let r = call_as(&d, true, m, path, body).await;
        conforms(&c, m, template, &r);
        assert_eq!(r.status, 403, "{m} {path}");
        statuses.insert((m.to_string(), template.to_string(), 403));
    }
    for (m, path) in [("PUT", HOOK_TEMPLATE), ("POST", "/v1/hookruns")] {
        statuses.insert((m.to_string(), path.to_string(), 413));
    }

    // Reads by anyone (allow_read_for_all).
    let r = call_as(&d, true, "GET", "/v1/node", None).await;
    conforms(&c, "GET", "/v1/node", &r);
    assert_eq!(r.status, 200);
    check!("GET", "/v1/node", "/v1/node");
    let r = check!("GET", "/v1/whoami", "/v1/whoami");
    assert_eq!(r.json()["server"], "stewardd");
    check!("GET", "/metrics", "/metrics");

    // A reloaded port range is shown pending next to the one in effect.
    let config = std::fs::read_to_string(&d.config).unwrap() + "port_range_start = 31100\nport_range_end = 31199\n";
    std::fs::write(&d.config, config).unwrap();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(d.pid()), nix::sys::signal::Signal::SIGHUP).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = check!("GET", "/v1/node", "/v1/node");
        if r.json()["ports"]["pending"]["rangeStart"] == 31100 {
            break;
        }
        assert!(Instant::now() < deadline, "no pending range after SIGHUP: {}", r.json());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // The journal: the backlog (follow=false), then a live event (follow, the default).
    let deadline = Instant::now() + Duration::from_secs(20);
    let events = loop {
        let r = check!("GET", "/v1/events", "/v1/events?follow=false");
        assert_eq!(r.content_type.as_deref(), Some("application/x-ndjson"));
        let text = String::from_utf8(r.body).unwrap();
        let events: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        let deleted = events.iter().filter(|e| e["body"]["type"] == "appDeleted").count();
        // web, gone, ex, tom, the cron job every, and world (the kept volume's).
        if deleted == 6 {
            break events;
        }
        if Instant::now() > deadline {
            panic!("apps web, gone, ex, tom, every and world not deleted in 20 s: {text}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "events 1, 2, 3... in order");
    let last = *seqs.last().unwrap();
    let r = check!("GET", "/v1/events", format!("/v1/events?since={}&follow=false", last - 1));
    let first: Value = serde_json::from_str(String::from_utf8(r.body).unwrap().lines().next().unwrap()).unwrap();
    assert_eq!(first["seq"], last, "since=N starts after N");
    assert_eq!(check!("GET", "/v1/events", "/v1/events?since=-1").status, 400);
    assert_eq!(check!("GET", "/v1/events", "/v1/events?follow=maybe").status, 400);
    let r = check!("GET", "/v1/events", "/v1/events?since=999999999&follow=false");
    assert_eq!((r.status, r.json()["error"]["code"].as_str()), (409, Some("since_ahead")));

    let live = follow_one_new_event(&d, &c, last).await;
    assert!(live["seq"].as_u64().unwrap() > last);
    let mut types: BTreeSet<String> =
        events.iter().chain([&live]).map(|e| e["body"]["type"].as_str().unwrap().to_string()).collect();

    // restartCmd of a forking instance: the `restarted` event.
    let forking = spec(
        "fork",
        1,
        json!({
            "procName": "sleep",
            "startGracePeriod": 5,
            "pidFile": "${run_base_dir}/${namespace}.${processname}.${instanceid}/p.pid",
            "startCmd": "setsid sh -c 'echo $$ > ${pidFile}; exec sleep 100000' </dev/null >/dev/null 2>&1 &",
            "restartCmd": "kill $(cat ${pidFile}); rm -f ${pidFile}; setsid sh -c 'echo $$ > ${pidFile}; exec sleep 100000' </dev/null >/dev/null 2>&1 &",
        }),
        json!({}),
    );
    check!("POST", "/v1/apply", "/v1/apply", json_body(&forking));
    d.wait_state(&id("test", "fork", 0), Kind::Running, 20).await;
    let r = check!("POST", ACTION, "/v1/instances/test/fork/0/restart?timeout=20");
    assert_eq!(r.status, 200);

    // A health check that fails (a closed port; consecutiveFailures 0 never kills): healthChanged.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let probed = spec(
        "probe",
        1,
        json!({"healthChecks": [{"type": "TCP", "intervalSeconds": 2, "timeoutSeconds": 1, "consecutiveFailures": 0,
                                 "gracePeriodSeconds": 0, "tcp": {"port": closed}}],
               "probe": {"readiness": {"handler": {"type": "EXEC", "method": {"command": ["true"]}}, "period": 1}}}),
        json!({}),
    );
    check!("POST", "/v1/apply", "/v1/apply", json_body(&probed));
    let probe = id("test", "probe", 0);
    d.wait(&probe, 20, |s| s.health.as_deref() == Some("unhealthy") && s.ready).await;
    let r = check!("GET", INSTANCE, "/v1/instances/test/probe/0");
    assert_eq!(r.json()["checks"][0]["healthy"], false, "{}", r.json());
    check!("GET", "/v1/instances", "/v1/instances?name=probe");

    let r = check!("GET", "/v1/events", format!("/v1/events?since={last}&follow=false"));
    for line in String::from_utf8(r.body).unwrap().lines() {
        let e: Value = serde_json::from_str(line).unwrap();
        types.insert(e["body"]["type"].as_str().unwrap().to_string());
    }
    let documented: BTreeSet<String> =
        c.schema("EventBody")["discriminator"]["mapping"].as_object().unwrap().keys().cloned().collect();
    assert!(types.is_subset(&documented), "undocumented event types: {:?}", types.difference(&documented));
    // oomKilled needs the OOM killer: every other type but a pod's was seen here.
    let unseen: Vec<&String> = documented.difference(&types).collect();
    // containerExited and imagePulled need Docker (tests/pods.rs, tests/image_pulls.rs see them);
    // scaleIn a hook endpoint (tests/scale_in_hooks.rs sees every step).
    assert_eq!(
        unseen,
        ["containerExited", "imagePulled", "oomKilled", "scaleIn"],
        "documented event types this test did not see"
    );

    // Unknown routes and methods answer in the error shape too (described in info.description).
    let r = call(&d, "GET", "/v1/nope", None).await;
    assert_eq!((r.status, r.json()["error"]["code"].as_str()), (404, Some("not_found")));
    let r = call(&d, "PUT", "/v1/health", None).await;
    assert_eq!((r.status, r.json()["error"]["code"].as_str()), (405, Some("method_not_allowed")));

    // Every status code the document lists that this test can provoke was seen; the rest (503
    // and, on the listing and reading routes, 403) need a failing store or a stricter daemon.
    let unprovoked: BTreeSet<(String, String, u16)> = [
        ("POST", "/v1/apply", 503),
        ("DELETE", INSTANCE, 409),
        ("DELETE", INSTANCE, 503),
        ("DELETE", "/v1/apps/{namespace}/{name}", 409),
        ("DELETE", "/v1/apps/{namespace}/{name}", 503),
        ("GET", "/v1/apps/{namespace}/{name}/revisions", 403),
        ("GET", "/v1/apps/{namespace}/{name}/revisions/{revision}", 403),
        ("GET", "/v1/apps/{namespace}/{name}/revisions/{revision}", 503),
        ("POST", "/v1/apps/{namespace}/{name}/undo", 409),
        ("POST", "/v1/apps/{namespace}/{name}/undo", 503),
        ("GET", "/v1/apps/{namespace}/{name}/rollout", 403),
        ("POST", "/v1/apps/{namespace}/{name}/rollout/pause", 503),
        ("POST", "/v1/apps/{namespace}/{name}/rollout/resume", 409),
        ("POST", "/v1/apps/{namespace}/{name}/rollout/resume", 503),
        ("POST", "/v1/apps/{namespace}/{name}/rollout/restart", 409),
        ("POST", "/v1/apps/{namespace}/{name}/rollout/restart", 503),
        ("GET", INSTANCE, 403),
        ("GET", "/v1/instances/{namespace}/{name}/{index}/logs", 403),
        ("GET", "/v1/endpoints", 403),
        ("GET", "/v1/endpoints/{namespace}/{name}", 403),
        ("PUT", "/v1/endpoints/{namespace}/{name}", 503),
        ("DELETE", "/v1/endpoints/{namespace}/{name}", 503),
        // A 64 MiB body, and a failing store.
        ("PUT", "/v1/instances/{namespace}/{name}/{index}/files", 413),
        ("PUT", "/v1/instances/{namespace}/{name}/{index}/files", 503),
        ("GET", "/v1/instances", 403),
        ("GET", "/v1/events", 403),
        // Too many open streams: tests/hostile_clients.rs provokes them.
        ("GET", "/v1/events", 429),
        ("GET", "/v1/instances/{namespace}/{name}/{index}/logs", 429),
        // Needs a pruned journal: tests/remote.rs provokes it.
        ("GET", "/v1/events", 410),
        ("GET", "/v1/node", 403),
        ("GET", "/metrics", 403),
        ("GET", "/v1/secrets", 403),
        ("GET", "/v1/configmaps", 403),
        ("GET", "/v1/volumes", 403),
        ("DELETE", "/v1/volumes/{namespace}/{name}/{index}/{volume}", 503),
        ("PUT", "/v1/secrets/{namespace}/{name}", 503),
        ("PUT", "/v1/configmaps/{namespace}/{name}", 503),
        ("DELETE", "/v1/secrets/{namespace}/{name}", 503),
        ("DELETE", "/v1/configmaps/{namespace}/{name}", 503),
        ("GET", "/v1/jobs", 403),
        ("GET", "/v1/cronjobs", 403),
        ("GET", "/v1/cronjobs/{namespace}/{name}", 403),
        ("POST", "/v1/cronjobs/{namespace}/{name}/{action}", 503),
        // A trigger a Forbid cron job refuses while its run goes: tests/cron_jobs.rs provokes it.
        ("POST", "/v1/cronjobs/{namespace}/{name}/{action}", 422),
        ("GET", "/v1/jobs/{namespace}/{name}", 403),
        ("GET", "/v1/hooktemplates", 403),
        ("GET", "/v1/hooktemplates/{namespace}/{name}", 403),
        ("PUT", "/v1/hooktemplates/{namespace}/{name}", 503),
        ("DELETE", "/v1/hooktemplates/{namespace}/{name}", 503),
        ("GET", "/v1/hookruns", 403),
        ("GET", "/v1/whoami", 403),
        ("POST", "/v1/hookruns", 503),
        ("GET", "/v1/hookruns/{namespace}/{name}", 403),
        ("DELETE", "/v1/hookruns/{namespace}/{name}", 503),
        ("POST", "/v1/hookruns/{namespace}/{name}/terminate", 503),
        ("PUT", "/v1/desired", 500),
        ("PUT", "/v1/desired", 503),
    ]
    .into_iter()
    .map(|(m, p, s)| (m.to_string(), p.to_string(), s))
    .collect();
    statuses.insert(("DELETE".into(), INSTANCE.into(), 403));
    statuses.insert(("DELETE".into(), "/v1/apps/{namespace}/{name}".into(), 403));
    statuses.insert(("POST".into(), ACTION.into(), 403));
    statuses.insert(("PUT".into(), "/v1/instances/{namespace}/{name}/{index}/files".into(), 403));
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            if !METHODS.contains(&method.as_str()) {
                continue;
            }
            for status in op["responses"].as_object().unwrap().keys() {
                let key = (method.to_uppercase(), path.clone(), status.parse::<u16>().unwrap());
                if !unprovoked.contains(&key) {
                    assert!(statuses.contains(&key), "documented but never seen here: {key:?}");
                }
            }
        }
    }
}

/// GET /v1/events?since=SEQ with follow left at its default: the backlog is empty, so the first
/// line is an event committed after the request (caused here by an apply).
async fn follow_one_new_event(d: &Daemon, c: &Checker<'_>, since: u64) -> Value {
    let resp = send(d, false, "GET", &format!("/v1/events?since={since}"), None).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/x-ndjson");
    let mut body = resp.into_body();
    let trigger = spec("live", 1, json!({}), json!({}));
    d.apply_json(&trigger).await;
    let mut pending = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let frame = tokio::time::timeout_at(deadline, body.frame())
            .await
            .expect("a live event within 20 s")
            .expect("the stream stays open")
            .unwrap();
        if let Some(data) = frame.data_ref() {
            pending.extend_from_slice(data);
        }
        if let Some(nl) = pending.iter().position(|b| *b == b'\n') {
            let line: Value = serde_json::from_slice(&pending[..nl]).unwrap();
            c.check(c.schema("Event"), &line).unwrap_or_else(|e| panic!("live event {line}: {e}"));
            return line;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// steward-sched serve's own document (docs/sched-openapi.json, issue 46).

const SCHED_DOC_FILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/sched-openapi.json");
const SCHED_API_SOURCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/sched/api/mod.rs");

fn sched_doc() -> Value {
    let text = std::fs::read_to_string(SCHED_DOC_FILE).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{SCHED_DOC_FILE} is not JSON: {e}"))
}

/// Its schemas use only what the checker checks, every reference resolves, every operation has
/// an id and a described answer, and its operations are exactly the routes src/sched/api serves
/// (its read and write routers, merged).
#[test]
fn the_sched_document_is_the_routes_served() {
    let doc = sched_doc();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.0."));
    assert_eq!(doc["info"]["version"], env!("CARGO_PKG_VERSION"));
    let checker = Checker::new(&doc);
    checker.lint(&doc, "#", false);
    let mut documented = BTreeSet::new();
    let mut ids = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap().iter().filter(|(m, _)| METHODS.contains(&m.as_str())) {
            assert!(ids.insert(op["operationId"].as_str().unwrap().to_string()), "{method} {path}: id twice");
            for (status, r) in op["responses"].as_object().unwrap() {
                assert!(status == "default" || status.parse::<u16>().is_ok(), "{method} {path}: {status}");
                assert!(checker.deref(r)["description"].is_string(), "{method} {path} {status}");
            }
            documented.insert((method.to_uppercase(), path.clone()));
        }
    }
    let src = std::fs::read_to_string(SCHED_API_SOURCE).unwrap();
    let served = parse_routes(&src.replace("reads\n        .merge(writes)", "reads"));
    assert!(served.len() > 30, "{served:?}");
    let undocumented: Vec<_> = served.difference(&documented).collect();
    let unserved: Vec<_> = documented.difference(&served).collect();
    assert!(
        undocumented.is_empty() && unserved.is_empty(),
        "served but not in docs/sched-openapi.json: {undocumented:?}\nin it but not served: {unserved:?}"
    );
}

/// What the server answers and takes, as serde writes it, against the document's schemas.
#[test]
fn the_sched_types_match_their_schemas() {
    use steward::protocol::{Constraint, DeployRequest, DriftRequest, EngineRun, EngineRunBody, ScaleRequest};
    use steward::sched::scheduler::{ConfigEntry, Drifted, PlacedInstance};
    use steward::sched::store::PlacementState;
    let doc = sched_doc();
    let c = Checker::new(&doc);
    let check = |name: &str, v: Value| c.check(c.schema(name), &v).unwrap_or_else(|e| panic!("{name} {v}: {e}"));
    for placement in [PlacementState::Placed, PlacementState::Pending { reason: "applying".into() }] {
        let p = PlacedInstance {
            instance: "ns/web/0".into(),
            node: "h1".into(),
            placement,
            state: "Running".into(),
            ready: true,
            restarts: 2,
            message: String::new(),
        };
        check("PlacedInstance", serde_json::to_value(&p).unwrap());
    }
    let deployed = steward::protocol::Deployed { instances: vec![], warnings: vec![] };
    check("Deployed", serde_json::to_value(&deployed).unwrap());
    check(
        "DeployRequest",
        serde_json::to_value(DeployRequest { spec: serde_json::json!({}), wait_for_room: true }).unwrap(),
    );
    check("ScaleRequest", serde_json::to_value(ScaleRequest { instances: 3, wait_for_room: None }).unwrap());
    let drift = DriftRequest {
        from: "h1".into(),
        to: Some("h2".into()),
        app: Some("ns/web".into()),
        instance: Some(1),
        force: true,
    };
    check("DriftRequest", serde_json::to_value(&drift).unwrap());
    for d in [
        Drifted { instance: "ns/web/1".into(), from: "h1".into(), to: Some("h2".into()), reason: String::new() },
        Drifted { instance: "ns/web/1".into(), from: "h1".into(), to: None, reason: "stateful".into() },
    ] {
        check("Drifted", serde_json::to_value(&d).unwrap());
    }
    let constraint = Constraint { kind: "node".into(), value: "h3".into(), equal: true, soft: false, since_ms: 5 };
    check("Constraint", serde_json::to_value(&constraint).unwrap());
    check("EngineRunBody", serde_json::to_value(EngineRunBody { status: EngineRun::Stop }).unwrap());
    let sample = json!({"app": "ns/web", "nodes": {
        "h1": {"app": "ns/web", "revisions": [{"revision": 1, "hash": "0123456789abcdef", "createdMs": 5,
               "appliedBy": "a remote caller with a write token", "current": true}]},
        "h2": {"unreachable": "no answer"}}});
    let revisions: steward::sched::scheduler::SchedRevisions = serde_json::from_value(sample.clone()).unwrap();
    let back = serde_json::to_value(&revisions).unwrap();
    assert_eq!(back, sample);
    check("SchedRevisions", back);
    let mut sample = json!({"node": "h1", "app": "ns/web", "revision": 2, "hash": "0123456789abcdef", "createdMs": 5,
        "appliedBy": "user root (uid 0)", "current": true, "outcome": {"phase": "complete"},
        "spec": {"apiVersion": "v4", "kind": "process"}});
    let one: steward::sched::scheduler::SchedRevision = serde_json::from_value(sample.clone()).unwrap();
    assert_eq!(serde_json::to_value(&one).unwrap(), sample);
    check("SchedRevision", sample.take());
    for role in ["read", "write"] {
        let who = steward::protocol::Whoami { role: role.into(), server: "steward-sched".into() };
        check("Whoami", serde_json::to_value(who).unwrap());
    }
    let entry =
        ConfigEntry { key: "reconcileSecs".into(), value: 30, default: 30, range: "1-3600".into(), about: "x".into() };
    check("ConfigEntry", serde_json::to_value(&entry).unwrap());
}
