//! One test per spec rule, through the library API: a minimal valid spec is mutated in one
//! place, and the test asserts the exact error path and the key part of the message, and that
//! the fixed spec passes. Rendering is tested the same way at the end.

use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use steward::config::Config;
use steward::spec::model::*;
use steward::spec::render::{InjectionSource, InjectionTarget, Probe};
use steward::spec::{self, Format, ProcessSpec, RenderContext, Roots, SpecError};

// ---------------------------------------------------------------------------------------------
// Helpers

fn roots() -> Roots {
    Config::default().roots()
}

/// The smallest realistic valid spec: one process with a fixed and a random port.
fn base() -> Value {
    json!({
        "apiVersion": "v4",
        "kind": "process",
        "metadata": {"name": "gamesvc", "namespace": "ns-a"},
        "spec": {
            "instance": 2,
            "template": {"spec": {"processes": [{
                "procName": "gamesvr",
                "workPath": "${work_base_dir}/${namespace}.${processname}.${instanceid}",
                "ports": [
                    {"hostPort": 8899, "name": "http_port", "protocol": "HTTP"},
                    {"hostPort": 0, "name": "metric_port", "protocol": "TCP"}
                ],
                "startCmd": "./start.sh --port ${ports.http_port}"
            }]}}
        }
    })
}

/// `base()` changed by `f`.
fn with(f: impl FnOnce(&mut Value)) -> Value {
    let mut d = base();
    f(&mut d);
    d
}

/// Removes `key` from the object `v`, which must have it.
fn remove(v: &mut Value, key: &str) {
    v.as_object_mut().unwrap().remove(key).unwrap_or_else(|| panic!("no {key}"));
}

fn proc0(d: &mut Value) -> &mut Value {
    &mut d["spec"]["template"]["spec"]["processes"][0]
}

/// Process 0's path prefix, as errors spell it.
const P0: &str = "spec.template.spec.processes[0]";

fn p0(rest: &str) -> String {
    format!("{P0}{rest}")
}

/// Sets `constraint` to one intersection item holding `union`.
fn constrain(d: &mut Value, union: Value) {
    d["constraint"] = json!({"intersectionItem": [{"unionData": [union]}]});
}

const U0: &str = "constraint.intersectionItem[0].unionData[0]";

fn u0(rest: &str) -> String {
    format!("{U0}{rest}")
}

fn parse_with(doc: &Value, roots: &Roots) -> Result<ProcessSpec, Vec<SpecError>> {
    spec::parse(&serde_json::to_string_pretty(doc).unwrap(), Format::Json, roots).map_err(|e| e.0)
}

fn parse(doc: &Value) -> Result<ProcessSpec, Vec<SpecError>> {
    parse_with(doc, &roots())
}

fn errors(doc: &Value) -> Vec<SpecError> {
    parse(doc).err().unwrap_or_default()
}

fn show(errors: &[SpecError]) -> String {
    errors.iter().map(|e| format!("\n  {e}")).collect()
}

#[track_caller]
fn assert_valid(doc: &Value) -> ProcessSpec {
    match parse(doc) {
        Ok(s) => s,
        Err(e) => panic!("expected valid, got:{}", show(&e)),
    }
}

/// Exactly these errors, in this order: (path, part of the message).
#[track_caller]
fn assert_errors(doc: &Value, expected: &[(&str, &str)]) {
    let got = errors(doc);
    let matches = got.len() == expected.len()
        && got.iter().zip(expected).all(|(g, (path, needle))| g.path == *path && g.message.contains(needle));
    assert!(
        matches,
        "expected:{}\ngot:{}",
        expected.iter().map(|(p, m)| format!("\n  {p}: ..{m}..")).collect::<String>(),
        show(&got)
    );
}

/// Exactly one error, at `path`, whose message contains `needle`.
#[track_caller]
fn assert_error(doc: &Value, path: &str, needle: &str) {
    assert_errors(doc, &[(path, needle)]);
}

#[test]
fn the_base_spec_is_valid() {
    assert_valid(&base());
}

// ---------------------------------------------------------------------------------------------
// apiVersion, kind, instance, processes

#[test]
fn api_version_and_kind_are_required_and_fixed() {
    assert_error(&with(|d| d["apiVersion"] = json!("v3")), "apiVersion", "must be \"v4\", found \"v3\"");
    assert_error(&with(|d| d["kind"] = json!("application")), "kind", "must be \"process\"");
    assert_error(&with(|d| remove(d, "apiVersion")), "apiVersion", "is required");
    assert_error(&with(|d| remove(d, "kind")), "kind", "is required");
}

#[test]
fn instance_count_is_0_to_10000() {
    // 0: the app is kept, nothing runs (seed 003 `replica: uint`, DESIGN § 7).
    assert_valid(&with(|d| d["spec"]["instance"] = json!(0)));
    assert_error(&with(|d| d["spec"]["instance"] = json!(10001)), "spec.instance", "must be at most 10000");
    assert_valid(&with(|d| d["spec"]["instance"] = json!(10000)));
    let s = assert_valid(&with(|d| remove(&mut d["spec"], "instance")));
    assert_eq!(s.spec.instance, 1, "instance defaults to 1");
}

#[test]
fn at_least_one_process() {
    assert_error(
        &with(|d| d["spec"]["template"]["spec"]["processes"] = json!([])),
        "spec.template.spec.processes",
        "needs at least one process",
    );
}

// ---------------------------------------------------------------------------------------------
// Names

#[test]
fn name_is_required() {
    assert_error(&with(|d| d["metadata"]["name"] = json!("")), "metadata.name", "is required");
    assert_error(&with(|d| remove(&mut d["metadata"], "name")), "metadata.name", "is required");
}

#[test]
fn name_holds_lowercase_letters_and_digits() {
    for bad in ["GameSvc", "game_svc", "game.svc", "game svc", "gämesvc"] {
        assert_error(
            &with(|d| d["metadata"]["name"] = json!(bad)),
            "metadata.name",
            "may hold only lowercase letters, digits and '-'",
        );
    }
    assert_valid(&with(|d| d["metadata"]["name"] = json!("gamesvc2")));
}

#[test]
fn name_must_not_start_with_a_digit() {
    assert_error(&with(|d| d["metadata"]["name"] = json!("1gamesvc")), "metadata.name", "must not start with a digit");
    assert_valid(&with(|d| d["metadata"]["name"] = json!("gamesvc1")));
}

#[test]
fn name_must_not_be_all_digits() {
    assert_error(&with(|d| d["metadata"]["name"] = json!("2048")), "metadata.name", "must not start with a digit");
}

#[test]
fn name_tolerates_dash_inside_only() {
    assert_valid(&with(|d| d["metadata"]["name"] = json!("game-svc")));
    assert_error(
        &with(|d| d["metadata"]["name"] = json!("-gamesvc")),
        "metadata.name",
        "must not start or end with '-'",
    );
    assert_error(
        &with(|d| d["metadata"]["name"] = json!("gamesvc-")),
        "metadata.name",
        "must not start or end with '-'",
    );
}

#[test]
fn name_is_at_most_63_characters() {
    assert_valid(&with(|d| d["metadata"]["name"] = json!("a".repeat(63))));
    assert_error(&with(|d| d["metadata"]["name"] = json!("a".repeat(64))), "metadata.name", "longer than 63");
}

#[test]
fn namespace_follows_the_name_rules() {
    assert_error(
        &with(|d| d["metadata"]["namespace"] = json!("9ns")),
        "metadata.namespace",
        "must not start with a digit",
    );
    assert_error(
        &with(|d| d["metadata"]["namespace"] = json!("ns_a")),
        "metadata.namespace",
        "may hold only lowercase",
    );
    assert_error(&with(|d| d["metadata"]["namespace"] = json!("NS")), "metadata.namespace", "may hold only lowercase");
    assert_valid(&with(|d| d["metadata"]["namespace"] = json!("ns-a")));
}

#[test]
fn namespace_default_group_is_tolerated_exactly() {
    let s = assert_valid(&with(|d| d["metadata"]["namespace"] = json!("defaultGroup")));
    assert_eq!(s.metadata.namespace, "defaultGroup");
    assert_error(
        &with(|d| d["metadata"]["namespace"] = json!("DefaultGroup")),
        "metadata.namespace",
        "may hold only lowercase",
    );
    assert_error(
        &with(|d| d["metadata"]["namespace"] = json!("defaultgroup_")),
        "metadata.namespace",
        "may hold only lowercase",
    );
    let s = assert_valid(&with(|d| remove(&mut d["metadata"], "namespace")));
    assert_eq!(s.metadata.namespace, "defaultGroup", "namespace defaults to defaultGroup");
}

#[test]
fn label_keys_must_not_be_empty() {
    assert_error(&with(|d| d["metadata"]["labels"] = json!({"": "x"})), "metadata.labels", "must not be empty");
    assert_valid(&with(|d| d["metadata"]["labels"] = json!({"app": "gamesvc"})));
}

// ---------------------------------------------------------------------------------------------
// Ports

#[test]
fn port_names_are_unique_within_a_process() {
    let d = with(|d| proc0(d)["ports"][1]["name"] = json!("http_port"));
    assert_error(&d, &p0(".ports[1].name"), "duplicate port name \"http_port\"");
}

#[test]
fn port_names_are_unique_across_processes() {
    let d = with(|d| {
        let second = json!({"procName": "sidecar", "workPath": "${work_base_dir}/${namespace}.${processname}.${instanceid}/b",
            "startCmd": "./b", "ports": [{"hostPort": 0, "name": "metric_port"}]});
        d["spec"]["template"]["spec"]["processes"].as_array_mut().unwrap().push(second);
    });
    assert_error(&d, "spec.template.spec.processes[1].ports[0].name", "duplicate port name \"metric_port\"");
}

#[test]
fn port_name_is_required_and_a_token() {
    assert_error(&with(|d| proc0(d)["ports"][1]["name"] = json!("")), &p0(".ports[1].name"), "is required");
    assert_error(
        &with(|d| proc0(d)["ports"][1]["name"] = json!("metric port")),
        &p0(".ports[1].name"),
        "letters, digits, '_' or '-'",
    );
    assert_valid(&with(|d| proc0(d)["ports"][1]["name"] = json!("metric-port_2")));
}

#[test]
fn host_port_is_0_for_random_or_1_to_65535() {
    for bad in [-1, 65536, 100000] {
        assert_error(
            &with(|d| proc0(d)["ports"][0]["hostPort"] = json!(bad)),
            &p0(".ports[0].hostPort"),
            "is out of range: 0 (random) or 1-65535",
        );
    }
    for ok in [0, 1, 65535] {
        assert_valid(&with(|d| proc0(d)["ports"][0]["hostPort"] = json!(ok)));
    }
}

#[test]
fn a_fixed_port_is_declared_once_per_protocol_space() {
    let twice = with(|d| proc0(d)["ports"].as_array_mut().unwrap().push(json!({"hostPort": 8899, "name": "admin"})));
    assert_error(&twice, &p0(".ports[2].hostPort"), "port 8899 is declared twice");
    let udp = with(|d| {
        proc0(d)["ports"].as_array_mut().unwrap().push(json!({"hostPort": 8899, "name": "dns", "protocol": "UDP"}))
    });
    assert_valid(&udp);
}

#[test]
fn protocol_is_tcp_udp_http_or_https_in_any_case() {
    assert_error(
        &with(|d| proc0(d)["ports"][0]["protocol"] = json!("SCTP")),
        &p0(".ports[0].protocol"),
        "must be one of TCP, UDP, HTTP, HTTPS, found \"SCTP\"",
    );
    for ok in ["TCP", "udp", "Http", "HTTPS"] {
        assert_valid(&with(|d| proc0(d)["ports"][0]["protocol"] = json!(ok)));
    }
    let s = assert_valid(&with(|d| remove(&mut proc0(d)["ports"][0], "protocol")));
    assert_eq!(s.spec.template.spec.processes[0].ports[0].protocol, Protocol::Tcp, "protocol defaults to TCP");
}

// ---------------------------------------------------------------------------------------------
// Enums

#[test]
fn restart_policy_is_never_always_or_on_failure() {
    assert_error(
        &with(|d| d["restartPolicy"] = json!({"policy": "Never | Always | OnFailure"})),
        "restartPolicy.policy",
        "must be one of Never, Always, OnFailure, found \"Never | Always | OnFailure\"",
    );
    for (text, kind) in [
        ("Never", RestartPolicyKind::Never),
        ("always", RestartPolicyKind::Always),
        ("ONFAILURE", RestartPolicyKind::OnFailure),
    ] {
        let s = assert_valid(&with(|d| d["restartPolicy"] = json!({"policy": text})));
        assert_eq!(s.restart_policy.policy, kind);
    }
}

