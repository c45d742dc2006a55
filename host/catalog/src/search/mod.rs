//! The BM25 index and the search procedure (tool-search.md §7).
//!
//! [`SearchIndex`] (here) holds the postings and ranks the documents;
//! [`SearchIndexBuilder`] (`builder`) tokenizes documents into one, interning
//! their terms (`terms`).

mod builder;
mod terms;

pub use builder::SearchIndexBuilder;

use crate::expand::{cut_query, weighted_query, QueryTerm};
use crate::hashing::{FastState, HashSlots};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use terms::Terms;

/// BM25 `k1`.
pub const K1: f64 = 1.2;
/// BM25 `b`.
pub const B: f64 = 0.75;

/// One document handed to [`SearchIndex::new`], in index order.
#[derive(Debug, Clone)]
pub struct IndexDoc {
    /// Catalog id (used for `allowedIds`, exact matching and tie-breaking).
    pub id: String,
    /// Tool name (used for exact matching).
    pub name: String,
    /// Whether the entry comes from an MCP server (`includeMcp: false` drops it).
    pub mcp: bool,
    /// The document's tokens (see [`crate::tokenize`]); duplicates are term
    /// frequencies.
    pub tokens: Vec<String>,
}

/// Search-time filters; they only ever narrow the candidates.
#[derive(Debug, Clone, Copy)]
pub struct SearchFilter<'a> {
    /// Keep MCP entries (default `true`).
    pub include_mcp: bool,
    /// When given, only these catalog ids are candidates.
    pub allowed_ids: Option<&'a HashSet<String>>,
}

impl Default for SearchFilter<'_> {
    fn default() -> Self {
        SearchFilter {
            include_mcp: true,
            allowed_ids: None,
        }
    }
}

/// One ranked result of [`SearchIndex::search`].
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    /// Position of the document in index order.
    pub doc: usize,
    /// BM25 score (0 for an unscored exact match).
    pub score: f64,
    /// The trimmed query equals the name or id, case-insensitively.
    pub exact: bool,
    /// The document contains at least one weight-1 query term.
    pub matched_literal: bool,
}

/// An immutable BM25 index over documents in index order.
///
/// Statistics (`N`, `n(t)`, `avgLen`) cover every document of the index,
/// empty ones included; filters only restrict which documents are returned.
#[derive(Debug, Clone, Default)]
pub struct SearchIndex {
    ids: Vec<String>,
    mcp: Vec<bool>,
    lens: Vec<u32>,
    /// `k1 · (1 − b + b · len / avgLen)` per document.
    norm: Vec<f64>,
    avg_len: f64,
    terms: Terms,
    /// Postings in CSR form: the postings of term `t` are
    /// `post[post_start[t]..post_start[t + 1]]`, each `(doc, tf)` in doc order.
    post_start: Vec<u32>,
    post: Vec<(u32, u32)>,
    /// Lower-cased names and ids, one slot per distinct key: the key is
    /// `exact_arena[start..end]` of `exact_keys[slot]`, with its first
    /// document; further documents sharing the key are in `exact_more`.
    exact: HashSlots,
    exact_arena: String,
    exact_keys: Vec<ExactKey>,
    exact_more: HashMap<u32, Vec<u32>, FastState>,
    id_rank: Vec<u32>,
}

impl SearchIndex {
    /// Build the index. Documents keep the given order (the index order).
    pub fn new(docs: Vec<IndexDoc>) -> Self {
        let mut b = SearchIndexBuilder::with_capacity(docs.len());
        for doc in docs {
            b.add_tokens(
                doc.id,
                &doc.name,
                doc.mcp,
                doc.tokens.iter().map(String::as_str),
            );
        }
        b.finish()
    }

    /// Number of documents (`N`).
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether the index holds no documents.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Catalog id of document `doc`.
    pub fn id(&self, doc: usize) -> &str {
        &self.ids[doc]
    }

    /// Mean document length over all documents.
    pub fn avg_len(&self) -> f64 {
        self.avg_len
    }

