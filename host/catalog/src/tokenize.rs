//! The tokenizer shared by documents and queries (tool-search.md §3), the
//! stopword list (§4) and the query-word helper used by expansion (§6.1).

use crate::stem::stem_each;
use regex::Regex;
use std::sync::OnceLock;

/// The fixed English stopword list (tool-search.md §4): 57 common function
/// words. Compared against the lower-cased token before stemming.
///
/// It deliberately contains none of `get`, the expansion triggers and added
/// terms, or common tool verbs and nouns (`read`, `open`, `find`, `search`,
/// `list`, `run`, `send`, `new`, `file`).
pub const STOPWORDS: [&str; 57] = [
    "a", "about", "all", "an", "and", "any", "are", "as", "at", "be", "been", "but", "by", "can",
    "did", "do", "does", "for", "from", "has", "have", "i", "if", "in", "into", "is", "it", "its",
    "me", "my", "no", "not", "of", "on", "or", "our", "so", "such", "that", "the", "their", "them",
    "then", "there", "these", "they", "this", "to", "was", "we", "were", "what", "which", "will",
    "with", "you", "your",
];

/// Whether `token` (already lower-cased) is a stopword.
pub fn is_stopword(token: &str) -> bool {
    // No stopword is longer than 5 bytes.
    token.len() <= 5
        && matches!(
            token,
            "a" | "about"
                | "all"
                | "an"
                | "and"
                | "any"
                | "are"
                | "as"
                | "at"
                | "be"
                | "been"
                | "but"
                | "by"
                | "can"
                | "did"
                | "do"
                | "does"
                | "for"
                | "from"
                | "has"
                | "have"
                | "i"
                | "if"
                | "in"
                | "into"
                | "is"
                | "it"
                | "its"
                | "me"
                | "my"
                | "no"
                | "not"
                | "of"
                | "on"
                | "or"
                | "our"
                | "so"
                | "such"
                | "that"
                | "the"
                | "their"
                | "them"
                | "then"
                | "there"
                | "these"
                | "they"
                | "this"
                | "to"
                | "was"
                | "we"
                | "were"
                | "what"
                | "which"
                | "will"
                | "with"
                | "you"
                | "your"
        )
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Class {
    /// `\p{Lu}`
    Upper,
    /// `\p{Ll}`
    Lower,
    /// Any other `\p{L}` (Lt, Lm, Lo).
    OtherLetter,
    /// `\p{N}`
    Number,
    /// `_`
    Underscore,
    /// Everything else (a word separator).
    Other,
}

impl Class {
    fn is_word(self) -> bool {
        self != Class::Other
    }
}

struct UnicodeClasses {
    upper: Regex,
    lower: Regex,
    letter: Regex,
    number: Regex,
}

fn unicode_classes() -> &'static UnicodeClasses {
    static CLASSES: OnceLock<UnicodeClasses> = OnceLock::new();
    CLASSES.get_or_init(|| UnicodeClasses {
        upper: Regex::new(r"^\p{Lu}$").expect("valid regex"),
        lower: Regex::new(r"^\p{Ll}$").expect("valid regex"),
        letter: Regex::new(r"^\p{L}$").expect("valid regex"),
        number: Regex::new(r"^\p{N}$").expect("valid regex"),
    })
}

fn classify(c: char) -> Class {
    if c.is_ascii() {
        return match c {
            'A'..='Z' => Class::Upper,
            'a'..='z' => Class::Lower,
            '0'..='9' => Class::Number,
            '_' => Class::Underscore,
            _ => Class::Other,
        };
    }
    let classes = unicode_classes();
    let mut buf = [0u8; 4];
    let s: &str = c.encode_utf8(&mut buf);
    if classes.upper.is_match(s) {
        Class::Upper
    } else if classes.lower.is_match(s) {
        Class::Lower
    } else if classes.letter.is_match(s) {
        Class::OtherLetter
    } else if classes.number.is_match(s) {
        Class::Number
    } else {
        Class::Other
    }
}

/// Whether `c` belongs to a word of tokenizer step 1 (`[\p{L}\p{N}_]`).
pub(crate) fn is_word_char(c: char) -> bool {
    classify(c).is_word()
}

/// Tokenizer step 1: split on `/[^\p{L}\p{N}_]+/u`, dropping empty words.
/// Returns the words in their original case.
pub fn split_words(text: &str) -> Vec<&str> {
    let mut words = Vec::new();
    for_each_word(text, |w| words.push(w));
    words
}

/// Calls `f` with every word of tokenizer step 1, in original case.
pub(crate) fn for_each_word<'t>(text: &'t str, mut f: impl FnMut(&'t str)) {
    if text.is_ascii() {
        // Byte-level fast path: word bytes are ASCII letters, digits and `_`.
        let bytes = text.as_bytes();
        let mut start: Option<usize> = None;
        for (i, &b) in bytes.iter().enumerate() {
            if b.is_ascii_alphanumeric() || b == b'_' {
                if start.is_none() {
                    start = Some(i);
                }
            } else if let Some(s) = start.take() {
                f(&text[s..i]);
            }
        }
        if let Some(s) = start {
            f(&text[s..]);
        }
        return;
    }
    let mut start: Option<usize> = None;
    for (i, c) in text.char_indices() {
        if classify(c).is_word() {
            if start.is_none() {
                start = Some(i);
            }
        } else if let Some(s) = start.take() {
            f(&text[s..i]);
        }
    }
    if let Some(s) = start {
        f(&text[s..]);
    }
}

