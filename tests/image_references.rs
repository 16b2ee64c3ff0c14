//! A container's image reference is checked by Docker's grammar at `steward validate` and at
//! `steward apply` (issue 44): a malformed one is refused with its field path before anything is
//! pulled, rather than a pod retrying "invalid reference format" until `apply --wait` times out.

mod common;

use common::Daemon;
use serde_json::json;
use std::time::{Duration, Instant};

/// A pod whose container and init container have these images.
fn pod_with(name: &str, image: &str, init_image: &str) -> serde_json::Value {
    let mut pod = common::docker::pod("img", name, json!([{"name": "main", "image": image}]), json!({}));
    pod["spec"]["template"]["spec"]["initializers"] = json!([{"name": "setup", "image": init_image}]);
    pod
}

const MALFORMED: &[&str] = &["busy box:1", "BusyBox:Latest", "busybox:tag:extra@@", "a//b", "a:", "busybox-"];

#[tokio::test]
async fn a_malformed_image_reference_is_refused_by_validate_and_apply_with_its_field() {
    let d = Daemon::start("img-refs");
    for (i, bad) in MALFORMED.iter().enumerate() {
        let name = format!("bad{i}");
        let file = d.path().join(format!("{name}.json"));
        std::fs::write(&file, pod_with(&name, bad, "busybox:1.36").to_string()).unwrap();
        let file = file.to_str().unwrap();

        let (code, out, err) = d.cli(&["validate", "--offline", file]);
        assert_eq!(code, 1, "validate {bad:?}: {out}{err}");
        let field = format!("spec.template.spec.containers[0].image: {bad:?} is not an image reference");
        assert!(err.contains(&field), "validate {bad:?} names the field: {err}");

        let started = Instant::now();
        let (code, out, err) = d.cli(&["apply", "-f", file, "--wait", "--timeout", "60"]);
        assert_eq!(code, 1, "apply {bad:?}: {out}{err}");
        assert!(started.elapsed() < Duration::from_secs(20), "refused at once, not at the timeout");
        assert!(err.contains(&field), "apply {bad:?} names the field: {err}");
        assert!(d.client.list(&[("name", name.as_str())]).await.unwrap().is_empty(), "nothing applied for {bad:?}");
    }
    // An init container's image is held to the same grammar, under its own path.
    let file = d.path().join("badinit.json");
    std::fs::write(&file, pod_with("badinit", "busybox", "Busy Box").to_string()).unwrap();
    let (code, out, err) = d.cli(&["validate", "--offline", file.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("spec.template.spec.initializers[0].image: \"Busy Box\" is not an image reference"), "{err}");
    // The forms Docker takes pass.
    let digest = "0123456789abcdef".repeat(4);
    for good in [
        "busybox".to_string(),
        "busybox:1.36".into(),
        "localhost:5000/a/b:tag".into(),
        format!("registry.example.com/ns/img@sha256:{digest}"),
        "a_b__c-d.e".into(),
        "Registry.Example.com/x".into(),
    ] {
        let file = d.path().join("good.json");
        std::fs::write(&file, pod_with("good", &good, &good).to_string()).unwrap();
        let (code, out, err) = d.cli(&["validate", "--offline", file.to_str().unwrap()]);
        assert_eq!(code, 0, "{good:?}: {out}{err}");
    }
}