    fn exact_key(&self, slot: u32) -> &str {
        let k = &self.exact_keys[slot as usize];
        &self.exact_arena[k.start as usize..k.end as usize]
    }

    fn exact_slot(&self, key: &str) -> Option<u32> {
        let h = self.exact.hash(key);
        self.exact.find_first(h, |slot| self.exact_key(slot) == key)
    }

    fn postings(&self, t: u32) -> &[(u32, u32)] {
        let t = t as usize;
        &self.post[self.post_start[t] as usize..self.post_start[t + 1] as usize]
    }

    /// `idf(t) = ln(1 + (N − n(t) + 0.5) / (n(t) + 0.5))`.
    pub fn idf(&self, term: &str) -> f64 {
        let nt = self.terms.get(term).map_or(0, |t| self.postings(t).len()) as f64;
        let n = self.len() as f64;
        (1.0 + (n - nt + 0.5) / (nt + 0.5)).ln()
    }

    /// Score every document against a weighted query. Returns
    /// `(doc, score, matchedLiteral)` for each document with a score > 0, in
    /// index order.
    pub fn score(&self, query: &[QueryTerm]) -> Vec<(usize, f64, bool)> {
        let mut acc = Scores::default();
        self.accumulate(query, &mut acc);
        let mut out: Vec<(usize, f64, bool)> = acc
            .touched
            .iter()
            .filter(|&&d| acc.score[d as usize] > 0.0)
            .map(|&d| (d as usize, acc.score[d as usize], acc.literal[d as usize]))
            .collect();
        out.sort_unstable_by_key(|x| x.0);
        out
    }

    fn accumulate(&self, query: &[QueryTerm], acc: &mut Scores) {
        if self.avg_len <= 0.0 {
            return;
        }
        acc.score = vec![0.0; self.len()];
        acc.literal = vec![false; self.len()];
        for qt in query {
            let Some(t) = self.terms.get(qt.term.as_str()) else {
                continue;
            };
            let idf = self.idf(&qt.term);
            for &(d, tf) in self.postings(t) {
                let du = d as usize;
                let tf = tf as f64;
                let part = qt.weight * idf * tf * (K1 + 1.0) / (tf + self.norm[du]);
                // Every contribution is > 0 (idf > 0, w > 0, tf > 0), so a
                // zero score means this document is touched for the first time.
                if acc.score[du] == 0.0 {
                    acc.touched.push(d);
                }
                acc.score[du] += part;
                if qt.weight == 1.0 {
                    acc.literal[du] = true;
                }
            }
        }
    }

