//! Text from workloads (an init step's output, labels, event reasons and messages, hook
//! values) shown on the operator's terminal (issue 51 finding 12): control characters are
//! escaped as journalctl does, so a workload cannot move the cursor, clear the screen or
//! recolour what follows ("all healthy" painted over a failure). `-o json` is left as it is.

use std::borrow::Cow;
use std::fmt::Write;

/// `s` as one line: every control character escaped as `\xNN` — C0 (newline included, tab
/// kept), DEL and C1 (U+0080–U+009F, which terminals also read as controls: 0x9b is CSI).
/// ESC itself escaped is enough to defuse a sequence: what follows it prints as plain text.
pub fn safe_line(s: &str) -> Cow<'_, str> {
    escape(s, false)
}

/// As [`safe_line`], keeping newlines: text printed over several lines (a multi-line message).
pub fn safe_text(s: &str) -> Cow<'_, str> {
    escape(s, true)
}

fn escape(s: &str, keep_newlines: bool) -> Cow<'_, str> {
    let unsafe_char = |c: char| is_control(c) && !(c == '\t' || keep_newlines && c == '\n');
    if !s.chars().any(unsafe_char) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if unsafe_char(c) {
            let _ = write!(out, "\\x{:02x}", c as u32);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// C0, DEL and C1.
fn is_control(c: char) -> bool {
    matches!(c, '\0'..='\x1f' | '\x7f'..='\u{9f}')
}

/// `println!` of text that carries workload text, escaped by [`safe_text`] (a multi-line
/// message, a spec's list of errors, keeps its lines).
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {
        println!("{}", $crate::cli::safe_text::safe_text(&format!($($arg)*)))
    };
}

/// `eprintln!`, escaped as [`say!`].
#[macro_export]
macro_rules! esay {
    ($($arg:tt)*) => {
        eprintln!("{}", $crate::cli::safe_text::safe_line(&format!($($arg)*)))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_and_c1_are_shown_escaped() {
        let painted = "failed\x1b[2J\x1b[32mall healthy\x1b[0m \u{9b}31m";
        assert_eq!(safe_line(painted), "failed\\x1b[2J\\x1b[32mall healthy\\x1b[0m \\x9b31m");
        assert_eq!(safe_line("bell\x07 nul\0 del\x7f cr\r"), "bell\\x07 nul\\x00 del\\x7f cr\\x0d");
    }

    #[test]
    fn newlines_are_kept_only_in_multi_line_text_and_tabs_always() {
        assert_eq!(safe_line("a\tb\nc"), "a\tb\\x0ac");
        assert_eq!(safe_text("a\tb\nc\x1b"), "a\tb\nc\\x1b");
    }

    #[test]
    fn plain_text_and_other_unicode_are_untouched() {
        assert!(matches!(safe_line("instance demo/web/0 — Running ✓"), Cow::Borrowed(_)));
        assert_eq!(safe_line("\u{a0}é\u{9f}"), "\u{a0}é\\x9f");
    }
}
