//! Small text helpers shared by every surface: the fixed collation, UTF-16
//! lengths and surrogate-safe cuts.

use std::cmp::Ordering;

/// Length of `s` in UTF-16 code units (what JavaScript's `.length` counts).
///
/// Every "characters" budget in the specs is measured with this function.
pub fn utf16_len(s: &str) -> usize {
    s.chars().map(char::len_utf16).sum()
}

/// Longest prefix of `s` that is at most `max_units` UTF-16 code units long.
///
/// The cut always lands on a code point boundary, so it can never leave a lone
/// surrogate behind (a cut that would split a surrogate pair moves back).
pub fn safe_cut_utf16(s: &str, max_units: usize) -> &str {
    let mut units = 0usize;
    for (byte_idx, ch) in s.char_indices() {
        let next = units + ch.len_utf16();
        if next > max_units {
            return &s[..byte_idx];
        }
        units = next;
    }
    s
}

/// Longest prefix of `s` that is at most `max_bytes` UTF-8 bytes long, cut on a
/// code point boundary.
pub fn safe_cut_bytes(s: &str, max_bytes: usize) -> &str {
    if s.len() <= max_bytes {
        return s;
    }
    let mut end = max_bytes;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The one collation used for every name and id sort (tool-search.md §1.2):
/// compare lower-cased strings by code point, then break ties by ordinal
/// comparison of the original strings.
pub fn collate(a: &str, b: &str) -> Ordering {
    a.to_lowercase()
        .cmp(&b.to_lowercase())
        .then_with(|| a.cmp(b))
}

/// A precomputed sort key equivalent to [`collate`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct CollationKey(String, String);

impl CollationKey {
    /// Build the key for `s`.
    pub fn new(s: &str) -> Self {
        CollationKey(s.to_lowercase(), s.to_string())
    }
}

/// Collapse every run of whitespace to one space and trim the ends.
pub(crate) fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf16_lengths_and_cuts() {
        assert_eq!(utf16_len("abc"), 3);
        assert_eq!(utf16_len("🚀"), 2);
        assert_eq!(safe_cut_utf16("ab🚀c", 3), "ab");
        assert_eq!(safe_cut_utf16("ab🚀c", 4), "ab🚀");
        assert_eq!(safe_cut_utf16("ab", 10), "ab");
        assert_eq!(safe_cut_bytes("aé", 2), "a");
        assert_eq!(safe_cut_bytes("aé", 3), "aé");
    }

    #[test]
    fn collation_is_case_insensitive_then_ordinal() {
        let mut v = vec!["b", "B", "a", "A", "_x", "Z"];
        v.sort_by(|a, b| collate(a, b));
        assert_eq!(v, vec!["_x", "A", "a", "B", "b", "Z"]);
        let mut w = v.clone();
        w.sort_by_key(|s| CollationKey::new(s));
        assert_eq!(v, w);
    }
}