    /// The search procedure of tool-search.md §7.2 with an already resolved
    /// `limit` (≥ 1). Returns at most `limit` hits (and never more than the
    /// index holds, whatever `limit` is). Only the first
    /// [`crate::MAX_QUERY_BYTES`] bytes of the trimmed query
    /// ([`crate::cut_query`]) and its first [`crate::MAX_QUERY_TERMS`]
    /// distinct terms are used, so the work is bounded whatever the query.
    pub fn search(&self, query: &str, limit: usize, filter: SearchFilter<'_>) -> Vec<Hit> {
        let q = cut_query(query.trim()).trim_end();
        if q.is_empty() || limit == 0 {
            return Vec::new();
        }
        let candidate = |d: usize| {
            (filter.include_mcp || !self.mcp[d])
                && filter
                    .allowed_ids
                    .is_none_or(|ids| ids.contains(&self.ids[d]))
        };
        let lq = q.to_lowercase();
        let mut exact: Vec<usize> = Vec::new();
        if let Some(slot) = self.exact_slot(&lq) {
            exact.push(self.exact_keys[slot as usize].first as usize);
            if let Some(more) = self.exact_more.get(&slot) {
                exact.extend(more.iter().map(|&d| d as usize));
            }
        }
        exact.retain(|&d| candidate(d));
        if limit == 1 && exact.len() == 1 {
            let d = exact[0];
            let q = weighted_query(q);
            let (score, literal) = self
                .score(&q)
                .into_iter()
                .find(|x| x.0 == d)
                .map_or((0.0, false), |x| (x.1, x.2));
            return vec![Hit {
                doc: d,
                score,
                exact: true,
                matched_literal: literal,
            }];
        }
        let wq = weighted_query(q);
        let mut acc = Scores::default();
        self.accumulate(&wq, &mut acc);
        let scored = |d: usize| acc.score.get(d).is_some_and(|&s| s > 0.0);
        let mut out: Vec<Hit> = exact
            .iter()
            .filter(|&&d| !scored(d))
            .map(|&d| Hit {
                doc: d,
                score: 0.0,
                exact: true,
                matched_literal: false,
            })
            .collect();
        // Bounded top-k selection: a min-heap of the best `need` candidates.
        // The candidate filter runs only for hits that would enter the heap.
        let need = limit.saturating_sub(out.len());
        let mut heap: BinaryHeap<Reverse<Ranked>> =
            BinaryHeap::with_capacity(need.min(self.len()) + 1);
        if need > 0 {
            for &d in &acc.touched {
                let d = d as usize;
                let score = acc.score[d];
                if score <= 0.0 {
                    continue;
                }
                let r = Ranked {
                    exact: !exact.is_empty() && exact.contains(&d),
                    literal: acc.literal[d],
                    score,
                    rank: self.id_rank[d],
                    doc: d,
                };
                if heap.len() == need && heap.peek().is_some_and(|min| r <= min.0) {
                    continue;
                }
                if !candidate(d) {
                    continue;
                }
                heap.push(Reverse(r));
                if heap.len() > need {
                    heap.pop();
                }
            }
        }
        let mut best: Vec<Ranked> = heap.into_iter().map(|r| r.0).collect();
        best.sort_unstable_by(|a, b| b.cmp(a));
        out.extend(best.into_iter().map(|r| Hit {
            doc: r.doc,
            score: r.score,
            exact: r.exact,
            matched_literal: r.literal,
        }));
        out.truncate(limit);
        out
    }
}

/// Heap item; "greater" means ranked earlier: exact first, then
/// matchedLiteral, then score descending, then id ascending (collation rank).
struct Ranked {
    exact: bool,
    literal: bool,
    score: f64,
    rank: u32,
    doc: usize,
}

impl Ord for Ranked {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.exact
            .cmp(&other.exact)
            .then(self.literal.cmp(&other.literal))
            .then(self.score.total_cmp(&other.score))
            .then(other.rank.cmp(&self.rank))
    }
}

impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Ranked {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == std::cmp::Ordering::Equal
    }
}

impl Eq for Ranked {}

/// One distinct exact-match key (see [`SearchIndex`]).
#[derive(Debug, Clone, Copy)]
struct ExactKey {
    start: u32,
    end: u32,
    first: u32,
}

#[derive(Default)]
struct Scores {
    score: Vec<f64>,
    literal: Vec<bool>,
    touched: Vec<u32>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenize::tokenize;

    fn doc(id: &str, name: &str, mcp: bool, text: &str) -> IndexDoc {
        IndexDoc {
            id: id.into(),
            name: name.into(),
            mcp,
            tokens: tokenize(&format!("{name} {id} {text}")),
        }
    }

    fn ids(index: &SearchIndex, hits: &[Hit]) -> Vec<String> {
        hits.iter().map(|h| index.id(h.doc).to_string()).collect()
    }

