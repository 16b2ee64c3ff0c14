//! The kernel's ephemeral port range (net.ipv4.ip_local_port_range): the local ports it gives
//! the host's outgoing connections, stewardd's own among them (probes, hooks, fetches). A port of
//! the configured range (`port_range_start`..`port_range_end`) inside it may be held by such a
//! connection when an instance is given it, and the instance then fails to bind. So stewardd warns
//! at start and `steward node` says so. Ports reserved from it (net.ipv4.ip_local_reserved_ports)
//! are never handed out: a range reserved so is safe, and stewardd reserves its own range there
//! at start (`reserve_port_range`, on by default), warning only when it cannot.

use std::path::Path;

pub const RANGE_FILE: &str = "/proc/sys/net/ipv4/ip_local_port_range";
pub const RESERVED_FILE: &str = "/proc/sys/net/ipv4/ip_local_reserved_ports";

/// What the kernel may give outgoing connections (the reading of this network namespace).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ephemeral {
    /// First and last port, inclusive.
    pub range: (u16, u16),
    /// Ports and ranges kept out of it.
    pub reserved: Vec<(u16, u16)>,
}

impl Ephemeral {
    /// This host's, from /proc; an error names the file. An unreadable reserved list counts as
    /// empty (the warning then errs on the side of saying too much).
    pub fn read() -> Result<Ephemeral, String> {
        let read = |path: &str| std::fs::read_to_string(Path::new(path)).map_err(|e| format!("{path}: {e}"));
        let text = read(RANGE_FILE)?;
        let range = parse_range(&text).ok_or_else(|| format!("{RANGE_FILE}: {:?} is not two ports", text.trim()))?;
        let reserved = read(RESERVED_FILE).map(|t| parse_reserved(&t)).unwrap_or_default();
        Ok(Ephemeral { range, reserved })
    }

    /// Whether a port of `range` may go to an outgoing connection: in the ephemeral range and
    /// not reserved.
    pub fn overlaps(&self, range: (u16, u16)) -> bool {
        let (low, high) = (range.0.max(self.range.0), range.1.min(self.range.1));
        low <= high && (low..=high).any(|p| !self.reserved.iter().any(|(s, e)| (*s..=*e).contains(&p)))
    }

    /// stewardd's warning at start for its configured `range`, when it overlaps.
    pub fn warning(&self, range: (u16, u16)) -> Option<String> {
        let (start, end) = range;
        let (eph_start, eph_end) = self.range;
        self.overlaps(range).then(|| {
            format!(
                "port_range_start..port_range_end {start}-{end} overlaps the kernel's ephemeral port range \
                 {eph_start}-{eph_end} (net.ipv4.ip_local_port_range, {RANGE_FILE}): the host's outgoing \
                 connections, this daemon's probes among them, may hold a port of it when an instance is given \
                 that port, which then fails to bind. Set port_range_start/port_range_end outside \
                 {eph_start}-{eph_end} (the default 31000-32000 is below Linux's default 32768-60999), or keep \
                 the kernel from it: add {start}-{end} to net.ipv4.ip_local_reserved_ports (sysctl)"
            )
        })
    }
}

/// Adds `range` to the kernel's reserved ports, keeping what is reserved already, so no
/// outgoing connection is given a port of it (a bind to it stays allowed). Only where it
/// overlaps; Ok(true) when it wrote. An error names the file and why.
pub fn reserve(range: (u16, u16)) -> Result<bool, String> {
    let ephemeral = Ephemeral::read()?;
    if !ephemeral.overlaps(range) {
        return Ok(false);
    }
    let mut items: Vec<String> = ephemeral.reserved.iter().map(|(s, e)| format!("{s}-{e}")).collect();
    items.push(format!("{}-{}", range.0, range.1));
    std::fs::write(RESERVED_FILE, items.join(",")).map_err(|e| format!("{RESERVED_FILE}: {e}"))?;
    match Ephemeral::read()?.overlaps(range) {
        false => Ok(true),
        true => Err(format!("{RESERVED_FILE}: written, but the kernel does not keep {}-{} reserved", range.0, range.1)),
    }
}

/// `32768\t60999`.
fn parse_range(text: &str) -> Option<(u16, u16)> {
    let mut ends = text.split_whitespace().map(|p| p.parse::<u16>().ok());
    match (ends.next()??, ends.next()??, ends.next()) {
        (start, end, None) if start <= end => Some((start, end)),
        _ => None,
    }
}

/// `8080,9000-9100` (empty: none); what does not parse is left out.
fn parse_reserved(text: &str) -> Vec<(u16, u16)> {
    let port = |p: &str| p.trim().parse::<u16>().ok();
    text.trim()
        .split(',')
        .filter_map(|item| match item.split_once('-') {
            Some((s, e)) => Some((port(s)?, port(e)?)),
            None => port(item).map(|p| (p, p)),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_kernels_files() {
        assert_eq!(parse_range("32768\t60999\n"), Some((32768, 60999)));
        assert_eq!(parse_range("60999 32768"), None);
        assert_eq!(parse_range("32768"), None);
        assert_eq!(parse_reserved("\n"), vec![]);
        assert_eq!(parse_reserved("8080,9000-9100\n"), vec![(8080, 8080), (9000, 9100)]);
    }

    #[test]
    fn overlaps_unless_outside_or_reserved() {
        let e = Ephemeral { range: (32768, 60999), reserved: vec![(40000, 40099)] };
        assert!(!e.overlaps((31000, 32000)), "the default range is below Linux's default");
        assert!(e.overlaps((32000, 32768)));
        assert!(e.overlaps((60999, 61000)));
        assert!(!e.overlaps((61000, 62000)));
        assert!(!e.overlaps((40000, 40099)), "reserved from the ephemeral range");
        assert!(e.overlaps((40000, 40100)));
        let warning = e.warning((40000, 40100)).unwrap();
        assert!(warning.contains("40000-40100") && warning.contains("32768-60999"), "{warning}");
        assert_eq!(e.warning((31000, 32000)), None);
    }
}