#[test]
fn pull_policy_is_always_or_if_not_present() {
    let uri =
        |policy: &str| with(|d| proc0(d)["uris"] = json!([{"value": "/game/gamesvc.tar.gz", "pullPolicy": policy}]));
    assert_error(&uri("Never"), &p0(".uris[0].pullPolicy"), "must be one of Always, IfNotPresent, found \"Never\"");
    assert_error(&uri("Always|IfNotPresent"), &p0(".uris[0].pullPolicy"), "must be one of Always, IfNotPresent");
    let s = assert_valid(&uri("always"));
    assert_eq!(s.spec.template.spec.processes[0].uris[0].effective_pull_policy(), PullPolicy::Always);
}

#[test]
fn image_pull_policy_is_read_as_pull_policy() {
    let d = with(|d| proc0(d)["uris"] = json!([{"value": "/game/gamesvc.tar.gz", "imagePullPolicy": "Always"}]));
    let s = assert_valid(&d);
    let uri = &s.spec.template.spec.processes[0].uris[0];
    assert_eq!(uri.pull_policy, Some(PullPolicy::Always));
    assert_eq!(uri.image_pull_policy, None, "folded into pullPolicy");
    let d = with(|d| proc0(d)["uris"] = json!([{"value": "/game/gamesvc.tar.gz", "imagePullPolicy": "Sometimes"}]));
    assert_error(&d, &p0(".uris[0].imagePullPolicy"), "must be one of Always, IfNotPresent");
    let both = with(|d| {
        proc0(d)["uris"] = json!([{"value": "/g.tgz", "pullPolicy": "Always", "imagePullPolicy": "IfNotPresent"}])
    });
    assert_error(&both, &p0(".uris[0]"), "pullPolicy Always and imagePullPolicy IfNotPresent disagree");
    let same =
        with(|d| proc0(d)["uris"] = json!([{"value": "/g.tgz", "pullPolicy": "Always", "imagePullPolicy": "always"}]));
    assert_valid(&same);
}

#[test]
fn check_type_is_one_of_five() {
    let d = with(|d| {
        proc0(d)["healthChecks"] =
            json!([{"type": "HTTP|TCP|COMMAND|REMOTE_HTTP|REMOTE_TCP", "http": {"portName": "http_port"}}])
    });
    assert_error(&d, &p0(".healthChecks[0].type"), "must be one of HTTP, TCP, COMMAND, REMOTE_HTTP, REMOTE_TCP");
    let d = with(|d| proc0(d)["healthChecks"] = json!([{"type": "remote_tcp", "tcp": {"portName": "http_port"}}]));
    assert_eq!(assert_valid(&d).spec.template.spec.processes[0].health_checks[0].kind, Some(CheckType::RemoteTcp));
}

#[test]
fn scheme_is_http_or_https() {
    let check = |scheme: &str| {
        with(|d| {
            proc0(d)["healthChecks"] = json!([{"type": "HTTP", "http": {"portName": "http_port", "scheme": scheme}}])
        })
    };
    assert_error(
        &check("http|https"),
        &p0(".healthChecks[0].http.scheme"),
        "must be one of http, https, found \"http|https\"",
    );
    assert_valid(&check("https"));
    assert_valid(&check("HTTPS"));
}

#[test]
fn item_type_is_env_or_file() {
    let item = |t: &str| {
        with(|d| {
            proc0(d)["secrets"] =
                json!([{"secretName": "s", "items": [{"type": t, "dataKey": "k", "keyOrPath": "TOKEN"}]}])
        })
    };
    assert_error(
        &item("environment"),
        &p0(".secrets[0].items[0].type"),
        "must be one of env, file, found \"environment\"",
    );
    assert_valid(&item("env"));
    assert_valid(&item("ENV"));
}

#[test]
fn a_misspelt_kind_or_enum_value_gets_a_did_you_mean() {
    assert_error(
        &with(|d| d["kind"] = json!("proccess")),
        "kind",
        "must be \"process\" or \"pod\", found \"proccess\" (did you mean \"process\"?)",
    );
    assert_error(&with(|d| d["kind"] = json!("Pods")), "kind", "(did you mean \"pod\"?)");
    // Nothing close: the choices alone.
    let far = errors(&with(|d| d["kind"] = json!("deployment")));
    assert!(far.len() == 1 && !far[0].message.contains("did you mean"), "{}", show(&far));

    let d = with(|d| d["restartPolicy"] = json!({"policy": "OnFailur"}));
    assert_error(&d, "restartPolicy.policy", "found \"OnFailur\" (did you mean `OnFailure`?)");
    let d = with(|d| proc0(d)["uris"] = json!([{"value": "/pkg.tar.gz", "pullPolicy": "IfNotPresnt"}]));
    assert_error(&d, &p0(".uris[0].pullPolicy"), "(did you mean `IfNotPresent`?)");
    let d = with(|d| proc0(d)["ports"][1]["protocol"] = json!("UPD"));
    assert_error(&d, &p0(".ports[1].protocol"), "found \"UPD\" (did you mean `UDP`?)");
    let d = with(|d| constrain(d, json!({"name": "h", "operate": "UNIQEU"})));
    assert_error(&d, &u0(".operate"), "(did you mean `UNIQUE`?)");
}

#[test]
fn operate_is_one_of_eight_in_any_case() {
    let d = with(|d| constrain(d, json!({"name": "cpus", "operate": "BIGGER", "type": 1, "scalar": {"value": 1}})));
    assert_error(
        &d,
        &u0(".operate"),
        "must be one of UNIQUE, MAXPER, CLUSTER, LIKE, UNLIKE, GROUPBY, EXCLUDE, GREATER, found \"BIGGER\"",
    );
    // The seed itself writes `ClUSTER`.
    let d = with(|d| {
        constrain(d, json!({"name": "section", "operate": "ClUSTER", "type": 4, "set": {"item": ["shenzhen"]}}))
    });
    let s = assert_valid(&d);
    assert_eq!(s.constraint.unwrap().intersection_item[0].union_data[0].operate, Some(Operator::Cluster));
}

// ---------------------------------------------------------------------------------------------
// Health checks

fn check(c: Value) -> Value {
    with(|d| proc0(d)["healthChecks"] = json!([c]))
}

fn checks(c: Value) -> Value {
    with(|d| proc0(d)["healthChecks"] = c)
}

#[test]
fn timeout_must_be_below_interval() {
    let c =
        check(json!({"type": "TCP", "intervalSeconds": 10, "timeoutSeconds": 10, "tcp": {"portName": "http_port"}}));
    assert_error(&c, &p0(".healthChecks[0].timeoutSeconds"), "must be less than intervalSeconds (10 >= 10)");
    let c = check(json!({"type": "TCP", "intervalSeconds": 10, "timeoutSeconds": 9, "tcp": {"portName": "http_port"}}));
    assert_valid(&c);
}

#[test]
fn default_timeout_counts_against_a_short_interval() {
    let c = check(json!({"type": "TCP", "intervalSeconds": 10, "tcp": {"portName": "http_port"}}));
    assert_error(&c, &p0(".healthChecks[0].timeoutSeconds"), "must be less than intervalSeconds (20 >= 10)");
}

#[test]
fn interval_and_timeout_are_at_least_1() {
    let c = check(json!({"type": "TCP", "intervalSeconds": 0, "timeoutSeconds": 0, "tcp": {"portName": "http_port"}}));
    assert_errors(
        &c,
        &[
            (&p0(".healthChecks[0].intervalSeconds"), "must be at least 1"),
            (&p0(".healthChecks[0].timeoutSeconds"), "must be at least 1"),
        ],
    );
}

#[test]
fn at_most_one_of_http_tcp_and_command() {
    let c = checks(json!([
        {"type": "HTTP", "http": {"portName": "http_port"}},
        {"type": "COMMAND", "command": {"value": "./check.sh"}}
    ]));
    assert_error(&c, &p0(".healthChecks"), "at most one of HTTP, TCP and COMMAND per process, found 2");
    let c = checks(json!([
        {"type": "HTTP", "http": {"portName": "http_port"}},
        {"type": "REMOTE_HTTP", "http": {"portName": "http_port"}},
        {"type": "REMOTE_TCP", "tcp": {"portName": "metric_port"}}
    ]));
    assert_valid(&c);
}

#[test]
fn at_most_three_checks() {
    let remote = json!({"type": "REMOTE_TCP", "tcp": {"portName": "http_port"}});
    let c = checks(json!([remote, remote, remote, remote]));
    assert_error(&c, &p0(".healthChecks"), "at most 3 health checks, found 4");
    assert_valid(&checks(json!([remote, remote, remote])));
}

#[test]
fn port_name_must_name_a_port_when_port_is_not_positive() {
    let c = check(json!({"type": "HTTP", "http": {"port": 0, "portName": "test-http"}}));
    assert_error(
        &c,
        &p0(".healthChecks[0].http.portName"),
        "\"test-http\" names no port of this spec (ports: http_port, metric_port)",
    );
    let c = check(json!({"type": "TCP", "tcp": {"port": -1, "portName": "nope"}}));
    assert_error(&c, &p0(".healthChecks[0].tcp.portName"), "\"nope\" names no port");
    // port > 0 wins: portName is not looked at (the seed's own template relies on it).
    assert_valid(&check(json!({"type": "HTTP", "http": {"port": 8080, "portName": "test-http"}})));
    assert_valid(&check(json!({"type": "TCP", "tcp": {"portName": "metric_port"}})));
}

#[test]
fn a_check_needs_port_or_port_name() {
    assert_error(
        &check(json!({"type": "TCP", "tcp": {}})),
        &p0(".healthChecks[0].tcp"),
        "needs port (> 0) or portName",
    );
    assert_error(
        &check(json!({"type": "REMOTE_HTTP", "http": {"port": -5}})),
        &p0(".healthChecks[0].http"),
        "needs port (> 0) or portName",
    );
}

#[test]
fn a_check_port_is_at_most_65535() {
    assert_error(
        &check(json!({"type": "REMOTE_TCP", "tcp": {"port": 70000}})),
        &p0(".healthChecks[0].tcp.port"),
        "70000 is out of range 1-65535",
    );
    assert_valid(&check(json!({"type": "REMOTE_TCP", "tcp": {"port": 65535}})));
}

#[test]
fn port_name_may_name_another_process_port() {
    let d = with(|d| {
        let second = json!({"procName": "sidecar", "workPath": "${work_base_dir}/${namespace}.${processname}.${instanceid}/b",
            "startCmd": "./b --upstream ${ports.http_port}",
            "healthChecks": [{"type": "TCP", "tcp": {"portName": "metric_port"}}]});
        d["spec"]["template"]["spec"]["processes"].as_array_mut().unwrap().push(second);
    });
    assert_valid(&d);
}

#[test]
fn the_block_matching_the_type_is_required() {
    let cases = [
        ("HTTP", json!({"tcp": {"portName": "http_port"}}), ".healthChecks[0].http", "is required for an HTTP check"),
        ("REMOTE_HTTP", json!({}), ".healthChecks[0].http", "is required for an HTTP check"),
        ("TCP", json!({"http": {"portName": "http_port"}}), ".healthChecks[0].tcp", "is required for a TCP check"),
        ("REMOTE_TCP", json!({}), ".healthChecks[0].tcp", "is required for a TCP check"),
        (
            "COMMAND",
            json!({"tcp": {"portName": "http_port"}}),
            ".healthChecks[0].command.value",
            "is required for a COMMAND check",
        ),
    ];
    for (kind, mut blocks, path, needle) in cases {
        blocks["type"] = json!(kind);
        assert_error(&check(blocks), &p0(path), needle);
    }
}

#[test]
fn a_command_check_needs_a_non_blank_command() {
    assert_error(
        &check(json!({"type": "COMMAND", "command": {"value": "  "}})),
        &p0(".healthChecks[0].command.value"),
        "is required for a COMMAND check",
    );
    assert_valid(&check(json!({"type": "COMMAND", "command": {"value": "./check.sh"}})));
}

#[test]
fn check_type_is_required() {
    assert_error(
        &check(json!({"tcp": {"portName": "http_port"}})),
        &p0(".healthChecks[0].type"),
        "is required (HTTP, TCP, COMMAND, REMOTE_HTTP or REMOTE_TCP)",
    );
}

#[test]
fn http_check_path_starts_with_slash_and_headers_are_tokens() {
    assert_error(
        &check(json!({"type": "HTTP", "http": {"portName": "http_port", "path": "check"}})),
        &p0(".healthChecks[0].http.path"),
        "must start with '/'",
    );
    assert_error(
        &check(json!({"type": "REMOTE_HTTP", "http": {"portName": "http_port", "headers": {"bad header": "x"}}})),
        &p0(".healthChecks[0].http.headers"),
        "\"bad header\" is not a valid header name",
    );
    assert_valid(&check(
        json!({"type": "REMOTE_HTTP", "http": {"portName": "http_port", "path": "/check", "headers": {"Host": "www.example.com"}}}),
    ));
}