/// Tokenizer step 2's sub-word matcher: the matches of
/// `/\p{Lu}+s?(?![\p{Ll}])|\p{Lu}?\p{Ll}+|\p{N}+/gu` against `word`, in
/// original case (JavaScript backtracking semantics reproduced exactly).
pub fn split_parts(word: &str) -> Vec<&str> {
    let mut chars = Vec::new();
    let mut ranges = Vec::new();
    part_ranges(word, &mut chars, &mut ranges);
    ranges.into_iter().map(|(a, b)| &word[a..b]).collect()
}

/// Byte ranges of the parts of `word`, using reusable buffers.
fn part_ranges(
    word: &str,
    chars: &mut Vec<(usize, Class, char)>,
    ranges: &mut Vec<(usize, usize)>,
) {
    chars.clear();
    ranges.clear();
    chars.extend(word.char_indices().map(|(i, c)| (i, classify(c), c)));
    let chars: &[(usize, Class, char)] = chars;
    let n = chars.len();
    let byte_at = |k: usize| if k < n { chars[k].0 } else { word.len() };
    let class_at = |k: usize| if k < n { Some(chars[k].1) } else { None };
    let not_lower_at = |k: usize| class_at(k) != Some(Class::Lower);
    let mut i = 0;
    while i < n {
        match match_at(i, n, chars, &class_at, &not_lower_at) {
            Some(e) => {
                ranges.push((byte_at(i), byte_at(e)));
                i = e;
            }
            None => i += 1,
        }
    }
}

fn match_at(
    i: usize,
    n: usize,
    chars: &[(usize, Class, char)],
    class_at: &dyn Fn(usize) -> Option<Class>,
    not_lower_at: &dyn Fn(usize) -> bool,
) -> Option<usize> {
    let c = chars[i].1;
    // Alternative 1: \p{Lu}+ s? (?![\p{Ll}])
    if c == Class::Upper {
        let mut j = i;
        while j < n && chars[j].1 == Class::Upper {
            j += 1;
        }
        // Greedy: the whole upper run, then backtrack one at a time. Any
        // shorter run is followed by an upper-case letter (neither `s` nor
        // \p{Ll}), so it matches immediately.
        for k in (i + 1..=j).rev() {
            if k < n && chars[k].2 == 's' && not_lower_at(k + 1) {
                return Some(k + 1);
            }
            if not_lower_at(k) {
                return Some(k);
            }
        }
    }
    // Alternative 2: \p{Lu}? \p{Ll}+
    let mut k = i;
    if c == Class::Upper && class_at(i + 1) == Some(Class::Lower) {
        k = i + 1;
    }
    if class_at(k) == Some(Class::Lower) {
        while k < n && chars[k].1 == Class::Lower {
            k += 1;
        }
        return Some(k);
    }
    // Alternative 3: \p{N}+
    if c == Class::Number {
        let mut k = i;
        while k < n && chars[k].1 == Class::Number {
            k += 1;
        }
        return Some(k);
    }
    None
}

/// Tokenize `text` (tool-search.md §3): split into words, emit each word
/// lower-cased plus its camelCase/acronym/digit/underscore parts when there
/// are two or more, drop stopwords, stem. Duplicates are kept (they are term
/// frequencies).
///
/// ```
/// use quickcell_catalog::tokenize;
/// assert_eq!(tokenize("web_search"), ["web_search", "web", "search"]);
/// assert!(tokenize("getURLs").contains(&"url".to_string()));
/// assert!(tokenize("the and with").is_empty());
/// ```
pub fn tokenize(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    tokenize_into(text, &mut out);
    out
}

/// [`tokenize`] appending into an existing vector.
pub fn tokenize_into(text: &str, out: &mut Vec<String>) {
    let mut scratch = TokenScratch::default();
    for_each_token(text, &mut scratch, &mut |t: &str| out.push(t.to_string()));
}

/// Reusable buffers for [`for_each_token`].
#[derive(Debug, Default)]
pub(crate) struct TokenScratch {
    lower: String,
    alt: String,
    chars: Vec<(usize, Class, char)>,
    ranges: Vec<(usize, usize)>,
}

fn lower_into(word: &str, buf: &mut String) {
    buf.clear();
    if word.is_ascii() {
        buf.push_str(word);
        buf.make_ascii_lowercase();
    } else {
        buf.push_str(&word.to_lowercase());
    }
}

/// Allocation-light core of [`tokenize`]: hands every output token to `f`.
pub(crate) fn for_each_token(text: &str, scratch: &mut TokenScratch, f: &mut dyn FnMut(&str)) {
    for_each_word(text, |word| word_tokens(word, scratch, f));
}

