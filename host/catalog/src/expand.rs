//! Query processing: literal tokens plus weighted expansion terms
//! (tool-search.md §6.1).

use crate::text::safe_cut_bytes;
use crate::tokenize::{for_each_word, is_word_char, tokenize, word_tokens, TokenScratch};
use std::collections::HashSet;

/// Weight of a term added by expansion (a literal query token weighs 1).
pub const EXPANSION_WEIGHT: f64 = 0.35;

/// The expansion table: (trigger words, added terms). `say` triggers two rows.
pub const EXPANSIONS: [(&[&str], &[&str]); 10] = [
    (
        &["look", "lookup", "google", "research"],
        &["search", "web", "find"],
    ),
    (
        &[
            "current", "today", "latest", "now", "recent", "news", "price", "weather",
        ],
        &["search", "web"],
    ),
    (
        &["url", "link", "page", "article", "site", "website"],
        &["fetch", "web", "browse"],
    ),
    (
        &[
            "remember",
            "recall",
            "memory",
            "earlier",
            "previously",
            "discussed",
            "decided",
        ],
        &["memory", "recall", "history"],
    ),
    (
        &[
            "remind",
            "reminder",
            "later",
            "tomorrow",
            "daily",
            "weekly",
            "recurring",
        ],
        &["schedule", "automations", "cron", "reminder"],
    ),
    (
        &["say", "tell", "reply", "respond", "answer"],
        &["message", "send"],
    ),
    (&["picture", "photo", "meme", "screenshot"], &["image"]),
    (&["speak", "say", "voice"], &["audio", "speech"]),
    (
        &["run", "execute", "command", "shell", "terminal"],
        &["exec", "process"],
    ),
    (&["directory", "folder", "path"], &["file", "list"]),
];

/// Singularize a query word for trigger lookup: words of 4 characters or
/// fewer stay; a longer word ending in `ies` swaps it for `y`; a longer word
/// ending in a single `s` (not `ss`) drops it.
pub fn singularize(word: &str) -> String {
    if crate::text::utf16_len(word) <= 4 {
        return word.to_string();
    }
    if let Some(base) = word.strip_suffix("ies") {
        return format!("{base}y");
    }
    if word.ends_with('s') && !word.ends_with("ss") {
        return word[..word.len() - 1].to_string();
    }
    word.to_string()
}

/// One weighted query term.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryTerm {
    /// The stemmed token.
    pub term: String,
    /// 1.0 for literal tokens, [`EXPANSION_WEIGHT`] for added ones.
    pub weight: f64,
}

/// Most UTF-8 bytes of a search query that are looked at (bytes).
///
/// Search is best-effort ranking, so a longer query is not rejected: it is
/// cut to its first `MAX_QUERY_BYTES` bytes (on a character boundary; a word
/// the cut would split is dropped whole) and the rest is ignored, for the
/// exact-name match, the literal terms and the expansion alike. See
/// [`cut_query`]. Ordinary queries are a few dozen bytes; the structured
/// `tool_search` already rejects queries over
/// [`crate::BATCH_MAX_QUERY_BYTES`].
pub const MAX_QUERY_BYTES: usize = 4_096;

/// Most distinct literal terms of a search query that are scored (terms).
///
/// Terms are taken in query order; once this many distinct literal terms are
/// collected, the remaining terms of the word that reached the cap are
/// dropped and every later word is ignored (neither scored nor expanded). Expansion adds at most the
/// fixed, small set of [`EXPANSIONS`] terms on top, so a weighted query never
/// has more than `MAX_QUERY_TERMS` plus that many terms, and scoring touches
/// at most that many posting lists.
pub const MAX_QUERY_TERMS: usize = 128;

/// The part of `query` that search looks at: the whole query when it is at
/// most [`MAX_QUERY_BYTES`] bytes long, otherwise its longest prefix of at
/// most that many bytes that ends on a character boundary and does not end
/// inside a word (a word the cut would split is dropped whole). Linear in
/// [`MAX_QUERY_BYTES`], whatever the length of `query`.
///
/// ```
/// use quickcell_catalog::{cut_query, MAX_QUERY_BYTES};
/// assert_eq!(cut_query("look up the price"), "look up the price");
/// let long = "ab ".repeat(MAX_QUERY_BYTES);
/// assert!(cut_query(&long).len() <= MAX_QUERY_BYTES);
/// assert!(cut_query(&long).ends_with("ab "));
/// ```
pub fn cut_query(query: &str) -> &str {
    if query.len() <= MAX_QUERY_BYTES {
        return query;
    }
    let cut = safe_cut_bytes(query, MAX_QUERY_BYTES);
    let next_is_word = query[cut.len()..].chars().next().is_some_and(is_word_char);
    if !next_is_word {
        return cut;
    }
    // Drop the partial word at the end of the cut.
    match cut.char_indices().rev().find(|&(_, c)| !is_word_char(c)) {
        Some((i, c)) => &cut[..i + c.len_utf8()],
        None => "",
    }
}

