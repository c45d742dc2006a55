//! The light suffix stemmer of tool-search.md §5.

use crate::text::utf16_len;

/// Words returned unchanged by the stemmer (step 1).
pub const STEM_EXCEPTIONS: [&str; 15] = [
    "news", "status", "alias", "canvas", "focus", "bonus", "virus", "atlas", "lens", "axis",
    "basis", "analysis", "gas", "bus", "plus",
];

fn is_protected(t: &str) -> bool {
    t.len() <= 3 && utf16_len(t) <= 3
        || matches!(
            t,
            "news"
                | "status"
                | "alias"
                | "canvas"
                | "focus"
                | "bonus"
                | "virus"
                | "atlas"
                | "lens"
                | "axis"
                | "basis"
                | "analysis"
                | "gas"
                | "bus"
                | "plus"
        )
}

/// Stem one lower-cased token; returns one token, or two for a word ending in
/// `ies` longer than 4 characters (`cookies` → `cooky`, `cooki`).
///
/// Lengths are counted in UTF-16 code units, like the reference.
///
/// ```
/// use quickcell_catalog::stem;
/// assert_eq!(stem("running"), ["run"]);
/// assert_eq!(stem("policies"), ["policy", "polici"]);
/// assert_eq!(stem("news"), ["news"]);
/// ```
pub fn stem(t: &str) -> Vec<String> {
    let mut out = Vec::with_capacity(2);
    let mut buf = t.to_string();
    let mut alt = String::new();
    stem_each(&mut buf, &mut alt, &mut |s: &str| out.push(s.to_string()));
    out
}

/// Allocation-free core of [`stem`]: stems `t` in place (using `alt` as
/// scratch) and hands each output token to `f`.
pub(crate) fn stem_each(t: &mut String, alt: &mut String, f: &mut dyn FnMut(&str)) {
    if is_protected(t) {
        f(t);
        return;
    }
    if utf16_len(t) > 4 && t.ends_with("ies") {
        alt.clear();
        alt.push_str(&t[..t.len() - 3]);
        alt.push('y');
        f(alt);
        t.pop(); // "…ies" → "…ie"
        stem_each(t, alt, f);
        return;
    }
    stem_passes(t);
    f(t);
}

/// Suffix rules of step 3, in priority order: (suffix, replacement, undouble).
const RULES: [(&str, &str, bool); 8] = [
    ("ies", "y", false),
    ("ing", "", true),
    ("ed", "", true),
    ("ly", "", false),
    ("es", "", false),
    ("er", "", true),
    ("s", "", false),
    ("e", "", false),
];

fn stem_passes(cur: &mut String) {
    for _ in 0..3 {
        if is_protected(cur) {
            break;
        }
        // Every suffix ends in one of these bytes.
        if !matches!(
            cur.as_bytes().last(),
            Some(b's' | b'g' | b'd' | b'y' | b'r' | b'e')
        ) {
            break;
        }
        let mut applied = false;
        for (suffix, replacement, undouble) in RULES {
            if !cur.ends_with(suffix) {
                continue;
            }
            if suffix == "s" && cur.ends_with("ss") {
                continue;
            }
            let base_len = cur.len() - suffix.len();
            if utf16_len(&cur[..base_len]) < 3 {
                continue;
            }
            cur.truncate(base_len);
            cur.push_str(replacement);
            if undouble {
                undouble_end(cur);
            }
            applied = true;
            break;
        }
        if !applied {
            break;
        }
    }
}

/// Step 4: `runn` → `run`; doubled `l`, `s`, `f`, `z` and vowels stay.
fn undouble_end(s: &mut String) {
    let mut it = s.chars().rev();
    let (Some(a), Some(b)) = (it.next(), it.next()) else {
        return;
    };
    if a == b && !matches!(a, 'l' | 's' | 'f' | 'z' | 'a' | 'e' | 'i' | 'o' | 'u') {
        s.pop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(t: &str) -> String {
        let v = stem(t);
        assert_eq!(v.len(), 1, "{t} → {v:?}");
        v[0].clone()
    }

    #[test]
    fn spec_consequences() {
        assert_eq!(one("running"), "run");
        assert_eq!(one("runner"), "run");
        assert_eq!(one("calling"), "call");
        assert_eq!(one("processing"), "process");
        assert_eq!(one("scheduling"), "schedul");
        assert_eq!(one("schedule"), "schedul");
        assert_eq!(one("issues"), "issu");
        assert_eq!(one("issue"), "issu");
        assert_eq!(one("created"), "creat");
        assert_eq!(one("create"), "creat");
        assert_eq!(stem("cookies"), ["cooky", "cooki"]);
        assert_eq!(one("cookie"), "cooki");
        assert_eq!(stem("policies"), ["policy", "polici"]);
        assert_eq!(one("policy"), "policy");
        assert_eq!(one("news"), "news");
        assert_eq!(one("file"), "fil");
        assert_eq!(one("files"), "fil");
    }

    #[test]
    fn protected_words_and_short_tokens() {
        for w in STEM_EXCEPTIONS {
            assert!(is_protected(w), "{w}");
        }
        for w in [
            "status", "alias", "canvas", "analysis", "plus", "bus", "gas", "lens",
        ] {
            assert_eq!(one(w), w);
        }
        assert_eq!(one("ads"), "ads");
        assert_eq!(one("go"), "go");
        // `ties` is 4 long: step 2 does not apply; `s` is removed (stem "tie").
        assert_eq!(one("ties"), "tie");
    }

    #[test]
    fn rule_details() {
        // `s` is not removed after `ss`.
        assert_eq!(one("process"), "process");
        assert_eq!(one("class"), "class");
        // Doubled l/s/f/z and vowels are kept after ing/ed/er.
        assert_eq!(one("filling"), "fill");
        assert_eq!(one("passed"), "pass");
        assert_eq!(one("stuffed"), "stuff");
        assert_eq!(one("buzzer"), "buzz");
        assert_eq!(one("seeing"), "see");
        assert_eq!(one("agreed"), "agr");
        assert_eq!(one("stopped"), "stop");
        // Up to three passes.
        assert_eq!(one("quickly"), "quick");
        assert_eq!(one("lovingly"), "lov");
        // Non-Latin text is returned whole.
        assert_eq!(one("価格を調べて"), "価格を調べて");
    }
}