/// The tokens of one word of tokenizer step 1 (the word in original case):
/// the lower-cased word plus its parts when there are two or more, minus
/// stopwords, stemmed. Tokenization is word by word, so the tokens of a
/// text are the concatenation of the tokens of its words.
pub(crate) fn word_tokens(word: &str, scratch: &mut TokenScratch, f: &mut dyn FnMut(&str)) {
    let TokenScratch {
        lower,
        alt,
        chars,
        ranges,
    } = scratch;
    lower_into(word, lower);
    emit(lower, alt, f);
    // An all-lower-case ASCII word is a single part: nothing to split.
    if word.bytes().all(|b| b.is_ascii_lowercase()) {
        return;
    }
    part_ranges(word, chars, ranges);
    if ranges.len() >= 2 {
        for &(a, b) in ranges.iter() {
            lower_into(&word[a..b], lower);
            emit(lower, alt, f);
        }
    }
}

fn emit(lower: &mut String, alt: &mut String, f: &mut dyn FnMut(&str)) {
    if is_stopword(lower) {
        return;
    }
    stem_each(lower, alt, f);
}

/// The query words used by expansion (tool-search.md §6.1): the lower-cased
/// whole words of tokenizer step 2, before stopword removal.
pub fn query_words(text: &str) -> Vec<String> {
    split_words(text)
        .into_iter()
        .map(str::to_lowercase)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn has(tokens: &[String], t: &str) -> bool {
        tokens.iter().any(|x| x == t)
    }

    #[test]
    fn stopword_list_shape() {
        assert_eq!(STOPWORDS.len(), 57);
        let mut sorted = STOPWORDS.to_vec();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted, STOPWORDS.to_vec(), "sorted and unique");
        // The fast matcher and the published list agree.
        for w in STOPWORDS {
            assert!(is_stopword(w), "{w}");
        }
        for w in ["abouts", "ab", "thei", "", "The"] {
            assert!(!is_stopword(w), "{w}");
        }
        for w in ["a", "an", "and", "the", "with", "do", "your"] {
            assert!(is_stopword(w), "{w} must be a stopword");
        }
        for w in [
            "get", "read", "open", "find", "search", "list", "run", "send", "new", "file",
        ] {
            assert!(!is_stopword(w), "{w} must not be a stopword");
        }
    }

    #[test]
    fn splits_words_on_unicode_classes() {
        assert_eq!(
            split_words("web_search, read-file!"),
            ["web_search", "read", "file"]
        );
        assert_eq!(split_words("価格を調べて"), ["価格を調べて"]);
        assert_eq!(split_words("  "), Vec::<&str>::new());
        assert_eq!(split_words("café 42x"), ["café", "42x"]);
    }

    #[test]
    fn camel_case_acronym_digit_parts() {
        assert_eq!(split_parts("getURLs"), ["get", "URLs"]);
        assert_eq!(split_parts("getOAuthToken"), ["get", "O", "Auth", "Token"]);
        assert_eq!(split_parts("web_search"), ["web", "search"]);
        assert_eq!(split_parts("HTTPServer"), ["HTTP", "Server"]);
        assert_eq!(split_parts("URLsx"), ["UR", "Lsx"]);
        assert_eq!(split_parts("file2pdf"), ["file", "2", "pdf"]);
        assert_eq!(split_parts("ÉtéCafé"), ["Été", "Café"]);
        assert_eq!(split_parts("価格"), Vec::<&str>::new());
        assert_eq!(split_parts("read"), ["read"]);
    }

    #[test]
    fn tokenizer_examples() {
        assert_eq!(tokenize("web_search"), ["web_search", "web", "search"]);
        assert_eq!(
            tokenize("getURLs"),
            ["geturl", "get", "url"],
            "getURLs → geturls, get, urls (stemmed)"
        );
        let t = tokenize("getOAuthToken");
        assert_eq!(t, ["getoauthtoken", "get", "o", "auth", "token"]);
        assert!(has(&tokenize("getOAuthToken"), "auth"));
        let rf = tokenize("readFile");
        for t in tokenize("read file") {
            assert!(rf.contains(&t), "{t} missing from {rf:?}");
        }
        assert_eq!(tokenize("価格を調べて"), ["価格を調べて"]);
        assert!(tokenize("the and with").is_empty());
        assert_eq!(tokenize("running runner"), ["run", "run"]);
        assert_eq!(tokenize("processing"), ["process"]);
        // cookies/cookie and policies/policy share a token.
        let a = tokenize("cookies");
        assert!(tokenize("cookie").iter().all(|t| a.contains(t)));
        let p = tokenize("policies");
        assert!(tokenize("policy").iter().all(|t| p.contains(t)));
        // Stopwords are removed case-insensitively, also from camel parts.
        assert_eq!(tokenize("The doIt"), ["doit"]);
    }

    #[test]
    fn query_words_are_lowercased_whole_words() {
        assert_eq!(
            query_words("Look UP the_price"),
            ["look", "up", "the_price"]
        );
    }
}
