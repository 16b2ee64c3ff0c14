//! The example units in units/ are what the README demo runs: they must stay valid, and the
//! JSON and TOML versions of gamesvc must describe the same app.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use steward::config::Config;
use steward::spec::{self, RenderContext};

fn unit(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("units").join(name)
}

#[test]
fn every_unit_validates() {
    let roots = Config::default().roots();
    let mut count = 0;
    for entry in std::fs::read_dir(unit("")).unwrap() {
        let path = entry.unwrap().path();
        if matches!(path.extension().and_then(|e| e.to_str()), Some("json" | "toml" | "yaml" | "yml")) {
            if let Err(e) = spec::load_file(&path, &roots) {
                panic!("{}: {e}", path.display());
            }
            count += 1;
        }
    }
    assert!(count >= 3, "expected the example units, found {count}");
}

#[test]
fn gamesvc_json_and_toml_are_the_same_app() {
    let roots = Config::default().roots();
    let json = spec::load_file(&unit("gamesvc.json"), &roots).unwrap();
    let toml = spec::load_file(&unit("gamesvc.toml"), &roots).unwrap();
    assert_eq!(json, toml);
}

#[test]
fn webpod_json_and_toml_are_the_same_pod() {
    let roots = Config::default().roots();
    let json = spec::load_file(&unit("webpod.json"), &roots).unwrap();
    let toml = spec::load_file(&unit("webpod.toml"), &roots).unwrap();
    assert_eq!(json, toml);
    let ports = BTreeMap::from([("http".to_string(), 31007)]);
    let ctx = RenderContext { roots: &roots, host_ip: "192.0.2.7".into(), allocated_ports: &ports };
    let pod = spec::render(&json, 0, &ctx).unwrap().pod.unwrap();
    assert_eq!(pod.containers.len(), 2);
    let env: BTreeMap<_, _> = pod.containers[0].env.iter().map(|e| (e.name.as_str(), e.value.as_str())).collect();
    assert_eq!(env["POD_ID"], "demo.webpod.0");
    assert_eq!(env["PORT_http"], "31007");
}

#[test]
fn gamesvc_renders_per_instance() {
    let config = Config::default();
    let roots = config.roots();
    let parsed = spec::load_file(&unit("gamesvc.json"), &roots).unwrap();
    let ports = BTreeMap::from([("http_port".to_string(), 31042)]);
    let ctx = RenderContext { roots: &roots, host_ip: "192.0.2.7".into(), allocated_ports: &ports };
    let one = spec::render(&parsed, 1, &ctx).unwrap();
    let p = &one.processes[0];
    assert_eq!(p.work_path, roots.work_base_dir.join("demo.gamesvc.1/gamesvc"));
    assert_eq!(p.pid_file.as_deref(), Some(roots.run_base_dir.join("demo.gamesvc.1/pid/gamesvr.pid").as_path()));
    let pid = roots.run_base_dir.join("demo.gamesvc.1/pid/gamesvr.pid");
    assert_eq!(p.start_cmd, format!("./start.sh --port 31042 --pidfile {}", pid.display()));
    assert_eq!(p.uris[0].output_dir, p.work_path);
    let env: BTreeMap<_, _> = p.env.iter().map(|e| (e.name.as_str(), e.value.as_str())).collect();
    assert_eq!(env["STEWARD_INSTANCE"], "demo/gamesvc/1");
    assert_eq!(env["GAMESVC_HOSTIP"], "192.0.2.7");
    assert_eq!(env["GAMESVC_PORT"], "31042");
    assert!(spec::render(&parsed, 2, &ctx).is_err(), "instance 2 of 2 does not exist");
}

/// The stores units/vault.toml reads, as scripts/demo.sh creates them (`KIND create NS/NAME
/// --from-literal KEY=...`): (kind, namespace/name, key).
fn demo_creates() -> Vec<(String, String, String)> {
    let demo = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/demo.sh")).unwrap();
    demo.lines()
        .filter_map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            let at = words.iter().position(|w| *w == "create")?;
            let kind = words.get(at.checked_sub(1)?)?;
            let key = words.get(at + 3)?.split_once('=')?.0;
            (words.get(at + 2) == Some(&"--from-literal"))
                .then(|| (kind.to_string(), words[at + 1].to_string(), key.into()))
        })
        .collect()
}

#[test]
fn the_demo_creates_the_secret_and_configmap_vault_reads() {
    let roots = Config::default().roots();
    let vault = spec::load_file(&unit("vault.toml"), &roots).unwrap();
    let ns = &vault.metadata.namespace;
    let p = &vault.spec.template.spec.processes[0];
    let mut wanted = Vec::new();
    for s in &p.secrets {
        for item in &s.items {
            wanted.push(("secret".to_string(), format!("{ns}/{}", s.secret_name), item.data_key.clone()));
        }
    }
    for c in &p.configmaps {
        for item in &c.items {
            wanted.push(("configmap".to_string(), format!("{ns}/{}", c.name), item.data_key.clone()));
        }
    }
    assert_eq!(wanted.len(), 2, "vault reads one secret key and one configmap key: {wanted:?}");
    let created = demo_creates();
    for w in &wanted {
        assert!(created.contains(w), "scripts/demo.sh must create {w:?} before applying units/vault.toml: {created:?}");
    }
}

