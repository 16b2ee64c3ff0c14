//! Secrets and configmaps: stored by the daemon, injected as env vars and files with the right
//! owner and mode, never shown in logs, events or listings, and picked up at the next restart.

mod common;

use common::{id, spec, Daemon};
use serde_json::json;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use steward::supervisor::state::Kind;

const SECRET: &str = "hunter2-very-secret";

#[tokio::test]
async fn secrets_and_configmaps_are_injected_and_never_shown() {
    let user = "steward-t4";
    let _ = std::process::Command::new("useradd").args(["--system", "--no-create-home", user]).output();
    let uid = nix::unistd::User::from_name(user).unwrap().unwrap().uid.as_raw();
    let d = Daemon::start("secrets");
    let (code, out, err) = d.cli(&[
        "secret",
        "create",
        "test/creds",
        "--from-literal",
        &format!("password={SECRET}"),
        "--from-literal",
        "token=tok-123",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let conf = d.path().join("game.conf");
    std::fs::write(&conf, "level = 7\n").unwrap();
    let (code, _, err) =
        d.cli(&["configmap", "create", "test/conf", "--from-file", &format!("game_conf={}", conf.display())]);
    assert_eq!(code, 0, "{err}");

    let s = spec(
        "vault",
        1,
        json!({
            "user": user,
            "procName": "sleep",
            "startCmd": "exec sleep 1000",
            "secrets": [{"secretName": "creds", "items": [
                {"type": "env", "dataKey": "token", "keyOrPath": "TOKEN"},
                {"type": "file", "dataKey": "password", "keyOrPath": "secret/pw.txt", "readOnly": true, "user": user}
            ]}],
            "configmaps": [{"name": "conf", "items": [
                {"type": "file", "dataKey": "game_conf", "dataKeyAlias": "game.conf", "KeyOrPath": "conf"}
            ]}]
        }),
        json!({}),
    );
    d.apply_json(&s).await;
    let iid = id("test", "vault", 0);
    let st = d.wait_state(&iid, Kind::Running, 10).await;
    let work = d.work_dir().join("test.vault.0");

    let pw = work.join("secret/pw.txt");
    assert_eq!(std::fs::read_to_string(&pw).unwrap(), SECRET);
    let meta = std::fs::metadata(&pw).unwrap();
    assert_eq!(meta.uid(), uid, "owned by the item's user");
    assert_eq!(meta.permissions().mode() & 0o7777, 0o400, "readOnly secret");
    assert_eq!(std::fs::metadata(work.join("secret")).unwrap().uid(), uid, "its directory belongs to the process user");
    let cm = work.join("conf/game.conf");
    assert_eq!(std::fs::read_to_string(&cm).unwrap(), "level = 7\n");
    assert_eq!(std::fs::metadata(&cm).unwrap().uid(), 0, "configmap files default to root");
    assert_eq!(std::fs::metadata(&cm).unwrap().permissions().mode() & 0o7777, 0o644);
    let environ = std::fs::read(format!("/proc/{}/environ", st.pid.unwrap())).unwrap();
    assert!(String::from_utf8_lossy(&environ).contains("TOKEN=tok-123"));

    // Never shown: not in listings, status, events or the daemon's log.
    let (_, ls, _) = d.cli(&["-o", "json", "secret", "ls"]);
    assert!(ls.contains("password") && ls.contains("token"), "keys are listed: {ls}");
    let mut shown = vec![ls];
    shown.push(d.cli(&["ls"]).1);
    shown.push(d.cli(&["-o", "json", "status", "test/vault/0"]).1);
    shown.push(d.cli(&["-o", "json", "events"]).1);
    shown.push(d.cli(&["secret", "ls"]).1);
    shown.push(d.log());
    for text in &shown {
        assert!(!text.contains(SECRET) && !text.contains("tok-123"), "a value leaked into: {text}");
    }

    // A change applies at the next (re)start.
    let (code, _, _) = d.cli(&[
        "secret",
        "create",
        "test/creds",
        "--from-literal",
        "password=rotated",
        "--from-literal",
        "token=tok-456",
    ]);
    assert_eq!(code, 0);
    assert_eq!(std::fs::read_to_string(&pw).unwrap(), SECRET, "the running instance is not touched");
    let (code, _, err) = d.cli(&["restart", "test/vault/0"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::read_to_string(&pw).unwrap(), "rotated");

    // A missing key is a clear error naming the store and key, and the instance does not start.
    let (code, _, _) = d.cli(&["secret", "create", "test/creds", "--from-literal", "token=only"]);
    assert_eq!(code, 0);
    let (code, _, _) = d.cli(&["stop", "test/vault/0"]);
    assert_eq!(code, 0);
    d.client.action(&iid, "start", Some(10.0)).await.ok();
    let st = d.wait(&iid, 10, |s| s.message.contains("has no key")).await;
    assert!(st.message.contains("secret test/creds has no key \"password\""), "{}", st.message);
    let (code, _, err) = d.cli(&["secret", "rm", "test/nope"]);
    assert_eq!(code, 4, "{err}");
    let (code, out, _) = d.cli(&["secret", "rm", "test/creds"]);
    assert_eq!(code, 0);
    assert!(out.contains("removed"));
}

/// Seed 003 `envFrom` (every key of a configmap or secret, with a prefix) and `optional`
/// sources: a missing optional one is no error (its env vars left out, its files empty), a
/// missing required one fails the start naming it.
#[tokio::test]
async fn env_from_and_optional_sources() {
    let d = Daemon::start("secrets-envfrom");
    let (code, _, err) = d.cli(&[
        "configmap",
        "create",
        "test/game",
        "--from-literal",
        "LEVEL=7",
        "--from-literal",
        "MODE=pvp",
        "--from-literal",
        "not.an.env-name=x",
    ]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = d.cli(&["secret", "create", "test/keys", "--from-literal", "API_KEY=k-1"]);
    assert_eq!(code, 0, "{err}");
    let s = spec(
        "envfrom",
        1,
        json!({
            "procName": "sh",
            "startCmd": "env | sort > env.txt; exec sleep 1000",
            "envFrom": [
                {"type": "Config", "name": "game", "prefix": "GAME_"},
                {"type": "Secret", "name": "keys"},
                {"type": "Secret", "name": "absent", "optional": true}
            ],
            "env": [{"name": "MODE_SEEN", "value": "yes"}],
            "secrets": [{"secretName": "absent-too", "optional": true, "items": [
                {"type": "env", "dataKey": "x", "keyOrPath": "ABSENT"},
                {"type": "file", "dataKey": "x", "keyOrPath": "absent.txt"}
            ]}],
            "configmaps": [{"name": "game", "optional": true, "items": [
                {"type": "env", "dataKey": "no-such-key", "keyOrPath": "NO_KEY"}
            ]}]
        }),
        json!({}),
    );
    d.apply_json(&s).await;
    let st = d.wait_state(&id("test", "envfrom", 0), Kind::Running, 10).await;
    let work = d.work_dir().join("test.envfrom.0");
    let mut env = String::new();
    for _ in 0..100 {
        env = std::fs::read_to_string(work.join("env.txt")).unwrap_or_default();
        if !env.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    for line in ["GAME_LEVEL=7", "GAME_MODE=pvp", "API_KEY=k-1", "MODE_SEEN=yes"] {
        assert!(env.lines().any(|l| l == line), "{line} in:\n{env}");
    }
    assert!(!env.contains("not.an.env-name") && !env.contains("ABSENT") && !env.contains("NO_KEY"), "{env}");
    assert_eq!(std::fs::read_to_string(work.join("absent.txt")).unwrap(), "", "an optional file is empty");
    assert!(st.pid.is_some());

    // Required and missing: the start fails, naming the store.
    let s = spec(
        "required",
        1,
        json!({"startCmd": "exec sleep 1000", "envFrom": [{"type": "Config", "name": "nowhere"}]}),
        json!({"restartPolicy": {"policy": "Never"}}),
    );
    d.apply_json(&s).await;
    let st = d.wait_state(&id("test", "required", 0), Kind::Failed, 10).await;
    assert!(format!("{st:?}").contains("envFrom: configmap test/nowhere does not exist"), "{st:?}");
}

/// Seed 003's `env[].from` (a configmap's or a secret's key, `optional` honoured) and seed 000's
/// prose `env` as an object, written in YAML as users copy them, reach the process at its start.
#[tokio::test]
async fn seed_env_forms_reach_the_process() {
    let d = Daemon::start("env-forms");
    let (code, _, err) = d.cli(&["secret", "create", "test/creds", "--from-literal", "token=tok-789"]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = d.cli(&["configmap", "create", "test/conf", "--from-literal", "level=7"]);
    assert_eq!(code, 0, "{err}");
    let app = |name: &str, env: &str| {
        format!(
            "apiVersion: v4\nkind: process\nmetadata: {{name: {name}, namespace: test}}\nspec:\n  instance: 1\n  template:\n    spec:\n      processes:\n        - procName: sleep\n          workPath: ${{work_base_dir}}/${{namespace}}.${{processname}}.${{instanceid}}\n          startCmd: exec sleep 1000\n          startGracePeriod: 0\n          env:\n{env}"
        )
    };
    let from = app(
        "from",
        "            - {name: GREETING, value: hi}
            - name: LEVEL
              from: {type: ConfigMap, name: conf, key: level}
            - name: TOKEN
              from: {type: Secret, name: creds, key: token}
            - name: ABSENT
              from: {type: Secret, name: nosuch, key: token, optional: true}
",
    );
    let prose = app("prose", "            hostip: ${hostip}\n            MODE: fast\n");
    let file = d.path().join("env.yaml");
    std::fs::write(&file, format!("{from}---\n{prose}")).unwrap();
    let (code, out, err) = d.cli(&["apply", "-f", file.to_str().unwrap(), "--wait", "--timeout", "30"]);
    assert_eq!(code, 0, "{out}{err}");
    let environ = |st: &steward::supervisor::record::InstanceStatus| {
        let raw = std::fs::read(format!("/proc/{}/environ", st.pid.unwrap())).unwrap();
        String::from_utf8_lossy(&raw).split('\0').map(String::from).collect::<Vec<_>>()
    };
    let st = d.wait_state(&id("test", "from", 0), Kind::Running, 10).await;
    let env = environ(&st);
    for expected in ["GREETING=hi", "LEVEL=7", "TOKEN=tok-789"] {
        assert!(env.iter().any(|e| e == expected), "{expected}: {env:?}");
    }
    assert!(!env.iter().any(|e| e.starts_with("ABSENT=")), "an optional missing secret leaves it out: {env:?}");
    let st = d.wait_state(&id("test", "prose", 0), Kind::Running, 10).await;
    let env = environ(&st);
    assert!(env.iter().any(|e| e == "MODE=fast") && env.iter().any(|e| e.starts_with("hostip=")), "{env:?}");
}
