//! Quantities of cpu and memory as specs and the config write them, and the requests an
//! instance makes of its host (issue 25; docs/spec.md, "Requests and limits").
//!
//! A quantity is a seed-000 number or a Kubernetes quantity, in every place cpu or memory is
//! written:
//! - cpu: cores (`"2"`, `0.5`) or thousandths of a core (`"100m"`);
//! - memory: a bare number is MiB, as seed 000 has it (where Kubernetes reads bytes: the seed
//!   wins); with a suffix, bytes: `Ki Mi Gi Ti Pi Ei` (powers of 1024) or `k M G T P E`
//!   (powers of 1000), so `"128Mi"` is 128 MiB and `"1G"` is 953.7 MiB.
//!
//! `-1` is "unlimited" where a limit is meant; a request cannot be unlimited. The parsers'
//! errors name the text and the forms it may take; the caller adds the field's path.
//!
//! Fit and admission add requests up in whole units (thousandths of a core, bytes), rounded
//! up, so that no sum of fractions can overcommit a host by a rounding error.

use serde::{Deserialize, Serialize};

/// A parsed quantity: an amount, or `-1` (unlimited).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Quantity {
    Unlimited,
    /// Cores for cpu, MiB for memory.
    Amount(f64),
}

impl Quantity {
    /// The amount, if positive (what a limit means to the cgroup).
    pub fn positive(self) -> Option<f64> {
        match self {
            Quantity::Amount(n) if n > 0.0 => Some(n),
            _ => None,
        }
    }
}

/// Cores, from `"2"`, `0.5`, `"100m"` or `"-1"`.
pub fn parse_cpu(text: &str) -> Result<Quantity, String> {
    let t = text.trim();
    if t == "-1" {
        return Ok(Quantity::Unlimited);
    }
    let (number, scale) = match t.strip_suffix('m') {
        Some(milli) => (milli, 0.001),
        None => (t, 1.0),
    };
    match plain_number(number) {
        Some(n) => Ok(Quantity::Amount(n * scale)),
        None => Err(format!("{text:?} must be a positive number of cores (or thousandths: \"100m\")")),
    }
}

/// MiB, from `"512"` (MiB, seed 000), `"128Mi"`, `"1Gi"`, `"500M"` or `"-1"`.
pub fn parse_memory(text: &str) -> Result<Quantity, String> {
    let t = text.trim();
    if t == "-1" {
        return Ok(Quantity::Unlimited);
    }
    const SUFFIXES: [(&str, f64); 12] = [
        ("Ki", 1024.0),
        ("Mi", 1048576.0),
        ("Gi", 1073741824.0),
        ("Ti", 1099511627776.0),
        ("Pi", 1125899906842624.0),
        ("Ei", 1152921504606846976.0),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
        ("E", 1e18),
    ];
    let bad =
        || format!("{text:?} must be a positive number of MiB (or bytes with a unit: \"128Mi\", \"1Gi\", \"500M\")");
    if t.ends_with('m') && !t.ends_with("Mi") {
        return Err(format!("{text:?}: m would be thousandths of a byte; MiB is \"Mi\" (or a bare number)"));
    }
    for (suffix, bytes) in SUFFIXES {
        if let Some(number) = t.strip_suffix(suffix) {
            return plain_number(number).map(|n| Quantity::Amount(n * bytes / 1048576.0)).ok_or_else(bad);
        }
    }
    plain_number(t).map(Quantity::Amount).ok_or_else(bad)
}

/// A finite, non-negative decimal number (an exponent allowed, as Kubernetes allows).
fn plain_number(text: &str) -> Option<f64> {
    let starts_well = text.chars().next().is_some_and(|c| c.is_ascii_digit() || c == '.');
    let n: f64 = text.parse().ok()?;
    (starts_well && n.is_finite() && n >= 0.0).then_some(n)
}

/// What an instance (or a sum of instances) asks of its host: thousandths of a core and bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Requests {
    pub milli_cpu: u64,
    pub memory_bytes: u64,
}

impl Requests {
    /// From cores and MiB, each rounded up to the next whole unit ("700m" read as 0.7 cores is
    /// 700.0000000000001 thousandths in floating point: that is 700, not 701).
    pub fn of(cpu_cores: f64, memory_mib: f64) -> Requests {
        let whole = |x: f64| {
            let near = x.round();
            if (x - near).abs() < 1e-6 {
                near.max(0.0) as u64
            } else {
                x.ceil().max(0.0) as u64
            }
        };
        Requests { milli_cpu: whole(cpu_cores * 1000.0), memory_bytes: whole(memory_mib * 1048576.0) }
    }

    pub fn is_zero(&self) -> bool {
        *self == Requests::default()
    }

    pub fn plus(self, other: Requests) -> Requests {
        Requests {
            milli_cpu: self.milli_cpu.saturating_add(other.milli_cpu),
            memory_bytes: self.memory_bytes.saturating_add(other.memory_bytes),
        }
    }

    pub fn times(self, n: u64) -> Requests {
        Requests { milli_cpu: self.milli_cpu.saturating_mul(n), memory_bytes: self.memory_bytes.saturating_mul(n) }
    }

    pub fn minus(self, other: Requests) -> Requests {
        Requests {
            milli_cpu: self.milli_cpu.saturating_sub(other.milli_cpu),
            memory_bytes: self.memory_bytes.saturating_sub(other.memory_bytes),
        }
    }

