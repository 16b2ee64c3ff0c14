//! The shipped /etc/steward/stewardd.toml (packaging/stewardd.toml) documents every key with its
//! default, commented out. These tests keep that documentation true: as shipped it changes
//! nothing, with every documented key uncommented it still changes nothing (so each value shown
//! is the real default), and no key of `Config` is missing from it.

use std::path::PathBuf;
use steward::config::Config;

fn shipped() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("packaging/stewardd.toml");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `# key = value` (a documented setting) or `# [node...]` (a documented table header); not
/// prose and not indented examples such as `#   gpu = "a100"`.
fn documented_setting(line: &str) -> Option<&str> {
    let rest = line.strip_prefix("# ")?;
    if rest.starts_with("[node") {
        return Some(rest);
    }
    let (key, _value) = rest.split_once(" = ")?;
    // Dotted keys (`remote.rate_burst`) set a table's key; they come before any table header.
    let is_key =
        !key.is_empty() && key.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '.');
    is_key.then_some(rest)
}

fn uncomment_all(text: &str) -> String {
    text.lines().map(|l| documented_setting(l).unwrap_or(l)).collect::<Vec<_>>().join("\n")
}

#[test]
fn shipped_file_is_the_default() {
    assert_eq!(Config::parse(&shipped()).unwrap(), Config::default());
}

#[test]
fn every_documented_value_is_the_real_default() {
    let shipped = shipped();
    let settings = shipped.lines().filter(|l| documented_setting(l).is_some()).count();
    assert!(settings >= 10, "only {settings} documented settings found to uncomment");
    let text = uncomment_all(&shipped);
    let parsed = Config::parse(&text).unwrap_or_else(|e| panic!("{e}\n--- uncommented file ---\n{text}"));
    assert_eq!(parsed, Config::default(), "a documented value differs from the default:\n{text}");
}

/// Every key of `Config` (and of its `node` table) appears in the file: as a documented setting,
/// as an indented example (`#   host_ip = ...`, for keys whose default is "unset"), or as a
/// table header (`# [node.labels]`).
#[test]
fn every_key_is_documented() {
    let text = shipped();
    let mentioned = |key: &str| {
        text.lines().any(|l| {
            let l = l.trim_start_matches('#').trim_start();
            l.starts_with(&format!("{key} = ")) || l == format!("[{key}]")
        })
    };
    let defaults = serde_json::to_value(Config::default()).unwrap();
    let top = defaults.as_object().expect("Config serializes as a table");
    let mut missing = Vec::new();
    for (key, value) in top {
        match value.as_object() {
            Some(table) => {
                assert!(!table.is_empty(), "{key} has no keys");
                for sub in table.keys() {
                    if !mentioned(&format!("{key}.{sub}")) {
                        missing.push(format!("{key}.{sub}"));
                    }
                }
            }
            None => {
                if !mentioned(key) {
                    missing.push(key.clone());
                }
            }
        }
    }
    assert!(missing.is_empty(), "packaging/stewardd.toml does not mention {missing:?}");
}

#[test]
fn the_uncommenting_only_touches_settings() {
    assert_eq!(documented_setting("# log_keep = 3"), Some("log_keep = 3"));
    assert_eq!(documented_setting("# events.retention = 100000"), Some("events.retention = 100000"));
    assert_eq!(documented_setting("#   remote.listen = \"10.0.0.5:7443\""), None);
    assert_eq!(documented_setting("# [node.labels]"), Some("[node.labels]"));
    assert_eq!(documented_setting("#   gpu = \"a100\""), None);
    assert_eq!(documented_setting("# true: every local user may read"), None);
    assert_eq!(documented_setting("# The cgroup under which = x"), None);
}