/// Build the weighted query `Q = {(term, w)}` for `query`: the distinct
/// literal tokens (weight 1, in first-seen order) followed by the distinct
/// added tokens that are not literal (weight 0.35; several rows adding the same
/// token still count it once).
///
/// Only the first [`MAX_QUERY_BYTES`] bytes of the query ([`cut_query`]) and
/// its first [`MAX_QUERY_TERMS`] distinct literal terms are used, so the work
/// and the result are bounded whatever the query's length; de-duplication is
/// hash-based, so the work is linear in the part of the query used.
///
/// ```
/// use quickcell_catalog::weighted_query;
/// let q = weighted_query("look up the price");
/// let w = |t: &str| q.iter().find(|x| x.term == t).map(|x| x.weight);
/// assert_eq!(w("search"), Some(0.35));
/// assert_eq!(w("pric"), Some(1.0));
/// ```
pub fn weighted_query(query: &str) -> Vec<QueryTerm> {
    let query = cut_query(query);
    let mut terms: Vec<QueryTerm> = Vec::new();
    let mut literal: HashSet<String> = HashSet::new();
    // Added tokens in first-seen order, each once (a subset of the fixed
    // expansion table's terms).
    let mut added: Vec<String> = Vec::new();
    let mut added_seen: HashSet<String> = HashSet::new();
    let mut scratch = TokenScratch::default();
    let mut full = false;
    for_each_word(query, |word| {
        if full {
            return;
        }
        word_tokens(word, &mut scratch, &mut |t: &str| {
            if terms.len() < MAX_QUERY_TERMS && !literal.contains(t) {
                literal.insert(t.to_string());
                terms.push(QueryTerm {
                    term: t.to_string(),
                    weight: 1.0,
                });
            }
        });
        // Expansion (tool-search.md §6.1): the lower-cased whole word,
        // singularized, against the trigger lists.
        let single = singularize(&word.to_lowercase());
        for (triggers, adds) in EXPANSIONS {
            if triggers.contains(&single.as_str()) {
                for a in adds {
                    for t in tokenize(a) {
                        if added_seen.insert(t.clone()) {
                            added.push(t);
                        }
                    }
                }
            }
        }
        full = terms.len() >= MAX_QUERY_TERMS;
    });
    for t in added {
        if !literal.contains(&t) {
            terms.push(QueryTerm {
                term: t,
                weight: EXPANSION_WEIGHT,
            });
        }
    }
    terms
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenize::is_stopword;

    fn weight(q: &[QueryTerm], t: &str) -> Option<f64> {
        q.iter().find(|x| x.term == t).map(|x| x.weight)
    }

    #[test]
    fn expansion_words_are_not_stopwords() {
        // The stopword list deliberately contains no trigger or added term.
        for (triggers, added) in EXPANSIONS {
            for w in triggers.iter().chain(added.iter()) {
                assert!(!is_stopword(w), "{w} is an expansion word");
            }
        }
    }

    #[test]
    fn singularize_rules() {
        assert_eq!(singularize("news"), "news");
        assert_eq!(singularize("prices"), "price");
        assert_eq!(singularize("reminders"), "reminder");
        assert_eq!(singularize("new"), "new");
        assert_eq!(singularize("policies"), "policy");
        assert_eq!(singularize("address"), "address");
        assert_eq!(singularize("runs"), "runs");
    }

    #[test]
    fn expansion_weights() {
        let q = weighted_query("look up the price");
        assert_eq!(weight(&q, "search"), Some(0.35));
        assert_eq!(weight(&q, "web"), Some(0.35));
        assert_eq!(weight(&q, "find"), Some(0.35));
        assert_eq!(weight(&q, "pric"), Some(1.0));
        assert_eq!(weight(&q, "look"), Some(1.0));
        assert_eq!(weight(&q, "the"), None);
        // `search` is added by two rows but appears once.
        assert_eq!(q.iter().filter(|x| x.term == "search").count(), 1);

        let q = weighted_query("open a new issue");
        assert_eq!(weight(&q, "search"), None);
        assert!(q.iter().all(|x| x.weight == 1.0));

        // A token both literal and added keeps weight 1.
        let q = weighted_query("search the latest news");
        assert_eq!(weight(&q, "search"), Some(1.0));
        assert_eq!(weight(&q, "web"), Some(0.35));

        // `say` triggers two rows; plural triggers are singularized.
        let q = weighted_query("say");
        for t in ["messag", "send", "audio", "speech"] {
            assert_eq!(weight(&q, t), Some(0.35), "{t}");
        }
        let q = weighted_query("reminders");
        assert_eq!(weight(&q, "remind"), Some(1.0));
        assert_eq!(weight(&q, "cron"), Some(0.35));
        assert_eq!(weight(&q, "schedul"), Some(0.35));

        // Stopword-only and non-English queries yield nothing to score.
        assert!(weighted_query("the and with").is_empty());
        assert_eq!(weighted_query("価格を調べて").len(), 1);
    }
}