#[test]
fn every_hook_template_reads() {
    let mut count = 0;
    for entry in std::fs::read_dir(unit("hooks")).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let format = spec::Format::for_path(&path, &text);
        if let Err(e) = steward::hooks::parse_template(&text, format) {
            panic!("{}: {e}", path.display());
        }
        count += 1;
    }
    assert!(count >= 1, "expected the example hook template");
}

/// `value` as block-style YAML (what a user would write), for the three-syntax check below.
fn to_yaml(value: &serde_json::Value) -> String {
    use serde_json::Value;
    fn scalar(v: &Value) -> String {
        match v {
            // A JSON string is a valid YAML double-quoted scalar (serde_json never writes `\/`).
            Value::String(s) => serde_json::to_string(s).unwrap(),
            other => other.to_string(),
        }
    }
    fn write(v: &Value, indent: usize, out: &mut String) {
        let pad = " ".repeat(indent);
        match v {
            Value::Object(map) => {
                for (k, v) in map {
                    let key = serde_json::to_string(k).unwrap();
                    match v {
                        Value::Object(m) if !m.is_empty() => {
                            out.push_str(&format!("{pad}{key}:\n"));
                            write(v, indent + 2, out);
                        }
                        Value::Array(a) if !a.is_empty() => {
                            out.push_str(&format!("{pad}{key}:\n"));
                            write(v, indent, out);
                        }
                        Value::Object(_) => out.push_str(&format!("{pad}{key}: {{}}\n")),
                        Value::Array(_) => out.push_str(&format!("{pad}{key}: []\n")),
                        _ => out.push_str(&format!("{pad}{key}: {}\n", scalar(v))),
                    }
                }
            }
            Value::Array(items) => {
                for item in items {
                    match item {
                        Value::Object(m) if !m.is_empty() => {
                            // The item's first key on the dash's line, the rest under it.
                            let mut inner = String::new();
                            write(item, indent + 2, &mut inner);
                            out.push_str(&format!("{pad}- {}", &inner[indent + 2..]));
                        }
                        Value::Array(a) if !a.is_empty() => {
                            out.push_str(&format!("{pad}-\n"));
                            write(item, indent + 2, out);
                        }
                        _ => out.push_str(&format!("{pad}- {}\n", scalar(item))),
                    }
                }
            }
            other => out.push_str(&format!("{pad}{}\n", scalar(other))),
        }
    }
    let mut out = String::new();
    write(value, 0, &mut out);
    out
}

/// Every unit (and hook template) converted to JSON, TOML and YAML passes the real `steward
/// validate`, each conversion reading back to the same document.
#[test]
fn every_unit_validates_in_json_toml_and_yaml() {
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    let mut units: Vec<PathBuf> = Vec::new();
    for sub in ["", "hooks"] {
        for entry in std::fs::read_dir(unit(sub)).unwrap() {
            let path = entry.unwrap().path();
            if matches!(path.extension().and_then(|e| e.to_str()), Some("json" | "toml" | "yaml" | "yml")) {
                units.push(path);
            }
        }
    }
    units.sort();
    for path in &units {
        let text = std::fs::read_to_string(path).unwrap();
        let format = spec::Format::for_path(path, &text);
        let doc = spec::parse_document(&text, format).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let stem = format!(
            "{}{}",
            if path.parent() == Some(&unit("hooks")) { "hooks-" } else { "" },
            path.file_name().unwrap().to_str().unwrap().replace('.', "_")
        );
        let converted = [
            ("json", serde_json::to_string_pretty(&doc).unwrap(), spec::Format::Json),
            (
                "toml",
                toml::to_string(&doc).unwrap_or_else(|e| panic!("{}: as TOML: {e}", path.display())),
                spec::Format::Toml,
            ),
            ("yaml", to_yaml(&doc), spec::Format::Yaml),
        ];
        for (ext, text, format) in converted {
            let back = spec::parse_document(&text, format).unwrap_or_else(|e| panic!("{stem}.{ext}: {e}\n{text}"));
            assert_eq!(back, doc, "{stem}.{ext} reads back to the unit");
            let file = dir.path().join(format!("{stem}.{ext}"));
            std::fs::write(&file, text).unwrap();
            files.push(file);
        }
    }
    assert!(files.len() >= 3 * 10, "{files:?}");
    // The three syntaxes of each spec render the same instance, byte for byte.
    let roots = Config::default().roots();
    for three in files.chunks(3) {
        let Ok(parsed) = spec::load_file(&three[0], &roots) else { continue };
        let ports: Vec<String> =
            parsed.port_wants().iter().enumerate().map(|(i, w)| format!("{}={}", w.name, 31100 + i)).collect();
        let rendered: Vec<Vec<u8>> = three
            .iter()
            .map(|file| {
                let mut render = std::process::Command::new(env!("CARGO_BIN_EXE_steward"));
                render.arg("render").arg(file).args(["--instance", "0", "--hostip", "192.0.2.7"]);
                ports.iter().for_each(|p| {
                    render.args(["--port", p]);
                });
                let out = render.output().unwrap();
                assert!(out.status.success(), "{}: {}", file.display(), String::from_utf8_lossy(&out.stderr));
                out.stdout
            })
            .collect();
        assert_eq!(rendered[0], rendered[1], "{} as JSON and TOML", three[0].display());
        assert_eq!(rendered[0], rendered[2], "{} as JSON and YAML", three[0].display());
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_steward"))
        .args(["validate", "--offline"])
        .args(&files)
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout.matches(": valid").count(), files.len(), "{stdout}");
}
