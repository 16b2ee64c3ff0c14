//! A container's `image` as Docker reads it: the grammar of github.com/distribution/reference
//! (`ParseNormalizedNamed`), so that a reference the engine would refuse ("invalid reference
//! format") is refused by `steward validate` and `apply` with its field, not found out by a pod
//! retrying under its restart policy.
//!
//! ```text
//! reference := name [ ":" tag ] [ "@" digest ]
//! name      := [ domain "/" ] path-component [ "/" path-component ]*
//! domain    := host [ ":" port ]        host: DNS-like labels (any case), or [IPv6]
//! path-component := [a-z0-9]+ ( ( "." | "_" | "__" | "-"+ ) [a-z0-9]+ )*
//! tag       := [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}
//! digest    := algorithm ":" hex        sha256 (64), sha384 (96) or sha512 (128) lowercase hex
//! ```
//!
//! The first component is the domain when it is `localhost`, holds a `.` or a `:`, or has an
//! uppercase letter (a path never has one); otherwise the name is Docker Hub's. The whole name,
//! as Docker completes it (`docker.io/library/busybox`), is at most 255 characters.
//!
//! Hand-written rather than a crate's: the Rust parsers (oci-spec's, oci-client's) differ from
//! Docker's on uppercase first components and on the name's length, and this is all of it.

/// Docker's bound on a repository name, counted as Docker completes it.
const NAME_TOTAL_LENGTH_MAX: usize = 255;
const TAG_LENGTH_MAX: usize = 128;

/// Ok, or what makes `image` no reference Docker takes (for the `image` field's message).
pub fn check(image: &str) -> Result<(), String> {
    if image.trim().is_empty() {
        return Err("is required".into());
    }
    let bad = |why: &str| Err(format!("{image:?} is not an image reference: {why}"));
    if image.len() == 64 && image.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return bad("Docker refuses a 64-hex name (an image id is not a reference)");
    }
    let (name_and_tag, digest) = match image.split_once('@') {
        Some((_, d)) if d.contains('@') => return bad("one '@' at most, before the digest"),
        Some((n, d)) => (n, Some(d)),
        None => (image, None),
    };
    // A tag's ':' comes after the last '/'; one before it is the domain's port.
    let last_slash = name_and_tag.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = match name_and_tag[last_slash..].rfind(':') {
        Some(i) => (&name_and_tag[..last_slash + i], Some(&name_and_tag[last_slash + i + 1..])),
        None => (name_and_tag, None),
    };
    let (domain, path) = split_domain(name);
    if let Some(domain) = domain {
        if !is_domain(domain) {
            return bad(&format!(
                "registry {domain:?} must be a host name, an IPv4 or [IPv6] address, with an optional :port"
            ));
        }
    }
    if path.is_empty() {
        return bad("no repository name");
    }
    if path.contains(':') {
        return bad("one ':' at most after the name, before its tag (a port goes with a registry: host:port/name)");
    }
    if path.bytes().any(|b| b.is_ascii_uppercase()) {
        return bad(&format!("repository name {path:?} must be lowercase"));
    }
    if let Some(component) = path.split('/').find(|c| !is_path_component(c)) {
        return bad(&format!(
            "{component:?} must be lowercase letters and digits, separated by one '.', one or two '_', or '-'s \
             (as in \"a_b__c-d.e\"), between '/'s"
        ));
    }
    let full = completed_len(domain, path);
    if full > NAME_TOTAL_LENGTH_MAX {
        return bad(&format!("the name is {full} characters as Docker completes it; at most {NAME_TOTAL_LENGTH_MAX}"));
    }
    if let Some(tag) = tag {
        if !is_tag(tag) {
            return bad(&format!(
                "tag {tag:?} must be 1-{TAG_LENGTH_MAX} letters, digits, '_', '.' or '-', not starting with '.' or '-'"
            ));
        }
    }
    if let Some(digest) = digest {
        check_digest(digest).or_else(|why| bad(&why))?;
    }
    Ok(())
}

/// Docker's split of a name into its domain (None: Docker Hub's) and its path.
fn split_domain(name: &str) -> (Option<&str>, &str) {
    match name.split_once('/') {
        Some((first, rest))
            if first == "localhost" || first.contains(['.', ':']) || first.bytes().any(|b| b.is_ascii_uppercase()) =>
        {
            (Some(first), rest)
        }
        _ => (None, name),
    }
}

/// The name's length as Docker completes it: `busybox` is `docker.io/library/busybox`.
fn completed_len(domain: Option<&str>, path: &str) -> usize {
    match domain {
        Some("index.docker.io") | None if !path.contains('/') => "docker.io/library/".len() + path.len(),
        Some("index.docker.io") | None => "docker.io/".len() + path.len(),
        Some(d) => d.len() + 1 + path.len(),
    }
}

/// `host[:port]`: labels of letters, digits and inner '-' joined by '.', or `[` hex and ':' `]`.
fn is_domain(domain: &str) -> bool {
    let (host, port) = match domain.rsplit_once(':') {
        // An IPv6 address's own ':'s are inside its brackets.
        Some((h, p)) if !p.contains(']') => (h, Some(p)),
        _ => (domain, None),
    };
    if port.is_some_and(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit())) {
        return false;
    }
    if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return !inner.is_empty() && inner.bytes().all(|b| b.is_ascii_hexdigit() || b == b':');
    }
    host.split('.').all(|label| {
        !label.is_empty()
            && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    })
}

