//! The node facts seed 003's `topologyKey` names. Each is read in seed 003's spelling
//! (Kubernetes' beta labels), Kubernetes' current one and a short one, and every daemon reports
//! them in GET /v1/node: the hostname and zone, region and instance type from `[node]` in
//! stewardd.toml, os and arch from the host.

/// A well-known node fact.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopologyKey {
    Hostname,
    Zone,
    Region,
    InstanceType,
    Os,
    Arch,
}

/// The seed's default topology key.
pub const HOSTNAME_TOPOLOGY: &str = "kubernetes.io/hostname";

impl TopologyKey {
    pub const ALL: [TopologyKey; 6] = [
        TopologyKey::Hostname,
        TopologyKey::Zone,
        TopologyKey::Region,
        TopologyKey::InstanceType,
        TopologyKey::Os,
        TopologyKey::Arch,
    ];

    /// The short name: what nodes report it under and placement reasons say.
    pub fn short(self) -> &'static str {
        self.spellings()[0]
    }

    /// Every spelling read: the short name, seed 003's, Kubernetes' current.
    pub fn spellings(self) -> &'static [&'static str] {
        match self {
            TopologyKey::Hostname => &["hostname", HOSTNAME_TOPOLOGY],
            TopologyKey::Zone => &["zone", "failure-domain.beta.kubernetes.io/zone", "topology.kubernetes.io/zone"],
            TopologyKey::Region => {
                &["region", "failure-domain.beta.kubernetes.io/region", "topology.kubernetes.io/region"]
            }
            TopologyKey::InstanceType => {
                &["instance-type", "beta.kubernetes.io/instance-type", "node.kubernetes.io/instance-type"]
            }
            TopologyKey::Os => &["os", "beta.kubernetes.io/os", "kubernetes.io/os"],
            TopologyKey::Arch => &["arch", "beta.kubernetes.io/arch", "kubernetes.io/arch"],
        }
    }

    /// The fact `name` spells, if it is a well-known one.
    pub fn parse(name: &str) -> Option<TopologyKey> {
        TopologyKey::ALL.into_iter().find(|k| k.spellings().contains(&name))
    }
}

#[cfg(test)]
mod tests {
    use super::TopologyKey;

    #[test]
    fn seed_003_kubernetes_and_short_spellings_name_one_fact() {
        for (name, key) in [
            ("kubernetes.io/hostname", TopologyKey::Hostname),
            ("failure-domain.beta.kubernetes.io/zone", TopologyKey::Zone),
            ("topology.kubernetes.io/region", TopologyKey::Region),
            ("beta.kubernetes.io/instance-type", TopologyKey::InstanceType),
            ("instance-type", TopologyKey::InstanceType),
            ("beta.kubernetes.io/os", TopologyKey::Os),
            ("kubernetes.io/arch", TopologyKey::Arch),
        ] {
            assert_eq!(TopologyKey::parse(name), Some(key), "{name}");
        }
        assert_eq!(TopologyKey::parse("idc"), None);
        assert_eq!(TopologyKey::parse("Zone"), None, "label keys are case-sensitive, as Kubernetes'");
    }
}
