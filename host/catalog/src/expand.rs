//! Query processing: literal tokens plus weighted expansion terms
//! (tool-search.md §6.1).

use crate::tokenize::{query_words, tokenize, tokenize_into};

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

/// Build the weighted query `Q = {(term, w)}` for `query`: the distinct
/// literal tokens (weight 1, in first-seen order) followed by the distinct
/// added tokens that are not literal (weight 0.35; several rows adding the same
/// token still count it once).
///
/// ```
/// use quickcell_catalog::weighted_query;
/// let q = weighted_query("look up the price");
/// let w = |t: &str| q.iter().find(|x| x.term == t).map(|x| x.weight);
/// assert_eq!(w("search"), Some(0.35));
/// assert_eq!(w("pric"), Some(1.0));
/// ```
pub fn weighted_query(query: &str) -> Vec<QueryTerm> {
    let mut terms: Vec<QueryTerm> = Vec::new();
    for t in tokenize(query) {
        if !terms.iter().any(|x| x.term == t) {
            terms.push(QueryTerm {
                term: t,
                weight: 1.0,
            });
        }
    }
    let mut added = Vec::new();
    for word in query_words(query) {
        let single = singularize(&word);
        for (triggers, adds) in EXPANSIONS {
            if triggers.contains(&single.as_str()) {
                for a in adds {
                    tokenize_into(a, &mut added);
                }
            }
        }
    }
    for t in added {
        if !terms.iter().any(|x| x.term == t) {
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

    fn weight(q: &[QueryTerm], t: &str) -> Option<f64> {
        q.iter().find(|x| x.term == t).map(|x| x.weight)
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