// ---------------------------------------------------------------------------------------------
// Resources

fn limits(cpu: Value, memory: Value) -> Value {
    with(|d| proc0(d)["resources"] = json!({"limits": {"cpu": cpu, "memory": memory}}))
}

#[test]
fn cpu_and_memory_are_positive_or_minus_one_as_string_or_number() {
    for ok in [json!("2"), json!(2), json!(0.5), json!("0.25"), json!(-1), json!("-1"), json!(" 4 ")] {
        assert_valid(&limits(ok.clone(), ok));
    }
}

#[test]
fn cpu_and_memory_reject_zero_negative_and_text() {
    for bad in [
        json!("0"),
        json!(0),
        json!("-2"),
        json!(-0.5),
        json!("two"),
        json!("500Q"),
        json!("inf"),
        json!("NaN"),
        json!(""),
    ] {
        assert_errors(
            &limits(bad.clone(), bad.clone()),
            &[
                (&p0(".resources.limits.cpu"), "must be a positive number of cores"),
                (&p0(".resources.limits.memory"), "must be a positive number of MiB"),
            ],
        );
    }
}

#[test]
fn cpu_and_memory_take_kubernetes_quantities_and_requests_within_limits() {
    for (cpu, memory) in [("100m", "128Mi"), ("1.5", "1Gi"), ("250m", "500M"), ("2", "512Ki")] {
        assert_valid(&limits(json!(cpu), json!(memory)));
    }
    let resources = |limits: Value, requests: Value| {
        with(|d| proc0(d)["resources"] = json!({"limits": limits, "requests": requests}))
    };
    let s = assert_valid(&resources(json!({"cpu": 1, "memory": 512}), json!({"cpu": "100m", "memory": "64Mi"})));
    assert_eq!(s.instance_requests(), steward::resources::Requests::of(0.1, 64.0));
    // A limit alone requests the limit; neither requests nothing.
    let s = assert_valid(&limits(json!("500m"), json!("1Gi")));
    assert_eq!(s.instance_requests(), steward::resources::Requests::of(0.5, 1024.0));
    assert!(assert_valid(&base()).instance_requests().is_zero());
    assert_valid(&resources(json!({}), json!({"cpu": 0, "memory": "0"})));
    assert_errors(
        &resources(json!({"cpu": "500m", "memory": "512"}), json!({"cpu": "2", "memory": "1Gi"})),
        &[
            (&p0(".resources.requests.cpu"), "is more than limits.cpu (0.5 cores)"),
            (&p0(".resources.requests.memory"), "is more than limits.memory (512 MiB)"),
        ],
    );
    assert_errors(
        &resources(json!({}), json!({"cpu": "-1", "memory": "lots"})),
        &[
            (&p0(".resources.requests.cpu"), "a request cannot be unlimited"),
            (&p0(".resources.requests.memory"), "must be a positive number of MiB"),
        ],
    );
    // "128m" would be thousandths of a byte: refused, naming the unit meant.
    assert_error(&limits(json!("1"), json!("128m")), &p0(".resources.limits.memory"), "\"Mi\"");
}

#[test]
fn cpu_of_a_wrong_type_is_reported_at_its_path() {
    let d = limits(json!(true), json!("500"));
    assert_error(&d, &p0(".resources.limits.cpu"), "expected a number or a string");
}

#[test]

fn cpu_of_a_wrong_type_does_not_hide_other_errors() {
    let mut d = limits(json!(true), json!("500"));
    d["metadata"]["name"] = json!("GameSvc");
    assert_errors(&d, &[("metadata.name", "may hold only lowercase"), (&p0(".resources.limits.cpu"), "expected")]);
}

// ---------------------------------------------------------------------------------------------
// Required process fields

#[test]
fn start_cmd_proc_name_and_work_path_are_required() {
    let d = with(|d| {
        for key in ["startCmd", "procName", "workPath"] {
            remove(proc0(d), key);
        }
    });
    assert_errors(
        &d,
        &[(&p0(".procName"), "is required"), (&p0(".workPath"), "is required"), (&p0(".startCmd"), "is required")],
    );
}

#[test]
fn blank_start_cmd_counts_as_missing() {
    assert_error(&with(|d| proc0(d)["startCmd"] = json!("   ")), &p0(".startCmd"), "is required");
}

#[test]
fn proc_name_is_a_program_name_and_unique() {
    assert_error(&with(|d| proc0(d)["procName"] = json!("bin/gamesvr")), &p0(".procName"), "without '/' or spaces");
    assert_error(&with(|d| proc0(d)["procName"] = json!("game svr")), &p0(".procName"), "without '/' or spaces");
    let d = with(|d| {
        let second = json!({"procName": "gamesvr", "workPath": "${work_base_dir}/${namespace}.${processname}.${instanceid}/b", "startCmd": "./b"});
        d["spec"]["template"]["spec"]["processes"].as_array_mut().unwrap().push(second);
    });
    assert_error(&d, "spec.template.spec.processes[1].procName", "duplicate procName \"gamesvr\"");
}

#[test]
fn user_is_a_valid_user_name_defaulting_to_root() {
    assert_error(&with(|d| proc0(d)["user"] = json!("Admin")), &p0(".user"), "\"Admin\" is not a valid user name");
    assert_valid(&with(|d| proc0(d)["user"] = json!("www-data")));
    assert_eq!(assert_valid(&base()).spec.template.spec.processes[0].user, "root");
}

#[test]
fn env_names_are_valid_and_unique() {
    let d = with(|d| {
        proc0(d)["env"] =
            json!([{"name": "A", "value": "1"}, {"name": "A", "value": "2"}, {"name": "game-mode", "value": "x"}])
    });
    assert_errors(
        &d,
        &[
            (&p0(".env[1].name"), "duplicate environment variable \"A\""),
            (&p0(".env[2].name"), "\"game-mode\" is not a valid environment variable name"),
        ],
    );
}

// ---------------------------------------------------------------------------------------------
// Package URIs

fn uri(u: Value) -> Value {
    with(|d| proc0(d)["uris"] = json!([u]))
}

#[test]
fn uri_value_is_a_url_or_repository_path() {
    assert_error(&uri(json!({})), &p0(".uris[0].value"), "is required");
    assert_error(&uri(json!({"value": "ftp://h/x.tgz"})), &p0(".uris[0].value"), "scheme \"ftp\" is not supported");
    assert_error(&uri(json!({"value": "x.tgz"})), &p0(".uris[0].value"), "is not a URL");
    assert_error(&uri(json!({"value": "/game/../etc/x"})), &p0(".uris[0].value"), "must not contain '..'");
    assert_error(&uri(json!({"value": "https://u:p@h/x.tgz"})), &p0(".uris[0].value"), "put credentials in user/pwd");
    assert_valid(&uri(json!({"value": "https://repo.example.com/x.tgz"})));
    assert_valid(&uri(json!({"value": "/game/gamesvc-v1.tar.gz"})));
}

#[test]
fn uri_pwd_needs_user_and_sha256_is_hex() {
    assert_error(&uri(json!({"value": "/g.tgz", "pwd": "x"})), &p0(".uris[0].user"), "is required when pwd is set");
    assert_error(
        &uri(json!({"value": "/g.tgz", "sha256": "abc"})),
        &p0(".uris[0].sha256"),
        "must be 64 hexadecimal digits",
    );
    assert_valid(&uri(json!({"value": "/g.tgz", "user": "u", "pwd": "x", "sha256": "A".repeat(64)})));
}

// ---------------------------------------------------------------------------------------------
// Secrets and configmaps

fn secret(items: Value) -> Value {
    with(|d| proc0(d)["secrets"] = json!([{"secretName": "game-secret", "items": items}]))
}

#[test]
fn secret_name_and_configmap_name_are_required() {
    let d = with(|d| proc0(d)["secrets"] = json!([{"items": [{"type": "env", "dataKey": "k", "keyOrPath": "K"}]}]));
    assert_error(&d, &p0(".secrets[0].secretName"), "is required");
    let d = with(|d| proc0(d)["configmaps"] = json!([{"items": [{"type": "env", "dataKey": "k", "keyOrPath": "K"}]}]));
    assert_error(&d, &p0(".configmaps[0].name"), "is required");
}

#[test]
fn secret_and_configmap_need_items() {
    assert_error(&secret(json!([])), &p0(".secrets[0].items"), "needs at least one item");
    let d = with(|d| proc0(d)["configmaps"] = json!([{"name": "c"}]));
    assert_error(&d, &p0(".configmaps[0].items"), "needs at least one item");
}

#[test]
fn item_type_and_data_key_are_required() {
    assert_error(
        &secret(json!([{"dataKey": "k", "keyOrPath": "K"}])),
        &p0(".secrets[0].items[0].type"),
        "is required (env or file)",
    );
    assert_error(
        &secret(json!([{"type": "env", "keyOrPath": "K"}])),
        &p0(".secrets[0].items[0].dataKey"),
        "is required",
    );
}

#[test]
fn env_item_key_is_an_environment_variable_name() {
    assert_error(
        &secret(json!([{"type": "env", "dataKey": "k", "keyOrPath": "1TOKEN"}])),
        &p0(".secrets[0].items[0].keyOrPath"),
        "\"1TOKEN\" is not a valid environment variable name",
    );
    assert_valid(&secret(json!([{"type": "env", "dataKey": "k", "keyOrPath": "GAME_TOKEN"}])));
}

#[test]
fn env_item_key_missing_is_required() {
    assert_error(
        &secret(json!([{"type": "env", "dataKey": "k"}])),
        &p0(".secrets[0].items[0].keyOrPath"),
        "is required",
    );
}

#[test]
fn file_item_needs_a_path_and_a_valid_owner() {
    assert_error(
        &secret(json!([{"type": "file", "dataKey": "k"}])),
        &p0(".secrets[0].items[0].keyOrPath"),
        "is required (the file's path)",
    );
    assert_error(
        &secret(json!([{"type": "file", "dataKey": "k", "keyOrPath": "a.pem", "user": "Root"}])),
        &p0(".secrets[0].items[0].user"),
        "\"Root\" is not a valid user name",
    );
    assert_valid(&secret(
        json!([{"type": "file", "dataKey": "k", "keyOrPath": "a.pem", "user": "user", "readOnly": true, "subPath": "k8s-only"}]),
    ));
}

#[test]
fn capitalized_key_or_path_is_read_as_key_or_path() {
    let d = with(|d| {
        proc0(d)["configmaps"] = json!([{"name": "c", "items": [{"type": "env", "dataKey": "k", "KeyOrPath": "CONF"}]}])
    });
    let s = assert_valid(&d);
    assert_eq!(s.spec.template.spec.processes[0].configmaps[0].items[0].key_or_path, "CONF");
    let d = with(|d| {
        proc0(d)["configmaps"] =
            json!([{"name": "c", "items": [{"type": "env", "dataKey": "k", "KeyOrPath": "A", "keyOrPath": "B"}]}])
    });
    assert_error(&d, &p0(".configmaps[0].items[0]"), "keyOrPath and KeyOrPath disagree");
    let d = with(|d| {
        proc0(d)["configmaps"] =
            json!([{"name": "c", "items": [{"type": "env", "dataKey": "k", "KeyOrPath": "A", "keyOrPath": "A"}]}])
    });
    assert_valid(&d);
}

// ---------------------------------------------------------------------------------------------
// Constraints

fn rule(u: Value) -> Value {
    with(|d| constrain(d, u))
}

#[test]
fn constraint_rule_needs_name_and_operate() {
    assert_errors(
        &rule(json!({"type": 3, "text": {"value": "x"}})),
        &[(&u0(".name"), "is required (the node attribute"), (&u0(".operate"), "is required (UNIQUE, MAXPER")],
    );
    let d = with(|d| d["constraint"] = json!({"intersectionItem": [{"unionData": []}]}));
    assert_error(&d, "constraint.intersectionItem[0].unionData", "needs at least one rule");
}

#[test]
fn unique_takes_no_parameter() {
    assert_valid(&rule(json!({"name": "hostname", "operate": "UNIQUE"})));
}

#[test]
fn maxper_needs_type_3() {
    assert_error(
        &rule(json!({"name": "idc", "operate": "MAXPER", "type": 4, "set": {"item": ["5"]}})),
        &u0(".type"),
        "MAXPER needs type 3 (text), found 4 (set)",
    );
    assert_error(
        &rule(json!({"name": "idc", "operate": "MAXPER", "text": {"value": "5"}})),
        &u0(".type"),
        "MAXPER needs type 3 (text), found none",
    );
    assert_error(
        &rule(json!({"name": "idc", "operate": "MAXPER", "type": 3})),
        &u0(".text"),
        "is required for MAXPER with type 3",
    );
}