    #[test]
    fn exact_bm25_score_two_documents() {
        let index = SearchIndex::new(vec![
            IndexDoc {
                id: "d1".into(),
                name: "d1".into(),
                mcp: false,
                tokens: tokenize("needle needle"),
            },
            IndexDoc {
                id: "d2".into(),
                name: "d2".into(),
                mcp: false,
                tokens: vec![],
            },
        ]);
        assert_eq!(index.avg_len(), 1.0);
        let scored = index.score(&weighted_query("needle"));
        assert_eq!(scored.len(), 1);
        let (d, score, literal) = scored[0];
        assert_eq!(d, 0);
        assert!(literal);
        let expected = 2f64.ln() * 2.0 * 2.2 / (2.0 + 1.2 * 1.75);
        assert_eq!(score, expected);
        assert!((score - 0.743865).abs() < 1e-6, "{score}");
        let hits = index.search("needle", 8, SearchFilter::default());
        assert_eq!(hits.len(), 1);
        assert!(hits[0].matched_literal && !hits[0].exact);
    }

    #[test]
    fn exact_ties_break_by_id() {
        let index = SearchIndex::new(vec![
            doc("z", "harvest", false, ""),
            doc("a", "harvest", false, ""),
            doc("m", "HARVEST", false, ""),
            doc("records", "records", false, "harvest"),
        ]);
        let hits = index.search("harvest", 2, SearchFilter::default());
        assert_eq!(ids(&index, &hits), ["a", "m"]);
        let all = index.search("harvest", 10, SearchFilter::default());
        assert_eq!(ids(&index, &all), ["a", "m", "z", "records"]);
        assert!(all[..3].iter().all(|h| h.exact));
    }

    #[test]
    fn equal_scores_sort_by_id_collation() {
        let index = SearchIndex::new(vec![
            doc("beta", "beta", false, "widget"),
            doc("Gamma", "Gamma", false, "widget"),
            doc("alpha", "alpha", false, "widget"),
        ]);
        let hits = index.search("widget", 10, SearchFilter::default());
        assert_eq!(ids(&index, &hits), ["alpha", "beta", "Gamma"]);
        assert_eq!(hits[0].score, hits[2].score);
    }

    #[test]
    fn stopword_named_tools() {
        let index = SearchIndex::new(vec![
            doc("z-local", "do", false, ""),
            doc("a-remote", "DO", true, ""),
            doc("m-local", "do", false, ""),
            doc("other", "other", false, ""),
        ]);
        let f = SearchFilter::default();
        assert_eq!(
            ids(&index, &index.search(" DO ", 8, f)),
            ["z-local", "a-remote", "m-local"]
        );
        assert_eq!(
            ids(&index, &index.search(" DO ", 2, f)),
            ["z-local", "a-remote"]
        );
        let no_mcp = SearchFilter {
            include_mcp: false,
            allowed_ids: None,
        };
        assert_eq!(ids(&index, &index.search(" DO ", 1, no_mcp)), ["z-local"]);
        let allowed: HashSet<String> = ["a-remote".to_string(), "m-local".to_string()].into();
        let narrowed = SearchFilter {
            include_mcp: false,
            allowed_ids: Some(&allowed),
        };
        assert_eq!(ids(&index, &index.search(" DO ", 1, narrowed)), ["m-local"]);
    }

    #[test]
    fn empty_and_unmatched_queries_return_nothing() {
        let index = SearchIndex::new(vec![doc("x", "web_search", false, "Search the web")]);
        let f = SearchFilter::default();
        assert!(index.search("", 8, f).is_empty());
        assert!(index.search("   ", 8, f).is_empty());
        assert!(index.search("the and with", 8, f).is_empty());
        assert!(index.search("価格を調べて", 8, f).is_empty());
        assert!(SearchIndex::new(vec![]).search("web", 8, f).is_empty());
    }

    #[test]
    fn literal_matches_rank_before_expansion_only_matches() {
        // `price` adds `search`/`web` at 0.35; a doc matching only the added
        // terms must come after any doc matching a literal term, even if its
        // score is higher.
        let index = SearchIndex::new(vec![
            doc("w", "web_search", false, "search web search web search web"),
            doc("p", "pricing", false, "price table"),
        ]);
        let hits = index.search("price", 8, SearchFilter::default());
        assert_eq!(ids(&index, &hits), ["p", "w"]);
        assert!(hits[0].matched_literal && !hits[1].matched_literal);
        assert!(hits[1].score > 0.0);
    }
}
