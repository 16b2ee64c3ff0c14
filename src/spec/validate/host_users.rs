//! The host users a spec names: who its processes run as (`processes[i].user`) and who owns its
//! secret and configmap files (`…items[k].user`, a process's or a pod container's). They must
//! exist on the host that runs it, so this is one of that host's rules ([`super::within_host`]:
//! the daemon's apply; `steward validate` there), never a static one: a spec checked elsewhere
//! (steward-sched) applies wherever they exist.

use super::is_user_name;
use crate::spec::error::{Errors, Path};
use crate::spec::model::{ConfigMapRef, KeyItem, ProcessSpec, SecretRef};

/// Adds `no user "NAME" on this host` for each user the spec names that `has_user` does not know.
pub(crate) fn check(spec: &ProcessSpec, has_user: fn(&str) -> bool, errors: &mut Errors) {
    for (at, name) in named(spec) {
        // A malformed name is refused by the static rules already; a numeric uid[:gid] (a pod's
        // file owner) need not exist.
        if is_user_name(name) && !has_user(name) {
            errors.add(&at, format!("no user {name:?} on this host"));
        }
    }
}

/// Whether `name` is a user of this host (passwd, through NSS). A lookup that fails (rather than
/// finding no such user) is not held against the spec: the start then says why.
pub fn exists_here(name: &str) -> bool {
    !matches!(nix::unistd::User::from_name(name), Ok(None))
}

/// Every field naming a host user, with the name (a file item without one is root's).
fn named(spec: &ProcessSpec) -> Vec<(Path, &str)> {
    let t = &spec.spec.template.spec;
    let template = Path::root().field("spec").field("template").field("spec");
    let mut found = Vec::new();
    if spec.is_pod() {
        // Containers run as their image's users; only their files' owners are the host's.
        for (i, c) in t.containers.iter().enumerate() {
            file_owners(&template.field("containers").index(i), &c.secrets, &c.configmaps, &mut found);
        }
    } else {
        for (i, p) in t.processes.iter().enumerate() {
            let at = template.field("processes").index(i);
            found.push((at.field("user"), p.user.as_str()));
            file_owners(&at, &p.secrets, &p.configmaps, &mut found);
        }
    }
    found
}

fn file_owners<'s>(
    at: &Path,
    secrets: &'s [SecretRef],
    configmaps: &'s [ConfigMapRef],
    found: &mut Vec<(Path, &'s str)>,
) {
    let secrets = secrets.iter().enumerate().map(|(j, s)| (at.field("secrets").index(j), &s.items));
    let configmaps = configmaps.iter().enumerate().map(|(j, c)| (at.field("configmaps").index(j), &c.items));
    for (store, items) in secrets.chain(configmaps) {
        let owned = items.iter().enumerate().filter(|(_, item): &(usize, &KeyItem)| !item.user.is_empty());
        found.extend(owned.map(|(k, item)| (store.field("items").index(k).field("user"), item.user.as_str())));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn errors_of(doc: serde_json::Value) -> Vec<String> {
        let spec = crate::spec::decode(&doc).0.expect("decodes");
        let mut errors = Errors::default();
        check(&spec, |name| name == "app", &mut errors);
        errors.0.iter().map(|e| e.to_string()).collect()
    }

    #[test]
    fn a_pods_file_owners_are_checked_but_not_its_numeric_ones() {
        let items = json!([
            {"type": "file", "dataKey": "a", "keyOrPath": "/a", "user": "app"},
            {"type": "file", "dataKey": "b", "keyOrPath": "/b", "user": "ghost"},
            {"type": "file", "dataKey": "c", "keyOrPath": "/c", "user": "101:101"}
        ]);
        let doc = json!({"apiVersion": "v4", "kind": "pod", "metadata": {"name": "p"}, "spec": {"template": {"spec": {
            "containers": [{"name": "main", "image": "busybox", "configmaps": [{"name": "cfg", "items": items}]}]
        }}}});
        assert_eq!(
            errors_of(doc),
            ["spec.template.spec.containers[0].configmaps[0].items[1].user: no user \"ghost\" on this host"]
        );
    }

    #[test]
    fn a_processs_user_and_file_owners_are_checked() {
        let doc = json!({"apiVersion": "v4", "kind": "process", "metadata": {"name": "p"}, "spec": {"template": {"spec": {
            "processes": [{"procName": "a", "user": "ghost", "workPath": "/w", "startCmd": "true"},
                          {"procName": "b", "user": "app", "workPath": "/w", "startCmd": "true",
                           "secrets": [{"secretName": "s", "items": [{"type": "file", "dataKey": "k", "keyOrPath": "k", "user": "ghost"}]}]}]
        }}}});
        assert_eq!(
            errors_of(doc),
            [
                "spec.template.spec.processes[0].user: no user \"ghost\" on this host",
                "spec.template.spec.processes[1].secrets[0].items[0].user: no user \"ghost\" on this host"
            ]
        );
    }
}