#[test]
fn maxper_text_is_a_positive_integer() {
    for bad in [json!("0"), json!("-1"), json!("2.5"), json!("five"), json!(0)] {
        let d = rule(json!({"name": "idc", "operate": "MAXPER", "type": 3, "text": {"value": bad}}));
        assert_error(&d, &u0(".text.value"), "MAXPER needs a positive whole number");
    }
    for ok in [json!("5"), json!(5), json!(" 3 ")] {
        assert_valid(&rule(json!({"name": "idc", "operate": "MAXPER", "type": 3, "text": {"value": ok}})));
    }
}

#[test]
fn cluster_and_groupby_need_a_non_empty_set() {
    for op in ["CLUSTER", "GROUPBY"] {
        assert_error(
            &rule(json!({"name": "idc", "operate": op, "type": 3, "text": {"value": "a"}})),
            &u0(".type"),
            &format!("{op} needs type 4 (set), found 3 (text)"),
        );
        assert_error(
            &rule(json!({"name": "idc", "operate": op, "type": 4})),
            &u0(".set"),
            &format!("is required for {op} with type 4"),
        );
        assert_error(
            &rule(json!({"name": "idc", "operate": op, "type": 4, "set": {"item": []}})),
            &u0(".set.item"),
            "must not be empty",
        );
        assert_valid(&rule(json!({"name": "idc", "operate": op, "type": 4, "set": {"item": ["sh", "sz"]}})));
    }
}

#[test]
fn like_and_unlike_take_a_regex_text_or_a_set_of_regexes() {
    for op in ["LIKE", "UNLIKE"] {
        assert_valid(&rule(json!({"name": "hostname", "operate": op, "type": 3, "text": {"value": "slave[3-5]"}})));
        assert_valid(&rule(
            json!({"name": "hostname", "operate": op, "type": 4, "set": {"item": ["slave[3-5]", "db-.*"]}}),
        ));
        assert_error(
            &rule(json!({"name": "hostname", "operate": op, "type": 1, "scalar": {"value": 1}})),
            &u0(".type"),
            &format!("{op} needs type 3 (text) or 4 (set), found 1 (scalar)"),
        );
        assert_error(
            &rule(json!({"name": "hostname", "operate": op, "type": 3, "text": {"value": "slave[3-"}})),
            &u0(".text.value"),
            "is not a valid regular expression",
        );
        assert_error(
            &rule(json!({"name": "hostname", "operate": op, "type": 3, "text": {"value": ""}})),
            &u0(".text.value"),
            "must not be empty",
        );
        assert_error(
            &rule(json!({"name": "hostname", "operate": op, "type": 4, "set": {"item": ["ok", "(x"]}})),
            &u0(".set.item[1]"),
            "\"(x\" is not a valid regular expression",
        );
    }
}

#[test]
fn exclude_works_on_label_only() {
    let d = rule(json!({"name": "hostname", "operate": "EXCLUDE", "type": 4, "set": {"item": ["processname:dbsvr"]}}));
    assert_error(&d, &u0(".name"), "EXCLUDE works on \"label\" only, found \"hostname\"");
}

#[test]
fn exclude_needs_a_set_of_key_value_labels() {
    assert_error(
        &rule(json!({"name": "label", "operate": "EXCLUDE", "type": 3, "text": {"value": "a:b"}})),
        &u0(".type"),
        "EXCLUDE needs type 4 (set), found 3 (text)",
    );
    let d = rule(
        json!({"name": "label", "operate": "EXCLUDE", "type": 4, "set": {"item": ["processname:dbsvr", "dbsvr", "app:"]}}),
    );
    assert_errors(
        &d,
        &[
            (&u0(".set.item[1]"), "EXCLUDE items are key:value labels, found \"dbsvr\""),
            (&u0(".set.item[2]"), "found \"app:\""),
        ],
    );
    assert_valid(&rule(
        json!({"name": "label", "operate": "EXCLUDE", "type": 4, "set": {"item": ["processname:gamesvr", "tier:cache"]}}),
    ));
}

#[test]

fn exclude_reports_name_and_type_together() {
    let d = rule(json!({"name": "hostname", "operate": "EXCLUDE", "type": 3, "text": {"value": "a:b"}}));
    assert_errors(&d, &[(&u0(".name"), "EXCLUDE works on \"label\" only"), (&u0(".type"), "EXCLUDE needs type 4")]);
}

#[test]
fn greater_needs_a_scalar_of_type_1() {
    assert_error(
        &rule(json!({"name": "cpus", "operate": "GREATER", "type": 3, "text": {"value": "4"}})),
        &u0(".type"),
        "GREATER needs type 1 (scalar), found 3 (text)",
    );
    assert_error(
        &rule(json!({"name": "cpus", "operate": "GREATER", "type": 1})),
        &u0(".scalar"),
        "is required for GREATER with type 1",
    );
    assert_error(
        &rule(json!({"name": "cpus", "operate": "GREATER", "type": 1, "scalar": {"value": "4"}})),
        &u0(".scalar.value"),
        "expected a number, found the string \"4\"",
    );
    assert_valid(&rule(json!({"name": "cpus", "operate": "GREATER", "type": 1, "scalar": {"value": 15.5}})));
}

#[test]
fn scaler_is_read_as_scalar() {
    let s = assert_valid(&rule(json!({"name": "cpus", "operate": "GREATER", "type": 1, "scaler": {"value": 8}})));
    let u = &s.constraint.unwrap().intersection_item[0].union_data[0];
    assert_eq!(u.scalar.as_ref().map(|s| s.value), Some(8.0));
    assert_eq!(u.scaler, None, "folded into scalar");
    let both =
        rule(json!({"name": "cpus", "operate": "GREATER", "type": 1, "scalar": {"value": 1}, "scaler": {"value": 2}}));
    assert_error(&both, U0, "scalar and scaler disagree");
}

#[test]
fn constraint_type_is_1_3_or_4() {
    assert_error(
        &rule(json!({"name": "idc", "operate": "MAXPER", "type": 2, "text": {"value": "5"}})),
        &u0(".type"),
        "2 is not a type: 1 (scalar), 3 (text) or 4 (set)",
    );
}

#[test]
fn nested_union_data_is_an_unknown_field() {
    let d = rule(json!({"unionData": [{"name": "hostname", "operate": "UNIQUE"}]}));
    assert_errors(
        &d,
        &[
            (&u0(".name"), "is required"),
            (&u0(".operate"), "is required"),
            (&u0(".unionData"), "unknown field `unionData`"),
        ],
    );
}

// ---------------------------------------------------------------------------------------------
// Variables

/// Every variable of seed 000, with the ports of `base()`.
const ALL_VARS: &str = "ns=${namespace} name=${processname} id=${instanceid} ip=${hostip} fixed=${ports.http_port} \
random=${ports.metric_port} wb=${work_base_dir} rb=${run_base_dir} wp=${workPath} pf=${pidFile}";

fn all_vars_everywhere() -> Value {
    with(|d| {
        let p = proc0(d);
        p["workPath"] = json!("${work_base_dir}/${namespace}.${processname}.${instanceid}/${hostip}-${ports.http_port}-${ports.metric_port}");
        p["pidFile"] = json!("${run_base_dir}/${namespace}.${processname}.${instanceid}/${processname}.pid");
        for field in ["startCmd", "stopCmd", "restartCmd", "reloadCmd"] {
            p[field] = json!(format!("./{field} {ALL_VARS}"));
        }
        p["env"] = json!([{"name": "ALL", "value": ALL_VARS}]);
        p["uris"] = json!([{"value": "/game/gamesvc.tar.gz", "outputDir": "${workPath}/pkg-${ports.metric_port}"}]);
        p["healthChecks"] = json!([{"type": "COMMAND", "command": {"value": format!("./check.sh {ALL_VARS}")}}]);
    })
}

#[test]
fn every_known_variable_is_accepted_in_every_templated_field() {
    assert_valid(&all_vars_everywhere());
}

#[test]
fn an_unknown_variable_is_an_error_with_a_suggestion() {
    let d = with(|d| proc0(d)["startCmd"] = json!("./start.sh --address ${hospip}"));
    assert_error(&d, &p0(".startCmd"), "unknown variable `${hospip}`");
    let msg = &errors(&d)[0].message;
    assert!(msg.contains("did you mean `${hostip}`?"), "{msg}");
    assert!(msg.contains("write `$${hospip}` for a literal"), "{msg}");
}

#[test]
fn unknown_variables_are_found_in_each_templated_field() {
    let fields = [
        (".workPath", "workPath"),
        (".pidFile", "pidFile"),
        (".startCmd", "startCmd"),
        (".stopCmd", "stopCmd"),
        (".restartCmd", "restartCmd"),
        (".reloadCmd", "reloadCmd"),
    ];
    for (path, field) in fields {
        let d = with(|d| proc0(d)[field] = json!("${work_base_dir}/${HOME}/x"));
        assert!(
            errors(&d).iter().any(|e| e.path == p0(path) && e.message.contains("unknown variable `${HOME}`")),
            "{field}:{}",
            show(&errors(&d))
        );
    }
    let d = with(|d| proc0(d)["env"] = json!([{"name": "A", "value": "${HOME}"}]));
    assert_error(&d, &p0(".env[0].value"), "unknown variable `${HOME}`");
    let d = with(|d| proc0(d)["uris"] = json!([{"value": "/g.tgz", "outputDir": "${workPath}/${HOME}"}]));
    assert_error(&d, &p0(".uris[0].outputDir"), "unknown variable `${HOME}`");
    let d = check(json!({"type": "COMMAND", "command": {"value": "./c.sh ${HOME}"}}));
    assert_error(&d, &p0(".healthChecks[0].command.value"), "unknown variable `${HOME}`");
}

#[test]
fn variables_are_case_sensitive() {
    let d = with(|d| proc0(d)["env"] = json!([{"name": "A", "value": "${workpath}"}]));
    assert_error(&d, &p0(".env[0].value"), "did you mean `${workPath}`?");
}

#[test]
fn double_dollar_is_a_literal_and_bare_dollar_is_left_alone() {
    assert_valid(&with(|d| proc0(d)["startCmd"] = json!("echo $${HOME} $HOME $(date) $")));
}

#[test]
fn an_unterminated_variable_is_an_error() {
    let d = with(|d| proc0(d)["restartCmd"] = json!("./restart.sh ${ports.http_port"));
    assert_error(&d, &p0(".restartCmd"), "unterminated `${`");
}

#[test]
fn a_port_variable_must_name_a_port() {
    let d = with(|d| proc0(d)["startCmd"] = json!("./start.sh --port ${ports.http-service}"));
    assert_error(
        &d,
        &p0(".startCmd"),
        "`${ports.http-service}` names no port of this spec (ports: http_port, metric_port)",
    );
    let d = with(|d| proc0(d)["startCmd"] = json!("./start.sh --port ${ports.}"));
    assert_error(&d, &p0(".startCmd"), "`${ports.}` names no port");
}

#[test]
fn pid_file_variable_needs_a_pid_file() {
    let d = with(|d| proc0(d)["stopCmd"] = json!("kill $(cat ${pidFile})"));
    assert_error(&d, &p0(".stopCmd"), "`${pidFile}` is used but pidFile is not set");
    let d = with(|d| {
        proc0(d)["stopCmd"] = json!("kill $(cat ${pidFile})");
        proc0(d)["pidFile"] = json!("gamesvr.pid");
    });
    assert_valid(&d);
}

#[test]
fn a_path_cannot_be_defined_by_itself() {
    let d = with(|d| proc0(d)["workPath"] = json!("${work_base_dir}/${workPath}"));
    assert_error(&d, &p0(".workPath"), "`${workPath}` cannot be used here (it is defined by this field)");
    let d = with(|d| {
        proc0(d)["workPath"] = json!("${work_base_dir}/${pidFile}");
        proc0(d)["pidFile"] = json!("x.pid");
    });
    assert_error(&d, &p0(".workPath"), "`${pidFile}` cannot be used here");
    let d = with(|d| proc0(d)["pidFile"] = json!("${pidFile}.new"));
    assert_error(&d, &p0(".pidFile"), "`${pidFile}` cannot be used here");
    assert_valid(&with(|d| proc0(d)["pidFile"] = json!("${workPath}/x.pid")));
}

#[test]