    /// The first resource of `self` that does not fit in `room`, with both amounts as text.
    pub fn exceeds(&self, room: &Requests) -> Option<Shortfall> {
        if self.milli_cpu > room.milli_cpu {
            return Some(Shortfall {
                resource: "cpu",
                wanted: cpu_text(self.milli_cpu),
                free: cpu_text(room.milli_cpu),
            });
        }
        if self.memory_bytes > room.memory_bytes {
            return Some(Shortfall {
                resource: "memory",
                wanted: memory_text(self.memory_bytes),
                free: memory_text(room.memory_bytes),
            });
        }
        None
    }
}

/// What this host offers instances: what it has (online cpus, physical memory) and what the
/// config keeps back (`reserved_cpu`, `reserved_memory`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct HostResources {
    pub capacity: Requests,
    pub reserved: Requests,
}

impl HostResources {
    /// This host's online cpus and physical memory, less `reserved`.
    pub fn detect(reserved: Requests) -> HostResources {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
        // SAFETY: sysconf only reads system values.
        let (pages, page) = unsafe { (libc::sysconf(libc::_SC_PHYS_PAGES), libc::sysconf(libc::_SC_PAGESIZE)) };
        let memory_bytes = (pages.max(0) as u64).saturating_mul(page.max(0) as u64);
        HostResources { capacity: Requests { milli_cpu: cpus * 1000, memory_bytes }, reserved }
    }

    /// What instances' requests may add up to.
    pub fn allocatable(&self) -> Requests {
        self.capacity.minus(self.reserved)
    }
}

/// One resource that does not fit: what is asked and what is free, as a person reads them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shortfall {
    pub resource: &'static str,
    pub wanted: String,
    pub free: String,
}

impl std::fmt::Display for Shortfall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "not enough {}: {} requested, {} free", self.resource, self.wanted, self.free)
    }
}

/// `1500` → `"1.5 cores"`; `100` → `"100m cores"`.
pub fn cpu_text(milli: u64) -> String {
    if milli == 1000 {
        "1 core".into()
    } else if milli % 1000 == 0 {
        format!("{} cores", milli / 1000)
    } else if milli > 1000 {
        let text = format!("{:.3}", milli as f64 / 1000.0);
        format!("{} cores", text.trim_end_matches('0'))
    } else {
        format!("{milli}m cores")
    }
}

/// Bytes as MiB (or GiB from 10 GiB on), as the spec writes memory.
pub fn memory_text(bytes: u64) -> String {
    let mib = bytes as f64 / 1048576.0;
    if mib >= 10240.0 {
        format!("{:.1} GiB", mib / 1024.0)
    } else if mib.fract() == 0.0 {
        format!("{mib:.0} MiB")
    } else {
        format!("{mib:.1} MiB")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_become_exact_whole_units() {
        for (text, milli) in [("700m", 700), ("0.7", 700), ("100m", 100), ("0.1", 100), ("1.5", 1500), ("0.0005", 1)] {
            let cores = match parse_cpu(text).unwrap() {
                Quantity::Amount(c) => c,
                Quantity::Unlimited => unreachable!(),
            };
            assert_eq!(Requests::of(cores, 0.0).milli_cpu, milli, "{text}");
        }
    }

    #[test]
    fn cpu_takes_seed_numbers_and_millicores() {
        assert_eq!(parse_cpu("2"), Ok(Quantity::Amount(2.0)));
        assert_eq!(parse_cpu(" 0.5 "), Ok(Quantity::Amount(0.5)));
        assert_eq!(parse_cpu("100m"), Ok(Quantity::Amount(0.1)));
        assert_eq!(parse_cpu("-1"), Ok(Quantity::Unlimited));
        for bad in ["", "-2", "two", "1.5x", "m", "NaN", "inf", "-0.5", "1Gi"] {
            assert!(parse_cpu(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn memory_bare_numbers_are_mib_and_units_are_bytes() {
        assert_eq!(parse_memory("512"), Ok(Quantity::Amount(512.0)));
        assert_eq!(parse_memory("128Mi"), Ok(Quantity::Amount(128.0)));
        assert_eq!(parse_memory("1Gi"), Ok(Quantity::Amount(1024.0)));
        assert_eq!(parse_memory("512Ki"), Ok(Quantity::Amount(0.5)));
        assert_eq!(parse_memory("1G"), Ok(Quantity::Amount(1e9 / 1048576.0)));
        assert_eq!(parse_memory("1e3M"), Ok(Quantity::Amount(1e9 / 1048576.0)));
        assert_eq!(parse_memory("-1"), Ok(Quantity::Unlimited));
        assert!(parse_memory("128m").unwrap_err().contains("\"Mi\""));
        for bad in ["", "Mi", "-5", "1.2.3Gi", "12 Gi", "1Xi"] {
            assert!(parse_memory(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn requests_round_up_and_name_the_short_resource() {
        let r = Requests::of(0.1, 0.5);
        assert_eq!(r, Requests { milli_cpu: 100, memory_bytes: 524288 });
        // Three times a tenth is three tenths exactly: no rounding error can overcommit.
        assert_eq!(Requests::of(0.1, 0.0).times(3), Requests::of(0.3, 0.0));
        let room = Requests::of(1.0, 256.0);
        assert_eq!(Requests::of(0.5, 128.0).exceeds(&room), None);
        let short = Requests::of(1.5, 128.0).exceeds(&room).unwrap();
        assert_eq!(short.to_string(), "not enough cpu: 1.5 cores requested, 1 core free");
        let short = Requests::of(0.5, 512.0).exceeds(&room).unwrap();
        assert_eq!(short.to_string(), "not enough memory: 512 MiB requested, 256 MiB free");
        assert_eq!(cpu_text(250), "250m cores");
    }
}
