//! Rules of `services` (seed 003): unique names, ports that exist, node ports in range.

use crate::spec::error::{Errors, Path};
use crate::spec::model::service::{ServiceType, NODE_PORTS};
use crate::spec::model::*;
use std::collections::BTreeSet;

pub fn services(spec: &ProcessSpec, at: &Path, errors: &mut Errors) {
    let mut names = BTreeSet::new();
    let mut ports = BTreeSet::new();
    let mut node_ports = BTreeSet::new();
    for (i, s) in spec.services.iter().enumerate() {
        let sp = at.index(i);
        match super::check_name(&s.name) {
            Err(e) => errors.add(&sp.field("name"), e),
            Ok(()) if !names.insert(s.name.as_str()) => {
                errors.add(&sp.field("name"), format!("duplicate service name {:?}", s.name))
            }
            Ok(()) => {}
        }
        if !s.cluster_ip.is_empty() && s.cluster_ip.parse::<std::net::Ipv4Addr>().is_err() {
            errors.add(&sp.field("clusterIP"), format!("{:?} is no IPv4 address", s.cluster_ip));
        }
        if s.ports.is_empty() {
            errors.add(&sp.field("ports"), "needs at least one port");
        }
        for (k, p) in s.ports.iter().enumerate() {
            let pp = sp.field("ports").index(k);
            let udp = p.protocol == Protocol::Udp;
            if !(1..=65535).contains(&p.port) {
                errors.add(&pp.field("port"), format!("{} must be 1-65535", p.port));
            } else if !ports.insert((p.port, udp)) {
                errors.add(&pp.field("port"), format!("port {} is served twice", p.port));
            }
            match &p.target_port {
                None => errors.add(&pp.field("targetPort"), "is required (a port's name or number)"),
                Some(t) if spec.service_target(p).is_none() => errors.add(
                    &pp.field("targetPort"),
                    format!(
                        "{:?} names no port of the spec (a port's name, a process's fixed hostPort or a pod's containerPort)",
                        t.0
                    ),
                ),
                Some(_) => {}
            }
            match (s.kind, p.node_port) {
                (_, 0) => {}
                (ServiceType::ClusterIP, _) => {
                    errors.add(&pp.field("nodePort"), "is for type NodePort only (seed 003)")
                }
                (ServiceType::NodePort, n) if !NODE_PORTS.contains(&n) => {
                    errors.add(&pp.field("nodePort"), format!("{n} must be 30000-32767 (or 0: one is chosen)"))
                }
                (ServiceType::NodePort, n) => {
                    if !node_ports.insert((n, udp)) {
                        errors.add(&pp.field("nodePort"), format!("node port {n} is used twice"));
                    }
                }
            }
        }
    }
}

/// Seed 003 `statefulSet.name` and `domain`: DNS labels (the instances' names).
pub fn stateful_set_names(spec: &ProcessSpec, at: &Path, errors: &mut Errors) {
    let Some(set) = &spec.stateful_set else { return };
    for (field, value) in [("name", &set.name), ("domain", &set.domain)] {
        if !value.is_empty() {
            if let Err(e) = super::check_name(value) {
                errors.add(&at.field(field), e);
            }
        }
    }
    if !set.domain.is_empty() && set.domain != spec.metadata.name {
        if let Some(i) = spec.services.iter().position(|s| s.name == set.domain) {
            errors.add(
                &at.field("domain"),
                format!("{:?} is also the name of services[{i}]: one name, two meanings (seed 003)", set.domain),
            );
        }
    }
}