fn variables_in_paths_and_uris_are_rendered_not_literal() {
    // `${...}` in a file item's keyOrPath and dataKeyAlias and in uris[].value is rendered like
    // in the other templated fields, never used literally.
    let ports = BTreeMap::from([("metric_port".to_string(), 31001)]);
    let d = secret(json!([{"type": "file", "dataKey": "k", "keyOrPath": "${workPath}/conf/k.pem"}]));
    let r = render(&d, 1, &ports).unwrap();
    let target = &r.processes[0].injections[0].target;
    let want = std::path::PathBuf::from("/var/lib/steward/work/ns-a.gamesvc.1/conf/k.pem");
    assert_eq!(*target, spec::render::InjectionTarget::File { path: want, mode: 0o600, owner: "root".into() });
    let d = uri(json!({"value": "/game/${namespace}/gamesvc.tar.gz"}));
    assert_eq!(render(&d, 0, &ports).unwrap().processes[0].uris[0].value, "/game/ns-a/gamesvc.tar.gz");
    // An unknown variable there is an error, as anywhere.
    let d = uri(json!({"value": "/game/${nspace}/gamesvc.tar.gz"}));
    assert_error(&d, &p0(".uris[0].value"), "unknown variable `${nspace}`");
}

// ---------------------------------------------------------------------------------------------
// Unknown fields and wrong types

#[test]
fn unknown_fields_are_errors_with_a_suggestion() {
    let d = with(|d| {
        let p = proc0(d);
        let start = p.as_object_mut().unwrap().remove("startCmd").unwrap();
        p["stratCmd"] = start;
        d["metdata2"] = json!(1);
    });
    assert_errors(
        &d,
        &[
            (&p0(".startCmd"), "is required"),
            (&p0(".stratCmd"), "unknown field `stratCmd` (did you mean `startCmd`?)"),
            ("metdata2", "unknown field `metdata2` (did you mean `metadata`?)"),
        ],
    );
}

#[test]
fn unknown_fields_in_list_elements_and_nested_objects() {
    let d = with(|d| {
        proc0(d)["ports"][0]["hostport"] = json!(1);
        d["restartPolicy"] = json!({"maxTimes": 3});
    });
    assert_errors(
        &d,
        &[
            (&p0(".ports[0].hostport"), "unknown field `hostport` (did you mean `hostPort`?)"),
            ("restartPolicy.maxTimes", "(did you mean `maxtimes`?)"),
        ],
    );
}

#[test]
fn an_unknown_field_without_a_near_name_lists_the_known_ones() {
    let d = with(|d| d["zzzzzz"] = json!(1));
    assert_error(&d, "zzzzzz", "unknown field `zzzzzz` (known fields: apiVersion, kind, restartPolicy, killPolicy, metadata, spec, constraint, strategy, job, cronJob, daemonSet, statefulSet, dependencies, schedule, services, disconnect)");
}

#[test]
fn wrong_types_are_reported_with_their_path() {
    let d = with(|d| {
        d["restartPolicy"] = json!({"policy": 1, "interval": "5", "maxtimes": 2.5});
        d["killPolicy"] = json!({"gracePeriod": "10"});
        d["metadata"]["labels"] = json!({"app": 5});
        let p = proc0(d);
        p["startGracePeriod"] = json!(true);
        p["env"] = json!({"name": "A"});
        p["secrets"] = json!([{"secretName": "s", "items": [{"type": "env", "dataKey": "k", "keyOrPath": "K", "readOnly": "no"}]}]);
    });
    // restartPolicy and killPolicy are new keys, so they come last in the document.
    assert_errors(
        &d,
        &[
            ("metadata.labels.app", "expected a string, found the number 5"),
            (&p0(".startGracePeriod"), "expected a non-negative integer, found the boolean true"),
            (&p0(".env"), "expected a list, found an object"),
            (&p0(".secrets[0].items[0].readOnly"), "expected true or false, found the string \"no\""),
            ("restartPolicy.policy", "expected one of Never, Always, OnFailure, found the number 1"),
            ("restartPolicy.interval", "expected a non-negative integer, found the string \"5\""),
            ("restartPolicy.maxtimes", "expected a non-negative integer, found the number 2.5"),
            ("killPolicy.gracePeriod", "expected a non-negative integer, found the string \"10\""),
        ],
    );
}

#[test]
fn a_non_object_document_is_a_type_error() {
    let e = spec::parse("[1, 2]", Format::Json, &roots()).unwrap_err().0;
    assert_eq!(e[0].path, "");
    assert!(e[0].message.contains("expected an object, found a list"), "{}", show(&e));
}

#[test]
fn integral_floats_are_integers() {
    let s = assert_valid(&with(|d| {
        d["spec"]["instance"] = json!(3.0);
        d["restartPolicy"] = json!({"interval": 5.0});
    }));
    assert_eq!(s.spec.instance, 3);
    assert_eq!(s.restart_policy.interval, 5);
}

#[test]

fn a_wrong_type_is_reported_once() {
    assert_error(&with(|d| d["spec"]["instance"] = json!("3")), "spec.instance", "expected a non-negative integer");
    assert_error(&with(|d| proc0(d)["user"] = json!(5)), &p0(".user"), "expected a string");
    assert_error(&with(|d| proc0(d)["startCmd"] = json!(["./start.sh"])), &p0(".startCmd"), "expected a string");
    let c = check(json!({"type": "TCP", "intervalSeconds": "10", "tcp": {"portName": "http_port"}}));
    assert_error(&c, &p0(".healthChecks[0].intervalSeconds"), "expected a non-negative integer");
}

#[test]

fn an_unknown_enum_value_is_reported_once() {
    let c = check(json!({"type": "TCP_CHECK", "tcp": {"portName": "http_port"}}));
    assert_error(&c, &p0(".healthChecks[0].type"), "must be one of");
    let d = secret(json!([{"type": "files", "dataKey": "k", "keyOrPath": "tls/cert.pem"}]));
    assert_error(&d, &p0(".secrets[0].items[0].type"), "must be one of env, file");
}

#[test]
fn json_syntax_errors_name_line_and_column() {
    let e = spec::parse("{\n  \"kind\" \"process\"\n}", Format::Json, &roots()).unwrap_err().0;
    assert_eq!(e.len(), 1);
    assert_eq!(e[0].path, "");
    assert!(e[0].message.starts_with("JSON syntax error at line 2 column 10"), "{}", e[0].message);
}

#[test]
fn toml_syntax_errors_name_the_line() {
    let e = spec::parse("apiVersion = \"v4\"\nkind = process\n", Format::Toml, &roots()).unwrap_err().0;
    assert_eq!(e.len(), 1);
    assert_eq!(e[0].path, "");
    assert!(e[0].message.starts_with("TOML syntax error"), "{}", e[0].message);
    assert!(e[0].message.contains("line 2"), "{}", e[0].message);
}

#[test]

fn toml_syntax_errors_are_one_line() {
    let e = spec::parse("apiVersion = \"v4\"\nkind = process\n", Format::Toml, &roots()).unwrap_err().0;
    assert!(!e[0].message.contains('\n'), "{:?}", e[0].message);
}

#[test]
fn toml_is_read_like_json() {
    let toml = r#"
apiVersion = "v4"
kind = "process"
[metadata]
name = "gamesvc"
[[spec.template.spec.processes]]
procName = "gamesvr"
workPath = "${work_base_dir}/${namespace}.${processname}.${instanceid}"
startCmd = "./start.sh"
ports = [{ hostPort = 70000, name = "http_port" }]
"#;
    let e = spec::parse(toml, Format::Toml, &roots()).unwrap_err().0;
    assert_eq!(e.len(), 1, "{}", show(&e));
    assert_eq!(e[0].path, p0(".ports[0].hostPort"));
    assert!(e[0].message.contains("70000 is out of range"));
}

#[test]

fn toml_errors_come_in_document_order() {
    let toml = r#"
apiVersion = "v4"
kind = "process"
[metadata]
name = "gamesvc"
[[spec.template.spec.processes]]
procName = "gamesvr"
workPath = "${work_base_dir}/${namespace}.${processname}.${instanceid}"
pidFile = "/tmp/gamesvc.pid"
startCmd = "./start.sh"
env = [{ name = "bad-name", value = "x" }]
"#;
    let e = spec::parse(toml, Format::Toml, &roots()).unwrap_err().0;
    let paths: Vec<&str> = e.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, [p0(".pidFile"), p0(".env[0].name")]);
}

#[test]
fn json_errors_come_in_document_order_and_all_at_once() {
    // Mistakes made bottom-up; reported top-down, as the fields appear in the file.
    let d = with(|d| {
        constrain(d, json!({"name": "idc", "operate": "MAXPER", "type": 3, "text": {"value": "0"}}));
        proc0(d)["startCmd"] = json!("./start.sh ${hospip}");
        proc0(d)["ports"][1]["hostPort"] = json!(-1);
        proc0(d)["workPath"] = json!("/opt/gamesvc");
        d["metadata"]["name"] = json!("1app");
    });
    let paths: Vec<String> = errors(&d).into_iter().map(|e| e.path).collect();
    assert_eq!(
        paths,
        ["metadata.name".to_string(), p0(".workPath"), p0(".ports[1].hostPort"), p0(".startCmd"), u0(".text.value")]
    );
}

// ---------------------------------------------------------------------------------------------
// Paths

#[test]
fn work_path_lies_inside_the_roots() {
    let cases = [
        ("/opt/gamesvc", "\"/opt/gamesvc\" is outside the allowed directories; it must lie below /var/lib/steward/work or /var/lib/steward/run"),
        ("${work_base_dir}/../etc", "contains '..'"),
        ("${work_base_dir}/a/../../etc", "contains '..'"),
        ("${namespace}.${processname}", "\"ns-a.gamesvc\" is not an absolute path"),
        ("/var/lib/steward/workshop/x", "is outside the allowed directories"),
    ];
    for (work, needle) in cases {
        assert_error(&with(|d| proc0(d)["workPath"] = json!(work)), &p0(".workPath"), needle);
    }
    assert_valid(&with(|d| {
        proc0(d)["workPath"] = json!("${run_base_dir}/${namespace}.${processname}.${instanceid}/work")
    }));
    assert_valid(&with(|d| proc0(d)["workPath"] = json!("/var/lib/steward/work/./gamesvc/${instanceid}")));
}

#[test]
fn work_path_must_be_below_a_root_not_the_root_itself() {
    let d = with(|d| proc0(d)["workPath"] = json!("${work_base_dir}"));
    assert_error(&d, &p0(".workPath"), "\"/var/lib/steward/work\"");
}

#[test]

fn work_path_equal_to_a_root_is_not_called_outside() {
    let d = with(|d| proc0(d)["workPath"] = json!("${work_base_dir}"));
    let e = errors(&d);
    assert!(!e[0].message.contains("is outside"), "{}", show(&e));
}

#[test]
fn pid_file_lies_inside_the_roots_relative_to_work_path() {
    assert_valid(&with(|d| proc0(d)["pidFile"] = json!("run/gamesvr.pid")));
    assert_valid(&with(|d| {
        proc0(d)["pidFile"] = json!("${run_base_dir}/${namespace}.${processname}.${instanceid}/gamesvr.pid")
    }));
    assert_error(
        &with(|d| proc0(d)["pidFile"] = json!("/tmp/gamesvr.pid")),
        &p0(".pidFile"),
        "\"/tmp/gamesvr.pid\" is outside the allowed directories",
    );
    assert_error(&with(|d| proc0(d)["pidFile"] = json!("../../../../gamesvr.pid")), &p0(".pidFile"), "contains '..'");
}

#[test]
fn output_dir_lies_inside_the_roots_relative_to_work_path() {
    assert_valid(&uri(json!({"value": "/g.tgz", "outputDir": "pkg"})));
    assert_valid(&uri(
        json!({"value": "/g.tgz", "outputDir": "${work_base_dir}/${namespace}.${processname}.${instanceid}"}),
    ));
    assert_error(
        &uri(json!({"value": "/g.tgz", "outputDir": "/tmp/pkg"})),
        &p0(".uris[0].outputDir"),
        "\"/tmp/pkg\" is outside the allowed directories",
    );
    assert_error(
        &uri(json!({"value": "/g.tgz", "outputDir": "../x"})),
        &p0(".uris[0].outputDir"),
        "\"../x\" contains '..'",
    );
}

#[test]
fn secret_files_lie_inside_the_instance_work_path_or_run_dir() {
    assert_valid(&secret(json!([{"type": "file", "dataKey": "k", "keyOrPath": "tls/k.pem"}])));
    let outside = secret(json!([{"type": "file", "dataKey": "k", "keyOrPath": "/data/container/path/filename.conf"}]));
    assert_error(
        &outside,
        &p0(".secrets[0].items[0].keyOrPath"),
        "\"/data/container/path/filename.conf\" is outside the allowed directories; it must lie below the instance's /var/lib/steward/work/ns-a.gamesvc.0 or /var/lib/steward/run/ns-a.gamesvc.0",
    );
    let escape = secret(json!([{"type": "file", "dataKey": "k", "keyOrPath": "../k.pem"}]));
    assert_error(&escape, &p0(".secrets[0].items[0].keyOrPath"), "contains '..'");
}