/// `[a-z0-9]+` runs joined by one '.', one '_', "__", or any number of '-'.
fn is_path_component(component: &str) -> bool {
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let bytes = component.as_bytes();
    if bytes.first().is_none_or(|&b| !alnum(b)) || bytes.last().is_none_or(|&b| !alnum(b)) {
        return false;
    }
    let mut i = 0;
    while i < bytes.len() {
        if alnum(bytes[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && !alnum(bytes[i]) {
            i += 1;
        }
        let separator = &component[start..i];
        if !(matches!(separator, "." | "_" | "__") || separator.bytes().all(|b| b == b'-')) {
            return false;
        }
    }
    true
}

fn is_tag(tag: &str) -> bool {
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    !tag.is_empty()
        && tag.len() <= TAG_LENGTH_MAX
        && word(tag.as_bytes()[0])
        && tag.bytes().all(|b| word(b) || b == b'.' || b == b'-')
}

/// `algorithm:hex`, of an algorithm the engine checks (go-digest's: sha256, sha384, sha512).
fn check_digest(digest: &str) -> Result<(), String> {
    let Some((algorithm, hex)) = digest.split_once(':') else {
        return Err(format!("digest {digest:?} must be algorithm:hex (sha256:<64 hex digits>)"));
    };
    let length = match algorithm {
        "sha256" => 64,
        "sha384" => 96,
        "sha512" => 128,
        _ => return Err(format!("digest algorithm {algorithm:?} is not sha256, sha384 or sha512")),
    };
    if hex.len() != length || !hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return Err(format!("a {algorithm} digest is {length} lowercase hex digits, not {hex:?}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check;

    fn sha256() -> String {
        "0123456789abcdef".repeat(4)
    }

    #[test]
    fn references_docker_takes_pass() {
        let digest = sha256();
        for ok in [
            "busybox".to_string(),
            "busybox:1.36".into(),
            "busybox:latest".into(),
            "library/busybox".into(),
            "localhost/img".into(),
            "localhost:5000/a/b:tag".into(),
            "127.0.0.1:5000/tiny:v1".into(),
            "[::1]:5000/tiny".into(),
            "[fe80::1]/tiny:v1".into(),
            format!("registry.example.com/ns/img@sha256:{digest}"),
            format!("busybox:1.36@sha256:{digest}"),
            format!("busybox@sha512:{}", "ab".repeat(64)),
            "a_b__c-d.e".into(),
            "a---b".into(),
            "Registry.Example.com/x".into(),
            // Docker takes an uppercase first component for a domain.
            "Uppercase/lowercase:tag".into(),
            "example.com:443/ns/img:V1.2_rc-3".into(),
            format!("img:{}", "t".repeat(128)),
            "a".repeat(255 - "docker.io/library/".len()),
        ] {
            assert_eq!(check(&ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn references_docker_refuses_say_why() {
        let digest = sha256();
        for (bad, why) in [
            ("", "is required"),
            ("busy box:1", "must be lowercase letters and digits"),
            ("BusyBox:Latest", "repository name \"BusyBox\" must be lowercase"),
            ("busybox:tag:extra@@", "one '@' at most"),
            ("busybox:tag:extra", "one ':' at most"),
            ("busybox:tag@", "digest \"\" must be algorithm:hex"),
            ("  ", "is required"),
            ("busybox ", "\"busybox \" must be"),
            ("a//b", "must be lowercase letters and digits"),
            ("a:", "tag \"\" must be"),
            ("a-", "\"a-\" must be lowercase"),
            ("-a", "\"-a\" must be lowercase"),
            ("a..b", "\"a..b\" must be"),
            ("a___b", "\"a___b\" must be"),
            ("a/", "\"\" must be"),
            ("/a", "\"\" must be"),
            (":tag", "no repository name"),
            ("example.com/", "no repository name"),
            ("exa_mple.com/x", "registry \"exa_mple.com\" must be"),
            ("-example.com/x", "registry \"-example.com\""),
            ("example.com:/x", "registry \"example.com:\""),
            ("example.com:8o/x", "registry \"example.com:8o\""),
            ("[zz::1]/x", "registry \"[zz::1]\""),
            ("example.com/Img", "repository name \"Img\" must be lowercase"),
            ("img:.tag", "tag \".tag\""),
            ("img:ta/g", "registry \"img:ta\""),
            ("img@sha256:abc", "a sha256 digest is 64 lowercase hex digits"),
            ("img@md5:0123456789abcdef0123456789abcdef", "digest algorithm \"md5\""),
            ("img@sha256", "digest \"sha256\" must be algorithm:hex"),
        ] {
            let e = check(bad).expect_err(bad);
            assert!(e.contains(why), "{bad:?}: {e}");
        }
        assert!(check(&sha256()).unwrap_err().contains("64-hex"));
        assert!(check(&format!("img@sha256:{}", digest.to_uppercase())).unwrap_err().contains("lowercase hex"));
        assert!(check(&format!("img:{}", "t".repeat(129))).unwrap_err().contains("tag"));
        assert!(check(&"a".repeat(256 - "docker.io/library/".len())).unwrap_err().contains("at most 255"));
        assert!(check(&format!("ns/{}", "a".repeat(256 - "docker.io/ns/".len()))).unwrap_err().contains("at most"));
    }
}
