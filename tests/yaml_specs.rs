//! Issue 45, item 1: specs in YAML (as seeds 003 and 004 are written), through the real CLI:
//! a YAML spec applies and runs; the same content in JSON, TOML and YAML renders
//! byte-identical; a syntax error, and a mistake found by validation, name their line and
//! column; a stream of several documents applies each in order, all validated before any.

mod common;

use common::{id, Daemon};
use steward::supervisor::state::Kind;

const WEB: &str = "\
apiVersion: v4
kind: process
metadata:
  name: web
  namespace: yaml
spec:
  instance: 2
  template:
    spec:
      processes:
        - procName: web
          workPath: ${work_base_dir}/${namespace}.${processname}.${instanceid}
          startCmd: exec sleep 1000
          startGracePeriod: 0
          env:
            - {name: GREETING, value: 'hello: world'}
            - name: COUNT
              value: \"3\"
";

fn write(d: &Daemon, name: &str, text: &str) -> String {
    let path = d.path().join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[tokio::test]
async fn a_yaml_spec_applies_runs_and_renders_as_its_json_and_toml() {
    let d = Daemon::start("yaml-apply");
    let file = write(&d, "web.yaml", WEB);
    let (code, out, err) = d.cli(&["validate", &file]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = d.cli(&["apply", "-f", &file, "--wait", "--timeout", "30"]);
    assert_eq!(code, 0, "{out}{err}");
    d.wait_state(&id("yaml", "web", 1), Kind::Running, 20).await;

    // The same document in the three syntaxes renders the same instance.
    let doc = steward::spec::yaml::parse(WEB).unwrap().remove(0).value;
    let json = write(&d, "web.json", &doc.to_string());
    let toml = write(&d, "web.toml", &toml::to_string(&doc).unwrap());
    let rendered: Vec<String> = [&file, &json, &toml]
        .iter()
        .map(|f| {
            let (code, out, err) = d.cli(&["render", f]);
            assert_eq!(code, 0, "{f}: {err}");
            out
        })
        .collect();
    assert_eq!(rendered[0], rendered[1], "YAML and JSON");
    assert_eq!(rendered[0], rendered[2], "YAML and TOML");
    assert!(rendered[0].contains("hello: world"), "{}", rendered[0]);
}

#[tokio::test]
async fn yaml_mistakes_name_their_line_and_column() {
    let d = Daemon::start("yaml-mistakes");
    let broken = write(&d, "broken.yaml", "apiVersion: v4\nmetadata: {name: x\nspec: 1\n");
    let (code, _, err) = d.cli(&["validate", &broken]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("YAML syntax error at line"), "{err}");
    // Found by validation, named by field path and by where it is written.
    let wrong = WEB.replace("startGracePeriod: 0", "startGracePeriod: soon");
    let wrong = write(&d, "wrong.yaml", &wrong);
    let (code, _, err) = d.cli(&["validate", &wrong]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("spec.template.spec.processes[0].startGracePeriod") && err.contains("(line 14, column 11)"),
        "{err}"
    );
    let (code, _, err) = d.cli(&["apply", "-f", &wrong]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("(line 14, column 11)"), "{err}");
}

#[tokio::test]
async fn a_stream_of_documents_applies_each_once_all_are_valid() {
    let d = Daemon::start("yaml-stream");
    let second = WEB.replace("name: web\n", "name: api\n");
    let bad = second.replace("instance: 2", "instance: many");
    let file = write(&d, "bad.yaml", &format!("{WEB}---\n{bad}"));
    let (code, _, err) = d.cli(&["apply", "-f", &file]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("(document 2)") && err.contains("spec.instance"), "{err}");
    assert!(d.client.list(&[]).await.unwrap().is_empty(), "nothing applied while one is invalid");

    let file = write(&d, "both.yaml", &format!("---\n{WEB}---\n{second}...\n"));
    let (code, out, err) = d.cli(&["apply", "-f", &file, "--wait", "--timeout", "30"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("(document 1)") && out.contains("(document 2)"), "{out}");
    d.wait_state(&id("yaml", "web", 0), Kind::Running, 20).await;
    d.wait_state(&id("yaml", "api", 1), Kind::Running, 20).await;
}

#[tokio::test]
async fn stdin_takes_any_of_the_three_syntaxes() {
    let d = Daemon::start("yaml-stdin");
    let doc = steward::spec::yaml::parse(WEB).unwrap().remove(0).value;
    let json = doc.to_string();
    let toml = toml::to_string(&doc).unwrap();
    for (syntax, text) in [("YAML", WEB), ("JSON", json.as_str()), ("TOML", toml.as_str())] {
        let (code, out, err) = d.cli_stdin(&["validate", "-"], text);
        assert_eq!(code, 0, "{syntax}: {out}{err}");
        assert!(out.contains("stdin: valid"), "{syntax}: {out}");
        let (code, out, err) = d.cli_stdin(&["render", "-", "--instance", "1"], text);
        assert_eq!(code, 0, "{syntax}: {out}{err}");
        assert!(out.contains("/yaml.web.1"), "{syntax}: {out}");
    }
    // A mistake on stdin is named "stdin", with its line.
    let wrong = WEB.replace("instance: 2", "instance: two");
    let (code, _, err) = d.cli_stdin(&["apply", "-f", "-"], &wrong);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("stdin: ") && err.contains("spec.instance") && err.contains("(line 7, column 3)"), "{err}");
    assert!(d.client.list(&[]).await.unwrap().is_empty());

    let (code, out, err) = d.cli_stdin(&["apply", "-f", "-", "--wait", "--timeout", "30"], WEB);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("applied stdin"), "{out}");
    d.wait_state(&id("yaml", "web", 1), Kind::Running, 20).await;
}

#[tokio::test]
async fn validate_and_render_read_every_document() {
    let d = Daemon::start("yaml-docs");
    let second = WEB.replace("name: web\n", "name: api\n");
    let file = write(&d, "two.yaml", &format!("{WEB}---\n{second}"));
    let (code, out, err) = d.cli(&["validate", &file]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("(document 1): valid") && out.contains("(document 2): valid"), "{out}");
    let (code, out, _) = d.cli(&["-o", "json", "validate", &file]);
    assert_eq!(code, 0);
    let reports: serde_json::Value = serde_json::from_str(&out).unwrap();
    let apps: Vec<_> = reports.as_array().unwrap().iter().map(|r| (r["document"].clone(), r["app"].clone())).collect();
    assert_eq!(apps, [(1.into(), "yaml/web".into()), (2.into(), "yaml/api".into())]);

    // render: one JSON object per document, in order.
    let (code, out, err) = d.cli(&["render", &file]);
    assert_eq!(code, 0, "{err}");
    let rendered: Vec<serde_json::Value> =
        serde_json::Deserializer::from_str(&out).into_iter().collect::<Result<_, _>>().unwrap();
    let names: Vec<_> = rendered.iter().map(|r| r["id"]["name"].as_str().unwrap_or_default().to_string()).collect();
    assert_eq!(names, ["web", "api"], "{out}");

    // One bad document: validate names it and still reports the good one.
    let bad = second.replace("instance: 2", "instance: many");
    let file = write(&d, "bad.yaml", &format!("{WEB}---\n{bad}"));
    let (code, out, err) = d.cli(&["validate", &file]);
    assert_eq!(code, 1);
    assert!(out.contains("(document 1): valid"), "{out}");
    assert!(err.contains("(document 2): ") && err.contains("spec.instance"), "{err}");
}

#[tokio::test]
async fn hook_templates_in_yaml_are_stored_all_or_none() {
    let d = Daemon::start("yaml-hooks");
    let template = |name: &str, count: &str| {
        format!(
            "kind: HookTemplate\nmetadata:\n  name: {name}\n  namespace: yaml\nspec:\n  args:\n    - name: port\n  metrics:\n    - name: check\n      count: {count}\n      interval: 1s\n      successCondition: result == \"ok\"\n      provider:\n        web:\n          url: http://127.0.0.1:{{{{ args.port }}}}/check\n"
        )
    };
    let file = write(&d, "bad-hooks.yaml", &format!("{}---\n{}", template("one", "1"), template("two", "lots")));
    let (code, _, err) = d.cli(&["hook", "template", "apply", &file]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("(document 2)") && err.contains("spec.metrics[0].count") && err.contains("(line 26, column 7)"),
        "{err}"
    );
    assert!(!err.contains("must be at least"), "no second mistake about the stand-in value: {err}");
    let (_, out, _) = d.cli(&["-o", "json", "hook", "template", "ls"]);
    assert_eq!(out.trim(), "[]", "nothing stored while one is invalid");

    let file = write(&d, "hooks.yaml", &format!("{}---\n{}", template("one", "1"), template("two", "2")));
    let (code, out, err) = d.cli(&["hook", "template", "apply", &file]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("yaml/one") && out.contains("yaml/two"), "{out}");
    let (code, out, err) = d.cli_stdin(&["hook", "template", "apply", "-"], &template("three", "1"));
    assert_eq!(code, 0, "{out}{err}");
    let (_, out, _) = d.cli(&["hook", "template", "ls"]);
    assert!(["yaml/one", "yaml/two", "yaml/three"].iter().all(|t| out.contains(t)), "{out}");
}