#[test]
fn secret_files_in_the_run_dir_are_allowed() {
    let d = with(|d| {
        d["spec"]["instance"] = json!(1);
        proc0(d)["secrets"] = json!([{"secretName": "s", "items": [{"type": "file", "dataKey": "k", "keyOrPath": "/var/lib/steward/run/ns-a.gamesvc.0/k.pem"}]}]);
    });
    assert_valid(&d);
}

#[test]
fn a_file_pinned_to_another_instance_is_refused() {
    // Fine for instance 0, outside instance 1's directories: every instance is checked.
    let d = secret(json!([{"type": "file", "dataKey": "k", "keyOrPath": "/var/lib/steward/run/ns-a.gamesvc.0/k.pem"}]));
    assert_error(
        &d,
        &p0(".secrets[0].items[0].keyOrPath"),
        "below the instance's /var/lib/steward/work/ns-a.gamesvc.1 or /var/lib/steward/run/ns-a.gamesvc.1",
    );
}

#[test]
fn configmap_files_lie_inside_the_instance_too() {
    let d = with(|d| {
        proc0(d)["configmaps"] =
            json!([{"name": "c", "items": [{"type": "file", "dataKey": "k", "KeyOrPath": "/etc/game.conf"}]}])
    });
    assert_error(&d, &p0(".configmaps[0].items[0].keyOrPath"), "\"/etc/game.conf\" is outside the allowed directories");
}

#[test]

fn an_escaping_data_key_alias_is_reported_at_data_key_alias() {
    let d = with(
        |d| proc0(d)["configmaps"] = json!([{"name": "c", "items": [{"type": "file", "dataKey": "k", "dataKeyAlias": "../../x", "keyOrPath": "conf"}]}]),
    );
    assert_error(&d, &p0(".configmaps[0].items[0].dataKeyAlias"), "'..'");
}

#[test]

fn path_errors_are_all_reported_at_once() {
    let d = with(|d| {
        proc0(d)["workPath"] = json!("/opt/gamesvc");
        proc0(d)["pidFile"] = json!("/tmp/gamesvc.pid");
    });
    assert_errors(&d, &[(&p0(".workPath"), "outside"), (&p0(".pidFile"), "outside")]);
    let d = with(|d| {
        d["spec"]["instance"] = json!(0);
        proc0(d)["pidFile"] = json!("/tmp/gamesvc.pid");
    });
    assert_errors(&d, &[(&p0(".pidFile"), "outside")]);
}

#[test]
fn roots_come_from_the_configuration() {
    let custom = Roots {
        work_base_dir: "/srv/work".into(),
        run_base_dir: "/srv/run".into(),
        volume_root: "/srv/volumes".into(),
    };
    assert!(parse_with(&base(), &custom).is_ok(), "${{work_base_dir}} follows the roots");
    let fixed = with(|d| proc0(d)["workPath"] = json!("/var/lib/steward/work/gamesvc"));
    let e = parse_with(&fixed, &custom).unwrap_err();
    assert_eq!(e[0].path, p0(".workPath"));
    assert!(e[0].message.contains("it must lie below /srv/work or /srv/run"), "{}", show(&e));
}

// ---------------------------------------------------------------------------------------------
// Defaults

#[test]
fn defaults_are_applied_when_absent() {
    let d = with(|d| {
        remove(&mut d["metadata"], "namespace");
        proc0(d)["uris"] = json!([{"value": "/g.tgz"}]);
        proc0(d)["healthChecks"] = json!([{"type": "TCP", "tcp": {"portName": "http_port"}}, {"type": "REMOTE_HTTP", "http": {"portName": "http_port"}}]);
    });
    let s = assert_valid(&d);
    assert_eq!(s.kill_policy.grace_period, 1);
    assert_eq!(
        s.restart_policy,
        RestartPolicy { policy: RestartPolicyKind::OnFailure, interval: 0, backoff: 0, maxtimes: 0 }
    );
    assert_eq!(s.metadata.namespace, "defaultGroup");
    let p = &s.spec.template.spec.processes[0];
    assert_eq!(p.start_grace_period, 1);
    assert_eq!(p.user, "root");
    assert_eq!(p.uris[0].effective_pull_policy(), PullPolicy::IfNotPresent);
    let c = &p.health_checks[0];
    assert_eq!(
        (c.interval_seconds, c.timeout_seconds, c.consecutive_failures, c.grace_period_seconds, c.delay_seconds),
        (60, 20, 3, 300, 0)
    );
    let h = p.health_checks[1].http.as_ref().unwrap();
    assert_eq!((h.scheme, h.path.as_str()), (Scheme::Http, "/"));
}

// ---------------------------------------------------------------------------------------------
// Rendering

fn allocated() -> BTreeMap<String, u16> {
    BTreeMap::from([("metric_port".to_string(), 31005)])
}

fn render(doc: &Value, index: u32, ports: &BTreeMap<String, u16>) -> Result<spec::RenderedInstance, Vec<SpecError>> {
    let r = roots();
    let parsed = parse_with(doc, &r).unwrap_or_else(|e| panic!("spec invalid:{}", show(&e)));
    let ctx = RenderContext { roots: &r, host_ip: "10.0.0.9".into(), allocated_ports: ports };
    spec::render(&parsed, index, &ctx).map_err(|e| e.0)
}

#[test]
fn every_variable_is_substituted_in_every_templated_field() {
    let r = render(&all_vars_everywhere(), 1, &allocated()).unwrap();
    let p = &r.processes[0];
    let work = "/var/lib/steward/work/ns-a.gamesvc.1/10.0.0.9-8899-31005";
    let pid = "/var/lib/steward/run/ns-a.gamesvc.1/gamesvc.pid";
    assert_eq!(p.work_path, PathBuf::from(work));
    assert_eq!(p.pid_file.as_deref(), Some(Path::new(pid)));
    let all = format!(
        "ns=ns-a name=gamesvc id=1 ip=10.0.0.9 fixed=8899 random=31005 wb=/var/lib/steward/work rb=/var/lib/steward/run wp={work} pf={pid}"
    );
    assert_eq!(p.start_cmd, format!("./startCmd {all}"));
    assert_eq!(p.stop_cmd.as_deref(), Some(format!("./stopCmd {all}").as_str()));
    assert_eq!(p.restart_cmd.as_deref(), Some(format!("./restartCmd {all}").as_str()));
    assert_eq!(p.reload_cmd.as_deref(), Some(format!("./reloadCmd {all}").as_str()));
    // Every port comes first as PORT_<name> (seed 001), then the spec's own env.
    let env: Vec<(&str, &str)> = p.env.iter().map(|e| (e.name.as_str(), e.value.as_str())).collect();
    assert_eq!(env[..2], [("PORT_http_port", "8899"), ("PORT_metric_port", "31005")]);
    assert_eq!(p.env[2].value, all);
    assert_eq!(p.uris[0].output_dir, PathBuf::from(format!("{work}/pkg-31005")));
    assert_eq!(p.health_checks[0].probe, Probe::Command { command: format!("./check.sh {all}") });
}

#[test]
fn instances_differ_by_instance_id() {
    let d = base();
    let zero = render(&d, 0, &allocated()).unwrap();
    let one = render(&d, 1, &allocated()).unwrap();
    assert_eq!(zero.processes[0].work_path, PathBuf::from("/var/lib/steward/work/ns-a.gamesvc.0"));
    assert_eq!(one.processes[0].work_path, PathBuf::from("/var/lib/steward/work/ns-a.gamesvc.1"));
    assert_eq!(one.run_dir, PathBuf::from("/var/lib/steward/run/ns-a.gamesvc.1"));
    assert_eq!(one.id.to_string(), "ns-a/gamesvc/1");
}

#[test]
fn relative_pid_file_and_output_dir_resolve_against_work_path() {
    let d = with(|d| {
        proc0(d)["pidFile"] = json!("run/./gamesvr.pid");
        proc0(d)["uris"] = json!([{"value": "/g.tgz", "outputDir": "pkg"}, {"value": "/h.tgz"}]);
    });
    let r = render(&d, 0, &allocated()).unwrap();
    let p = &r.processes[0];
    assert_eq!(p.pid_file.as_deref(), Some(Path::new("/var/lib/steward/work/ns-a.gamesvc.0/run/gamesvr.pid")));
    assert_eq!(p.uris[0].output_dir, PathBuf::from("/var/lib/steward/work/ns-a.gamesvc.0/pkg"));
    assert_eq!(p.uris[1].output_dir, p.work_path, "outputDir defaults to workPath");
}

#[test]
fn pid_file_variable_renders_the_resolved_pid_file() {
    let d = with(|d| {
        proc0(d)["pidFile"] = json!("gamesvr.pid");
        proc0(d)["stopCmd"] = json!("kill $(cat ${pidFile})");
    });
    let r = render(&d, 0, &allocated()).unwrap();
    assert_eq!(
        r.processes[0].stop_cmd.as_deref(),
        Some("kill $(cat /var/lib/steward/work/ns-a.gamesvc.0/gamesvr.pid)")
    );
}

#[test]
fn a_random_port_without_an_allocation_is_an_error_naming_it() {
    let e = render(&base(), 0, &BTreeMap::new()).unwrap_err();
    assert_eq!(e.len(), 1);
    assert_eq!(e[0].path, p0(".ports[1].hostPort"));
    assert!(
        e[0].message.contains("port \"metric_port\" is random (hostPort 0) and no port was allocated for it"),
        "{}",
        e[0].message
    );
}

#[test]
fn ports_render_fixed_and_allocated() {
    let r = render(&base(), 0, &allocated()).unwrap();
    let ports: Vec<(&str, u16, bool)> =
        r.processes[0].ports.iter().map(|p| (p.name.as_str(), p.host_port, p.random)).collect();
    assert_eq!(ports, [("http_port", 8899, false), ("metric_port", 31005, true)]);
    assert_eq!(r.processes[0].start_cmd, "./start.sh --port 8899");
}

#[test]
fn check_ports_resolve_from_port_name_unless_fixed() {
    let d = checks(json!([
        {"type": "TCP", "tcp": {"portName": "metric_port"}},
        {"type": "REMOTE_HTTP", "http": {"port": 8080, "portName": "metric_port", "path": "/x"}}
    ]));
    let r = render(&d, 0, &allocated()).unwrap();
    let probes: Vec<&Probe> = r.processes[0].health_checks.iter().map(|c| &c.probe).collect();
    assert_eq!(probes[0], &Probe::Tcp { port: 31005 });
    assert!(matches!(probes[1], Probe::Http { port: 8080, path, .. } if path == "/x"), "{probes:?}");
}

#[test]
fn double_dollar_renders_as_a_literal() {
    let d = with(|d| proc0(d)["startCmd"] = json!("echo $${HOME} $HOME ${instanceid}"));
    let r = render(&d, 1, &allocated()).unwrap();
    assert_eq!(r.processes[0].start_cmd, "echo ${HOME} $HOME 1");
}

#[test]
fn the_password_never_shows_in_render_output() {
    let d = uri(json!({"value": "https://repo.example.com/g.tgz", "user": "deploy", "pwd": "hunter2"}));
    let r = render(&d, 0, &allocated()).unwrap();
    let json = serde_json::to_string(&r).unwrap();
    assert!(!json.contains("hunter2"), "{json}");
    assert!(json.contains("\"password\":\"***\""), "{json}");
    assert!(!format!("{r:?}").contains("hunter2"));
    assert_eq!(r.processes[0].uris[0].password.as_ref().map(|p| p.0.as_str()), Some("hunter2"), "kept for the fetcher");
}

#[test]
fn render_applies_defaults() {
    let r = render(&uri(json!({"value": "/g.tgz"})), 0, &allocated()).unwrap();
    assert_eq!(r.kill_grace_period_secs, 1);
    assert_eq!(r.restart_policy.policy, RestartPolicyKind::OnFailure);
    assert_eq!((r.restart_policy.interval, r.restart_policy.backoff, r.restart_policy.maxtimes), (0, 0, 0));
    let p = &r.processes[0];
    assert_eq!(p.start_grace_period_secs, 1);
    assert_eq!(p.uris[0].pull_policy, PullPolicy::IfNotPresent);
    assert_eq!(
        (p.stop_cmd.as_deref(), p.restart_cmd.as_deref(), p.reload_cmd.as_deref(), p.pid_file.as_deref()),
        (None, None, None, None)
    );
    assert_eq!((p.limits.cpu_cores, p.limits.memory_mb), (None, None));
    let r = render(&with(|d| remove(&mut d["metadata"], "namespace")), 0, &allocated()).unwrap();
    assert_eq!(r.id.namespace, "defaultGroup");
    assert_eq!(r.processes[0].work_path, PathBuf::from("/var/lib/steward/work/defaultGroup.gamesvc.0"));
}

