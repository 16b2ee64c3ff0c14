//! Pods (seed 001) under one name: the model's types (`model::pod`), their static rules
//! (`validate::pod`) and their rendering (`render::pod`). Nothing in `spec` goes through here;
//! it keeps the paths callers outside know.

pub use super::model::pod::*;
pub use super::render::pod::*;
pub use super::validate::pod::{validate, MIN_MEMORY_MB};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::render;

    fn pod(extra: serde_json::Value) -> serde_json::Value {
        let mut doc = serde_json::json!({
            "apiVersion": "v4", "kind": "pod",
            "metadata": {"name": "web", "namespace": "ns"},
            "spec": {"instance": 1, "template": {"spec": {"network": "BRIDGE", "containers": [
                {"name": "main", "image": "busybox", "command": {"value": "httpd", "arguments": ["-f"]},
                 "ports": [{"name": "http", "containerPort": 80, "hostPort": 0}]}
            ]}}}
        });
        merge(&mut doc, extra);
        doc
    }

    fn merge(a: &mut serde_json::Value, b: serde_json::Value) {
        match (a, b) {
            (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
                for (k, v) in b {
                    merge(a.entry(k).or_insert(serde_json::Value::Null), v);
                }
            }
            (a, b) => *a = b,
        }
    }

    fn roots() -> render::Roots {
        render::Roots {
            work_base_dir: "/data/work".into(),
            run_base_dir: "/data/run".into(),
            volume_root: "/data/volumes".into(),
        }
    }

    fn errors_of(doc: serde_json::Value) -> Vec<String> {
        match super::super::from_document(&doc, &roots()) {
            Ok(_) => Vec::new(),
            Err(e) => e.0.iter().map(|e| e.to_string()).collect(),
        }
    }

    /// Seed 003 `dns` as the pod's network takes it, and a stateful set's pod named as its
    /// ordinal (its DNS names' `NAME-K`) unless it sets a hostname; a HOST pod keeps the host's.
    #[test]
    fn a_pods_resolver_policy_and_ordinal_hostname_render() {
        let ports = [("http".to_string(), 31005u16)].into_iter().collect();
        let ctx = render::RenderContext { roots: &roots(), host_ip: "10.0.0.9".into(), allocated_ports: &ports };
        let rendered = |extra: serde_json::Value, index: u32| {
            let spec = super::super::from_document(&pod(extra), &roots()).unwrap();
            render::render(&spec, index, &ctx).unwrap().pod.unwrap()
        };
        let p = rendered(serde_json::json!({"spec": {"template": {"spec": {"dns": "ClusterFirst"}}}}), 0);
        assert!(p.cluster_dns);
        assert_eq!(p.hostname, "");
        let host = |dns: &str| serde_json::json!({"spec": {"template": {"spec": {"network": "HOST", "dns": dns}}}});
        assert!(!rendered(host("ClusterFirst"), 0).cluster_dns, "a HOST pod's ClusterFirst is Default");
        assert!(rendered(host("ClusterFirstWithHostNet"), 0).cluster_dns);
        let set = serde_json::json!({"statefulSet": {"name": "db"}, "spec": {"instance": 3}});
        assert_eq!(rendered(set.clone(), 2).hostname, "db-2");
        let mut named = set.clone();
        merge(&mut named, serde_json::json!({"spec": {"template": {"spec": {"hostname": "game"}}}}));
        assert_eq!(rendered(named, 2).hostname, "game");
        let mut on_host = set;
        merge(&mut on_host, serde_json::json!({"spec": {"template": {"spec": {"network": "HOST"}}}}));
        assert_eq!(rendered(on_host, 2).hostname, "", "a HOST pod has the host's name");
    }

    #[test]
    fn a_valid_pod_renders_ports_env_and_dollar_copies() {
        let mut doc = pod(serde_json::json!({}));
        doc["spec"]["template"]["spec"]["containers"][0]["env"] = serde_json::json!([{"name": "MYIP", "value": "$HOST"}, {"name": "ID", "value": "$BCS_POD_ID"}, {"name": "X", "value": "plain"}]);
        let spec = super::super::from_document(&doc, &roots()).unwrap();
        let ports = [("http".to_string(), 31005u16)].into_iter().collect();
        let ctx = render::RenderContext { roots: &roots(), host_ip: "10.0.0.9".into(), allocated_ports: &ports };
        let r = render::render(&spec, 0, &ctx).unwrap();
        let pod = r.pod.expect("a pod");
        let c = &pod.containers[0];
        let env: std::collections::BTreeMap<_, _> = c.env.iter().map(|e| (e.name.as_str(), e.value.as_str())).collect();
        assert_eq!(env["PORT_http"], "31005");
        assert_eq!(env["MYIP"], "10.0.0.9");
        assert_eq!(env["ID"], "ns.web.0");
        assert_eq!(env["BCS_NODE_ADDR"], "10.0.0.9");
        assert_eq!(env["X"], "plain");
        assert_eq!(c.ports[0].container_port, 80);
        assert_eq!(c.ports[0].host_port, 31005);
        assert_eq!(c.entrypoint.as_deref(), Some("httpd"));
        assert!(r.processes.is_empty());
    }

    #[test]
    fn mistakes_name_their_fields() {
        let mut doc = pod(serde_json::json!({}));
        let c = &mut doc["spec"]["template"]["spec"]["containers"];
        c[0]["env"] = serde_json::json!([{"name": "A", "value": "$OTHER"}, {"name": "HOST", "value": "x"}]);
        c[0]["resources"] = serde_json::json!({"limits": {"memory": 2}, "swappiness": 101, "cpuSet": true,
            "blkio": {"readBps": [{"path": "/dev/sda", "rate": "10zb"}]}});
        c[0]["volumes"] = serde_json::json!([{"hostPath": "/etc", "mountPath": "/x"}]);
        c.as_array_mut().unwrap().push(serde_json::json!({"name": "main", "image": ""}));
        let errors = errors_of(doc).join("\n");
        let at = "spec.template.spec.containers";
        for want in [
            format!("{at}[0].env[0].value: $OTHER cannot be copied"),
            format!("{at}[0].env[1].name: HOST is injected"),
            format!("{at}[0].resources.limits.memory: must be at least 4"),
            format!("{at}[0].resources.cpuSet: needs limits.cpu"),
            format!("{at}[0].resources.swappiness: 101 must be 0-100"),
            format!("{at}[0].resources.blkio.readBps[0].rate:"),
            format!("{at}[0].volumes[0].hostPath: \"/etc\""),
            format!("{at}[1].name: duplicate container name"),
            format!("{at}[1].image: is required"),
        ] {
            assert!(errors.contains(&want), "missing {want:?} in:\n{errors}");
        }
    }

    #[test]
    fn user_network_needs_net_parameter_and_none_has_no_ports() {
        let errors =
            errors_of(pod(serde_json::json!({"spec": {"template": {"spec": {"network": "USER"}}}}))).join("\n");
        assert!(errors.contains("spec.template.spec.parameters: USER networking needs"), "{errors}");
        let errors =
            errors_of(pod(serde_json::json!({"spec": {"template": {"spec": {"network": "NONE"}}}}))).join("\n");
        assert!(errors.contains("ports[0]: a pod with network NONE cannot publish ports"), "{errors}");
        let errors =
            errors_of(pod(serde_json::json!({"spec": {"template": {"spec": {"network": "WIFI"}}}}))).join("\n");
        assert!(errors.contains("spec.template.spec.network: must be one of"), "{errors}");
    }

    #[test]
    fn rates_take_units() {
        assert_eq!(parse_rate("10mb", true), Ok(10 << 20));
        assert_eq!(parse_rate("512KB", true), Ok(512 << 10));
        assert_eq!(parse_rate("4096", true), Ok(4096));
        assert_eq!(parse_rate("300", false), Ok(300));
        assert!(parse_rate("300mb", false).is_err());
        assert!(parse_rate("fast", true).is_err());
        assert!(parse_rate("0", true).is_err());
    }

    #[test]
    fn toml_pods_parse_too() {
        let text = r#"
apiVersion = "v4"
kind = "pod"
[metadata]
name = "web"
[spec.template.spec]
network = "HOST"
[[spec.template.spec.containers]]
name = "main"
image = "busybox"
command = { value = "sleep", arguments = ["100"] }
ports = [{ name = "http", hostPort = 0 }]
"#;
        let spec = super::super::parse(text, super::super::Format::Toml, &roots()).unwrap();
        assert_eq!(spec.spec.template.spec.network, NetworkMode::Host);
        assert_eq!(spec.spec.template.spec.containers[0].command.arguments, vec!["100"]);
    }
}
