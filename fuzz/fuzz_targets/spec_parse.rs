//! Parser + validator + renderer on arbitrary bytes, read both as JSON and as TOML.
//! Any panic is a bug: bad input must come back as a list of errors.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::collections::BTreeMap;
use steward::spec::{self, Format, RenderContext, Roots};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let roots = Roots { work_base_dir: "/w".into(), run_base_dir: "/r".into() };
    for format in [Format::Json, Format::Toml] {
        if let Ok(parsed) = spec::parse(text, format, &roots) {
            let ports: BTreeMap<String, u16> = parsed
                .spec
                .template
                .spec
                .processes
                .iter()
                .flat_map(|p| &p.ports)
                .map(|p| (p.name.clone(), 31000))
                .collect();
            let ctx = RenderContext { roots: &roots, host_ip: "10.0.0.1".into(), allocated_ports: &ports };
            let rendered = spec::render(&parsed, parsed.spec.instance - 1, &ctx).expect("a valid spec renders");
            serde_json::to_string(&rendered).expect("rendered instance serializes");
        }
    }
});