#[test]
fn render_resolves_limits() {
    let r = render(&limits(json!("1.5"), json!(-1)), 0, &allocated()).unwrap();
    assert_eq!((r.processes[0].limits.cpu_cores, r.processes[0].limits.memory_mb), (Some(1.5), None));
}

#[test]
fn render_injects_secret_and_configmap_items() {
    let d = with(|d| {
        proc0(d)["secrets"] = json!([{"secretName": "s", "items": [
            {"type": "env", "dataKey": "token", "keyOrPath": "TOKEN"},
            {"type": "file", "dataKey": "key", "keyOrPath": "tls/key.pem", "readOnly": true, "user": "user"},
            {"type": "file", "dataKey": "crt", "keyOrPath": "tls/crt.pem"}
        ]}]);
        proc0(d)["configmaps"] = json!([{"name": "c", "items": [
            {"type": "file", "dataKey": "conf_one", "dataKeyAlias": "conf-one.ini", "KeyOrPath": "conf/"},
            {"type": "file", "dataKey": "two", "keyOrPath": "conf/two.ini", "readOnly": true}
        ]}]);
    });
    let r = render(&d, 0, &allocated()).unwrap();
    let inj = &r.processes[0].injections;
    let work = "/var/lib/steward/work/ns-a.gamesvc.0";
    assert_eq!(inj[0].source, InjectionSource::Secret);
    assert_eq!(inj[0].target, InjectionTarget::Env { name: "TOKEN".into() });
    let file = |path: &str, mode: u32, owner: &str| InjectionTarget::File {
        path: PathBuf::from(path),
        mode,
        owner: owner.into(),
    };
    assert_eq!(inj[1].target, file(&format!("{work}/tls/key.pem"), 0o400, "user"));
    assert_eq!(inj[2].target, file(&format!("{work}/tls/crt.pem"), 0o600, "root"));
    assert_eq!(inj[3].source, InjectionSource::ConfigMap);
    assert_eq!(inj[3].target, file(&format!("{work}/conf/conf-one.ini"), 0o644, "root"));
    assert_eq!(inj[4].target, file(&format!("{work}/conf/two.ini"), 0o444, "root"));
    assert_eq!((inj[3].store.as_str(), inj[3].data_key.as_str()), ("c", "conf_one"));
}

#[test]
fn render_refuses_an_instance_out_of_range() {
    let e = render(&base(), 2, &allocated()).unwrap_err();
    assert_eq!(e.len(), 1);
    assert_eq!(e[0].path, "spec.instance");
    assert!(e[0].message.contains("instance 2 does not exist"), "{}", e[0].message);
}

// ---------------------------------------------------------------------------------------------
// The corpus's seed twins

#[test]
fn the_toml_twin_of_the_cleaned_seed_is_the_same_spec() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/specs/valid");
    let json = spec::load_file(&dir.join("seed000-cleaned.json"), &roots()).unwrap();
    let toml = spec::load_file(&dir.join("seed000-cleaned.toml"), &roots()).unwrap();
    assert_eq!(json, toml);
}

// ---------------------------------------------------------------------------------------------
// strategy (rollouts: seed 003 Deployment, seed 002 serial)

#[test]
fn strategy_defaults_are_seed_003s_and_counts_or_percentages_are_read() {
    let s = assert_valid(&base());
    assert!(s.strategy.is_empty());
    assert_eq!(s.strategy.budget(10), (0, 1), "seed 003: unavailable 0, surge 1");
    let s = assert_valid(&with(|d| {
        d["spec"]["instance"] = json!(10);
        d["strategy"] = json!({"maxUnavailable": "25%", "maxSurge": "15%", "minReadySeconds": 5, "autoRollback": true});
    }));
    assert_eq!(s.strategy.max_unavailable, Some(CountOrPercent::Percent(25)));
    assert_eq!(s.strategy.budget(10), (2, 2), "unavailable rounds down, surge up");
    assert_eq!((s.strategy.min_ready_seconds, s.strategy.auto_rollback), (5, true));
    let s = assert_valid(&with(|d| d["strategy"] = json!({"type": "serial"})));
    assert_eq!((s.strategy.kind, s.strategy.pause_secs()), (StrategyType::Serial, 10), "seed 002: 10 s");
    // TOML says the same.
    let toml = "apiVersion = \"v4\"\nkind = \"process\"\n[metadata]\nname = \"t\"\n[strategy]\nmaxUnavailable = 2\nmaxSurge = \"50%\"\n\
                [[spec.template.spec.processes]]\nprocName = \"p\"\nstartCmd = \"exec sleep 1\"\nworkPath = \"${work_base_dir}/t\"\n";
    let s = spec::parse(toml, Format::Toml, &roots()).unwrap();
    assert_eq!(
        (s.strategy.max_unavailable, s.strategy.max_surge),
        (Some(CountOrPercent::Count(2)), Some(CountOrPercent::Percent(50)))
    );
}

#[test]
fn strategy_mistakes_are_named() {
    assert_error(
        &with(|d| d["strategy"] = json!({"maxUnavailable": "a quarter"})),
        "strategy.maxUnavailable",
        "expected a count or a percentage such as \"25%\", found \"a quarter\"",
    );
    assert_error(&with(|d| d["strategy"] = json!({"maxSurge": "150%"})), "strategy.maxSurge", "at most 100%");
    assert_error(
        &with(|d| d["strategy"] = json!({"maxUnavailable": 0, "maxSurge": 0})),
        "strategy",
        "maxUnavailable and maxSurge are both 0",
    );
    // 10% of 3 instances is 0 unavailable, and no surge: it could never move.
    assert_error(
        &with(|d| {
            d["spec"]["instance"] = json!(3);
            d["strategy"] = json!({"maxUnavailable": "10%", "maxSurge": 0});
        }),
        "strategy",
        "both 0 for 3 instance(s)",
    );
    assert_errors(
        &with(|d| d["strategy"] = json!({"type": "serial", "maxSurge": 2})),
        &[("strategy.maxSurge", "a serial update moves one instance at a time")],
    );
    assert_error(&with(|d| d["strategy"] = json!({"pauseSeconds": 5})), "strategy.pauseSeconds", "`type: serial` only");
    assert_error(
        &with(|d| d["strategy"] = json!({"minReadySeconds": 700})),
        "strategy.progressDeadlineSeconds",
        "must be more than minReadySeconds (700)",
    );
    assert_error(&with(|d| d["strategy"] = json!({"type": "canary"})), "strategy.type", "canary");
}

#[test]
fn rollout_steps_read_and_their_mistakes_are_named() {
    let s = assert_valid(&with(|d| {
        d["spec"]["instance"] = json!(4);
        d["strategy"] = json!({"steps": [{"partition": 1},
                                         {"hook": {"template": "check", "args": [{"name": "port", "value": "${ports.http}"}]}},
                                         {"pause": 60}, {"pause": {}}, {"partition": "50%"}],
                               "preHook": {"template": "pre"}, "postHook": {"template": "post"}});
    }));
    let gates = s.strategy.gates(4);
    assert_eq!(gates.len(), 8, "{gates:?}");
    assert_eq!(gates[0], Gate::Hook(HookStep { template: "pre".into(), args: vec![] }));
    assert_eq!(
        (&gates[1], &gates[3], &gates[4], &gates[5], &gates[6]),
        (&Gate::Partition(1), &Gate::Pause(Some(60)), &Gate::Pause(None), &Gate::Partition(2), &Gate::Partition(4))
    );
    assert_eq!(
        s.strategy.hooks().iter().map(|(p, _)| p.as_str()).collect::<Vec<_>>(),
        ["preHook", "steps[1].hook", "postHook"]
    );
    assert_errors(
        &with(|d| {
            d["spec"]["instance"] = json!(4);
            d["strategy"] = json!({"steps": [{"partition": 3, "pause": 1}, {}, {"partition": 2},
                                             {"hook": {"template": "a b", "args": [{"name": "x"}, {"name": "x"}]}},
                                             {"partition": "200%"}]});
        }),
        &[
            ("strategy.steps[0]", "needs exactly one of partition, hook and pause"),
            ("strategy.steps[1]", "needs exactly one of partition, hook and pause"),
            ("strategy.steps[2].partition", "fewer than an earlier step's 3"),
            ("strategy.steps[3].hook.template", "must be 1-253 letters"),
            ("strategy.steps[3].hook.args[1].name", "\"x\" is given twice"),
            ("strategy.steps[4].partition", "at most 100%"),
        ],
    );
}

#[test]
fn dependencies_read_with_node_scope_by_default_and_their_mistakes_are_named() {
    let s = assert_valid(&with(|d| {
        d["dependencies"] = json!([{"name": "infra/cache"}, {"name": "logship", "scope": "namespace"}])
    }));
    use steward::spec::model::DependencyScope;
    assert_eq!(s.dependencies[0].scope, DependencyScope::Node);
    assert_eq!(s.dependencies[0].key(&s.metadata.namespace), "infra/cache");
    assert_eq!(s.dependencies[1].key(&s.metadata.namespace), format!("{}/logship", s.metadata.namespace));
    let own = {
        let d = base();
        format!(
            "{}/{}",
            d["metadata"]["namespace"].as_str().unwrap_or("default"),
            d["metadata"]["name"].as_str().unwrap()
        )
    };
    assert_errors(
        &with(|d| {
            d["dependencies"] = json!([
                {"name": ""},
                {"name": "a/b/c"},
                {"name": "Cache"},
                {"name": own},
                {"name": "infra/cache"},
                {"name": "infra/cache", "scope": "namespace"},
                {"name": "x", "scope": "cluster"}
            ])
        }),
        &[
            ("dependencies[0].name", "is required"),
            ("dependencies[1].name", "expected name or namespace/name"),
            ("dependencies[2].name", "lowercase"),
            ("dependencies[3].name", "cannot depend on itself"),
            ("dependencies[5].name", "infra/cache is named twice"),
            ("dependencies[6].scope", "must be one of node, namespace, found \"cluster\""),
        ],
    );
}

#[test]
fn daemon_and_stateful_sets_are_read_and_exclusive() {
    use steward::spec::model::CountOrPercent;
    // A daemon set updates with unavailable 1 and no surge (DESIGN § 7), unless it says so.
    let s = assert_valid(&with(|d| d["daemonSet"] = json!({})));
    assert!(s.daemon_set.is_some());
    assert_eq!(s.strategy.budget(5), (1, 0));
    let s = assert_valid(&with(|d| {
        d["daemonSet"] = json!({});
        d["strategy"] = json!({"maxUnavailable": 2});
    }));
    assert_eq!(s.strategy.budget(5), (2, 0));
    assert_eq!(s.strategy.max_unavailable, Some(CountOrPercent::Count(2)));
    assert!(assert_valid(&with(|d| d["statefulSet"] = json!({}))).stateful_set.is_some());
    assert_error(
        &with(|d| {
            d["daemonSet"] = json!({});
            d["statefulSet"] = json!({});
        }),
        "daemonSet",
        "neither a job, a cron job nor a stateful set",
    );
    assert_error(&with(|d| d["daemonSet"] = json!({"nodes": 3})), "daemonSet.nodes", "unknown field");
}

