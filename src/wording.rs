//! Counts in messages as people say them: "once", "3 times" — never "1 times".

/// "once", or "N times".
pub fn times(n: impl Into<u64>) -> String {
    match n.into() {
        1 => "once".to_string(),
        n => format!("{n} times"),
    }
}

/// "once", or "N times in a row" (a single failure is no row).
pub fn in_a_row(n: impl Into<u64>) -> String {
    match n.into() {
        1 => "once".to_string(),
        n => format!("{n} times in a row"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn one_is_once_and_more_are_plural() {
        assert_eq!(
            (super::times(1u32), super::times(0u32), super::times(3u32)),
            ("once".into(), "0 times".into(), "3 times".into())
        );
        assert_eq!((super::in_a_row(1u32), super::in_a_row(2u32)), ("once".into(), "2 times in a row".into()));
    }
}
