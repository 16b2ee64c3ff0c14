//! The fuzz target of the API's apply body (`steward::fuzz::apply_body`, also run by libFuzzer
//! from `fuzz/`), on stable in every run of the suite: over the corpus of specs (tests/specs,
//! units/) and thousands of deterministic mutations of it: numbers at their extremes, strings
//! hostile to paths and templates, fields removed, emptied, multiplied or of the wrong type, the
//! mutated documents also as TOML, and bytes flipped, cut and inserted. Every input goes through
//! the same path as the socket's (JSON, TOML, sniffed), and each accepted spec through all the
//! daemon's arithmetic; a panic anywhere fails the test with the input that caused it.

mod common;

use common::Rng;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Mutated inputs per corpus file.
const MUTATIONS: usize = 120;

fn corpus() -> Vec<(PathBuf, Vec<u8>)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["tests/specs/valid", "tests/specs/invalid", "units"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else { continue };
        for e in entries.flatten() {
            let p = e.path();
            if matches!(p.extension().and_then(|x| x.to_str()), Some("json" | "toml")) {
                files.push((p.clone(), std::fs::read(&p).unwrap()));
            }
        }
    }
    files.sort();
    files
}

const NUMBERS: &[&str] = &[
    "0",
    "-1",
    "1",
    "18446744073709551615",
    "-9223372036854775808",
    "4294967296",
    "65536",
    "86401",
    "1e308",
    "-1e308",
    "0.000001",
    "3.5",
];

fn hostile_strings() -> Vec<String> {
    vec![
        String::new(),
        "${".into(),
        "${ports.nope}".into(),
        "../../etc/passwd".into(),
        "/".into(),
        "/var/lib/steward/state".into(),
        "x".repeat(10_000),
        "\u{0}".into(),
        "1e308".into(),
        "-1".into(),
        "NaN".into(),
        "${work_base_dir}/../../x".into(),
        "a b;rm -rf /".into(),
        "Always".into(),
        "pod".into(),
    ]
}

/// Every path to a value in `v` (object keys and array indexes).
fn paths(v: &Value, at: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    out.push(at.clone());
    match v {
        Value::Object(o) => {
            for (k, child) in o {
                at.push(k.clone());
                paths(child, at, out);
                at.pop();
            }
        }
        Value::Array(a) => {
            for (i, child) in a.iter().enumerate() {
                at.push(i.to_string());
                paths(child, at, out);
                at.pop();
            }
        }
        _ => {}
    }
}

fn at_mut<'a>(v: &'a mut Value, path: &[String]) -> Option<&'a mut Value> {
    let mut cur = v;
    for p in path {
        cur = match cur {
            Value::Object(o) => o.get_mut(p)?,
            Value::Array(a) => a.get_mut(p.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(cur)
}

/// One structural mutation of `doc`.
fn mutate(doc: &Value, rng: &mut Rng, strings: &[String]) -> Value {
    let mut doc = doc.clone();
    let rounds = 1 + rng.below(3);
    for _ in 0..rounds {
        let mut all = Vec::new();
        paths(&doc, &mut Vec::new(), &mut all);
        let path = all[rng.below(all.len())].clone();
        let Some(target) = at_mut(&mut doc, &path) else { continue };
        *target = match (rng.below(7), &*target) {
            (0, _) => serde_json::from_str(NUMBERS[rng.below(NUMBERS.len())]).unwrap(),
            (1, _) => Value::String(strings[rng.below(strings.len())].clone()),
            (2, Value::Array(a)) if !a.is_empty() => Value::Array(vec![a[0].clone(); 1 + rng.below(200)]),
            (2, Value::Array(_)) => Value::Array(Vec::new()),
            (3, Value::Object(o)) if !o.is_empty() => {
                let mut o = o.clone();
                let key = o.keys().nth(rng.below(o.len())).cloned().unwrap();
                o.remove(&key);
                Value::Object(o)
            }
            (4, _) => {
                [Value::Null, Value::Bool(true), serde_json::json!({}), serde_json::json!([])][rng.below(4)].clone()
            }
            (5, Value::Number(_)) => serde_json::from_str(NUMBERS[rng.below(NUMBERS.len())]).unwrap(),
            (5, Value::String(s)) => Value::String(format!("{s}{}", strings[rng.below(strings.len())])),
            (_, other) => other.clone(),
        };
    }
    doc
}

/// One byte-level mutation of `bytes`.
fn mangle(bytes: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut b = bytes.to_vec();
    if b.is_empty() {
        return vec![rng.next() as u8];
    }
    match rng.below(3) {
        0 => b.truncate(rng.below(b.len())),
        1 => {
            for _ in 0..1 + rng.below(8) {
                let i = rng.below(b.len());
                b[i] = rng.next() as u8;
            }
        }
        _ => {
            let i = rng.below(b.len());
            let insert: Vec<u8> = (0..1 + rng.below(16)).map(|_| rng.next() as u8).collect();
            b.splice(i..i, insert);
        }
    }
    b
}

fn run(input: &[u8], origin: &str, totals: &mut (usize, usize, usize)) {
    let outcome = std::panic::catch_unwind(|| steward::fuzz::apply_body(input)).unwrap_or_else(|_| {
        panic!("the apply body from {origin} panicked the target:\n{}", String::from_utf8_lossy(input))
    });
    totals.0 += 1;
    totals.1 += outcome.accepted;
    totals.2 += outcome.refused;
}

#[test]
fn the_apply_body_fuzz_target_survives_the_corpus_and_its_mutations() {
    let started = std::time::Instant::now();
    let strings = hostile_strings();
    let mut rng = Rng(0x0005_eed0_f57e_7a4d);
    let mut totals = (0, 0, 0);
    let files = corpus();
    assert!(files.len() >= 20, "a corpus of specs: {}", files.len());
    for (path, bytes) in &files {
        let origin = path.display().to_string();
        run(bytes, &origin, &mut totals);
        let text = String::from_utf8_lossy(bytes);
        let format = steward::spec::Format::for_path(path, &text);
        let doc = steward::spec::parse_document(&text, format).ok();
        for k in 0..MUTATIONS {
            match (&doc, k % 4) {
                (Some(doc), 0 | 1) => {
                    let m = mutate(doc, &mut rng, &strings);
                    run(m.to_string().as_bytes(), &format!("{origin} (mutation {k})"), &mut totals);
                }
                (Some(doc), 2) => {
                    let m = mutate(doc, &mut rng, &strings);
                    // TOML has no null: such a mutation is skipped in this form.
                    if let Ok(toml) = toml::to_string(&m) {
                        run(toml.as_bytes(), &format!("{origin} (TOML mutation {k})"), &mut totals);
                    }
                }
                _ => run(&mangle(bytes, &mut rng), &format!("{origin} (bytes {k})"), &mut totals),
            }
        }
    }
    let (inputs, accepted, refused) = totals;
    eprintln!(
        "fuzz_apply: {inputs} inputs ({} corpus files), {accepted} accepted and {refused} refused parses, {:.1} s",
        files.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(accepted > 0 && refused > 0);
}