#[test]
fn schedule_affinity_and_tolerations_are_checked_with_their_paths() {
    // Seed 003's spellings and Kubernetes' both read; a valid block passes.
    let d = with(|d| {
        d["schedule"] = json!({
            "labels": {"tier": "game"},
            "affinity": {
                "node": {"type": "Prefered", "terms": [
                    {"weight": 80, "expressions": [{"key": "zone", "operator": "In", "value": ["a"]}]},
                    {"weight": 20, "expressions": [{"key": "gen", "operator": "Lt", "value": ["3"]},
                                                   {"key": "gpu", "operator": "DoesNotExist"}]}]},
                "pod": {"type": "Required", "terms": [{"topologyKey": "kubernetes.io/hostname",
                    "selector": {"labels": {"role": "db"}}}]}
            },
            "antiaffinity": {"pod": {"type": "Preferred", "terms": [{"weight": 10, "topologyKey": "zone",
                "selector": {"expressions": [{"key": "tier", "operator": "Exists"}]}}]}},
            "tolerations": [{"key": "steward/cordon", "operator": "Exists", "effect": "NoScheduler"},
                            {"operator": "Exists", "effect": "PreferNoSchedule"}]
        });
    });
    assert_valid(&d);
    let d = with(|d| {
        d["schedule"] = json!({
            "scheduler": "other",
            "affinity": {
                "node": {"type": "Prefered", "terms": [
                    {"weight": 0, "expressions": [{"key": "zone", "operator": "In"}]},
                    {"weight": 101, "expressions": [{"key": "gen", "operator": "Gt", "value": ["x"]}]}]},
                "pod": {"terms": [{"weight": 5, "selector": {"expressions": [{"key": "a", "operator": "Lt", "value": ["1"]}]}}]}
            },
            "antiaffinity": {"pod": {"type": "Prefered", "terms": []}},
            "tolerations": [{"operator": "Equal", "value": "x"}, {"key": "k", "operator": "Exists", "value": "v"},
                            {"key": "k", "tolerationSeconds": 5}]
        });
    });
    assert_errors(
        &d,
        &[
            ("schedule.scheduler", "only \"\" (the default scheduler)"),
            ("schedule.affinity.node.terms[0].weight", "0 is out of range 1-100"),
            ("schedule.affinity.node.terms[0].expressions[0].value", "In needs at least one value"),
            ("schedule.affinity.node.terms[1].weight", "101 is out of range 1-100"),
            ("schedule.affinity.node.terms[1].expressions[0].value[0]", "\"x\" is not an integer"),
            ("schedule.affinity.pod.terms[0].weight", "is for type Prefered only"),
            ("schedule.affinity.pod.terms[0].selector.expressions[0].operator", "Lt is for node affinity only"),
            ("schedule.antiaffinity.pod.terms", "needs at least one term"),
            ("schedule.tolerations[0].key", "is required unless operator is Exists"),
            ("schedule.tolerations[1].value", "must be empty with operator Exists"),
            ("schedule.tolerations[2].tolerationSeconds", "is for effect NoExecute only"),
        ],
    );
    let d = with(|d| d["schedule"] = json!({"affinity": {"node": {"type": "Soft", "terms": []}}}));
    let got = errors(&d);
    assert!(got.iter().any(|e| e.path == "schedule.affinity.node.type"), "{got:?}");
}

#[test]
fn env_from_is_checked_with_its_paths() {
    let d = with(|d| {
        d["spec"]["template"]["spec"]["processes"][0]["envFrom"] = json!([{"type": "Secret", "name": "keys", "prefix": "K_", "optional": true}, {"type": "Config", "name": "", "prefix": "1X"}]);
    });
    assert_errors(
        &d,
        &[(&p0(".envFrom[1].name"), "is required"), (&p0(".envFrom[1].prefix"), "\"1X\" must start an env var name")],
    );
    let d = with(|d| d["spec"]["template"]["spec"]["processes"][0]["envFrom"] = json!([{"type": "Map", "name": "x"}]));
    let got = errors(&d);
    assert!(got.iter().any(|e| e.path == p0(".envFrom[0].type")), "{got:?}");
}

/// A pod's seed-003 fields: names as DNS has them, servers as addresses, a working dir that is
/// absolute, an image pull secret's name; a HOST pod keeps the host's name.
#[test]
fn a_pods_name_resolver_and_pulls_are_checked_with_their_paths() {
    let pod = |network: &str, extra: Value| {
        let mut d = json!({"apiVersion": "v4", "kind": "pod", "metadata": {"name": "web", "namespace": "ns"},
            "spec": {"instance": 1, "template": {"spec": {"network": network, "containers": [
                {"name": "main", "image": "busybox", "command": {"value": "sleep"}}]}}}});
        for (k, v) in extra.as_object().unwrap() {
            d["spec"]["template"]["spec"][k] = v.clone();
        }
        d
    };
    let good = json!({"hostname": "game", "subdomain": "zone1.example", "imagePullSecrets": ["regcred"],
        "dnsConfig": {"servers": ["10.0.0.2", "::1"], "searches": ["svc.example"], "options": ["ndots:2"]},
        "host": {"pid": true, "ipc": true}});
    assert_valid(&pod("BRIDGE", good));
    let mut bad = pod(
        "BRIDGE",
        json!({"hostname": "Game_1", "subdomain": "-x.example", "imagePullSecrets": ["a b"],
            "dnsConfig": {"servers": ["dns.example"], "searches": ["bad..name"], "options": ["a b"]}}),
    );
    bad["spec"]["template"]["spec"]["containers"][0]["workingDir"] = json!("tmp");
    let got = errors(&bad);
    let paths: Vec<&str> = got.iter().map(|e| e.path.as_str()).collect();
    for path in [
        "spec.template.spec.hostname",
        "spec.template.spec.subdomain",
        "spec.template.spec.imagePullSecrets[0]",
        "spec.template.spec.dnsConfig.servers[0]",
        "spec.template.spec.dnsConfig.searches[0]",
        "spec.template.spec.dnsConfig.options[0]",
        "spec.template.spec.containers[0].workingDir",
    ] {
        assert!(paths.contains(&path), "{path} in {got:?}");
    }
    let mut sometimes = pod("BRIDGE", json!({}));
    sometimes["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = json!("Sometimes");
    let got = errors(&sometimes);
    assert!(got.iter().any(|e| e.path == "spec.template.spec.containers[0].imagePullPolicy"), "{got:?}");
    let got = errors(&pod("HOST", json!({"hostname": "game"})));
    assert!(got.iter().any(|e| e.path == "spec.template.spec.hostname" && e.message.contains("HOST pod")), "{got:?}");
    // A process spec has none of them.
    let d = with(|d| d["spec"]["template"]["spec"]["hostname"] = json!("game"));
    assert_error(&d, "spec.template.spec.hostname", "is for kind \"pod\" only");
}

/// Seed 003 pod `dns`: Default (absent), ClusterFirst and ClusterFirstWithHostNet are taken, any
/// other value is refused at its field; ClusterFirst leaves a `dnsConfig` room for 2 servers and
/// 4 search domains (the responder and its two searches come first); a process spec has none.
#[test]
fn a_pods_dns_policy_is_checked_with_its_path() {
    let pod = |network: &str, dns: Value, config: Value| {
        let mut d = json!({"apiVersion": "v4", "kind": "pod", "metadata": {"name": "web", "namespace": "ns"},
            "spec": {"instance": 1, "template": {"spec": {"network": network, "containers": [
                {"name": "main", "image": "busybox", "command": {"value": "sleep"}}]}}}});
        d["spec"]["template"]["spec"]["dns"] = dns;
        if !config.is_null() {
            d["spec"]["template"]["spec"]["dnsConfig"] = config;
        }
        d
    };
    for (network, policy) in [("BRIDGE", "Default"), ("BRIDGE", "ClusterFirst"), ("HOST", "ClusterFirstWithHostNet")] {
        assert_valid(&pod(network, json!(policy), Value::Null));
    }
    // Any letter case, as every enum of a spec; Kubernetes' `None` is no policy of seed 003's.
    assert_valid(&pod("BRIDGE", json!("clusterfirst"), Value::Null));
    for bad in [json!("None"), json!("ClusterOnly"), json!(1)] {
        let got = errors(&pod("BRIDGE", bad.clone(), Value::Null));
        assert!(got.iter().any(|e| e.path == "spec.template.spec.dns"), "{bad}: {got:?}");
    }
    let three = json!({"servers": ["10.0.0.2", "10.0.0.3", "10.0.0.4"]});
    assert_valid(&pod("BRIDGE", json!("Default"), three.clone()));
    // A HOST pod's plain ClusterFirst is Default (Kubernetes' rule): the same room.
    assert_valid(&pod("HOST", json!("ClusterFirst"), three.clone()));
    assert_error(
        &pod("BRIDGE", json!("ClusterFirst"), three),
        "spec.template.spec.dnsConfig.servers",
        "3 servers: a resolver reads at most 3, 2 beside dns ClusterFirst's own",
    );
    let five = json!({"searches": ["a.example", "b.example", "c.example", "d.example", "e.example"]});
    assert_error(
        &pod("HOST", json!("ClusterFirstWithHostNet"), five),
        "spec.template.spec.dnsConfig.searches",
        "5 search domains: a resolver reads at most 6, 4 beside dns ClusterFirstWithHostNet's own",
    );
    let d = with(|d| d["spec"]["template"]["spec"]["dns"] = json!("ClusterFirst"));
    assert_error(&d, "spec.template.spec.dns", "is for kind \"pod\" only");
}

// ---------------------------------------------------------------------------------------------
// services (seed 003, issue 27)

#[test]
fn services_target_real_ports_and_node_ports_stay_in_range() {
    let ok = with(|d| {
        d["services"] = json!([
            {"name": "web", "type": "NodePort", "ports": [{"targetPort": "http_port", "port": 80, "nodePort": 30080}]},
            {"name": "raw", "ports": [{"protocol": "UDP", "targetPort": 8899, "port": 80}]}
        ])
    });
    let spec = assert_valid(&ok);
    assert_eq!(spec.services[0].ports[0].protocol, Protocol::Http, "seed 003's default protocol");
    assert!(spec.services[1].export, "export defaults to true");
    assert_eq!(spec.service_target(&spec.services[1].ports[0]).as_deref(), Some("http_port"), "by its fixed hostPort");
    let bad = with(|d| {
        d["services"] = json!([
            {"name": "web", "ports": [{"targetPort": "nope", "port": 80, "nodePort": 30080}]},
            {"name": "web", "type": "NodePort", "ports": [{"targetPort": 1234, "port": 0, "nodePort": 80}]},
            {"name": "empty", "ports": []}
        ])
    });
    assert_errors(
        &bad,
        &[
            ("services[0].ports[0].targetPort", "\"nope\" names no port of the spec"),
            ("services[0].ports[0].nodePort", "is for type NodePort only"),
            ("services[1].name", "duplicate service name \"web\""),
            ("services[1].ports[0].targetPort", "\"1234\" names no port of the spec"),
            ("services[1].ports[0].port", "0 must be 1-65535"),
            ("services[1].ports[0].nodePort", "80 must be 30000-32767"),
            ("services[2].ports", "needs at least one port"),
        ],
    );
}

#[test]
fn cluster_ips_are_addresses_and_stateful_set_names_are_dns_labels() {
    let ok = with(|d| {
        d["services"] =
            json!([{"name": "front", "clusterIP": "10.254.0.9", "ports": [{"targetPort": "http_port", "port": 80}]}]);
        d["statefulSet"] = json!({"name": "db", "domain": "box"});
    });
    let spec = assert_valid(&ok);
    assert_eq!(spec.services[0].cluster_ip, "10.254.0.9");
    assert_eq!(spec.stateful_set.as_ref().map(|s| (s.name.as_str(), s.domain.as_str())), Some(("db", "box")));
    let bad = with(|d| {
        d["services"] =
            json!([{"name": "box", "clusterIP": "10.254.0", "ports": [{"targetPort": "http_port", "port": 80}]}]);
        d["statefulSet"] = json!({"name": "no spaces", "domain": "box"});
    });
    assert_errors(
        &bad,
        &[
            ("services[0].clusterIP", "\"10.254.0\" is no IPv4 address"),
            ("statefulSet.name", ""),
            ("statefulSet.domain", "\"box\" is also the name of services[0]"),
        ],
    );
}

/// Issue 43: `disconnect` — a stop after at least 5 s; a replacement no sooner than the host's
/// stop plus the kill grace and a margin (so a partition never runs the app twice), which is
/// also its default; an unknown reconcile named.
#[test]
fn disconnect_replaces_only_after_the_host_stopped() {
    let d = |v: Value| with(|d| d["disconnect"] = v);
    assert_errors(&d(json!({"stopAfterSecs": 2})), &[("disconnect.stopAfterSecs", "must be at least 5")]);
    assert_errors(
        &d(json!({"stopAfterSecs": 30, "replaceAfterSecs": 20})),
        &[("disconnect.replaceAfterSecs", "must be at least 36 (stopAfterSecs + killPolicy.gracePeriod + 5)")],
    );
    assert_errors(&d(json!({"reconcile": "keepBoth"})), &[("disconnect.reconcile", "keepBoth")]);
    let s = assert_valid(&d(json!({"stopAfterSecs": 30, "reconcile": "keepOriginal"})));
    let disconnect = s.disconnect.unwrap();
    assert_eq!(disconnect.replace_after(s.kill_policy.grace_period), 36);
    assert_eq!(disconnect.reconcile, DisconnectReconcile::KeepOriginal);
    let s = assert_valid(&d(json!({"replaceAfterSecs": 60})));
    assert_eq!(s.disconnect.unwrap().replace_after(1), 60, "no stop: the replacement waits as asked");
}
