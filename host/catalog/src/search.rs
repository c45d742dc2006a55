//! The BM25 index and the search procedure (tool-search.md §7).

use crate::expand::{cut_query, weighted_query, QueryTerm};
use crate::tokenize::{for_each_word, word_tokens, TokenScratch};
use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::hash_map::RandomState;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;

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

/// Incremental construction of a [`SearchIndex`]; documents are added in
/// index order. Tokens are interned directly, without a per-document token
/// list.
#[derive(Debug, Default)]
pub struct SearchIndexBuilder {
    index: SearchIndex,
    total: u64,
    doc_terms: Vec<u32>,
    /// `(term, doc, tf)` in doc order; turned into CSR postings by `finish`.
    triples: Vec<(u32, u32, u32)>,
    lower: String,
    scratch: TokenScratch,
    /// Word (original case) → its interned tokens, a range of `word_terms`.
    /// Tokenization is word by word, so repeated words are tokenized once.
    /// Words of up to 32 bytes are keyed inline (no pointer chasing).
    word_cache: HashMap<WordKey, WordTerms, FastState>,
    long_word_cache: HashMap<Box<str>, WordTerms, FastState>,
    word_terms: Vec<u32>,
}

/// The interned tokens of one word: up to 3 inline, more as a range of
/// `SearchIndexBuilder::word_terms` (`ids[0]` = start).
#[derive(Debug, Clone, Copy)]
struct WordTerms {
    len: u32,
    ids: [u32; 3],
}

impl WordTerms {
    #[inline]
    fn push_into(&self, word_terms: &[u32], out: &mut Vec<u32>) {
        let len = self.len as usize;
        if len <= 3 {
            for &t in &self.ids[..len] {
                out.push(t);
            }
        } else {
            let start = self.ids[0] as usize;
            out.extend_from_slice(&word_terms[start..start + len]);
        }
    }
}

/// A word of at most 32 bytes, zero-padded. Words never contain a NUL byte
/// (they consist of letters, digits and `_`), so the padding is unambiguous.
#[derive(Debug, Clone, Copy, Eq)]
struct WordKey([u64; 4]);

impl PartialEq for WordKey {
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        // Word by word (wide vector loads of a just-built key would stall).
        (self.0[0] ^ other.0[0])
            | (self.0[1] ^ other.0[1])
            | (self.0[2] ^ other.0[2])
            | (self.0[3] ^ other.0[3])
            == 0
    }
}

impl WordKey {
    #[inline]
    fn new(word: &str) -> Option<WordKey> {
        let b = word.as_bytes();
        if b.len() > 32 {
            return None;
        }
        // Four register-built words (no byte buffer: a memcpy'd buffer read
        // back as words stalls on store forwarding).
        let n = b.len();
        let word = |i: usize| {
            let s = i * 8;
            if s + 8 <= n {
                u64::from_le_bytes(b[s..s + 8].try_into().expect("8 bytes"))
            } else if s < n {
                load_tail(&b[s..])
            } else {
                0
            }
        };
        Some(WordKey([word(0), word(1), word(2), word(3)]))
    }
}

/// `rest` (1–7 bytes) as a little-endian integer, zero-extended.
#[inline]
fn load_tail(rest: &[u8]) -> u64 {
    let n = rest.len();
    if n >= 4 {
        let lo = u32::from_le_bytes(rest[..4].try_into().expect("4 bytes")) as u64;
        let hi = u32::from_le_bytes(rest[n - 4..].try_into().expect("4 bytes")) as u64;
        lo | hi << (8 * (n - 4))
    } else if n >= 2 {
        let lo = u16::from_le_bytes(rest[..2].try_into().expect("2 bytes")) as u64;
        let hi = u16::from_le_bytes(rest[n - 2..].try_into().expect("2 bytes")) as u64;
        lo | hi << (8 * (n - 2))
    } else {
        rest.first().map_or(0, |&c| c as u64)
    }
}

impl std::hash::Hash for WordKey {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        for w in self.0 {
            state.write_u64(w);
        }
    }
}

impl SearchIndexBuilder {
    /// A builder expecting about `n` documents.
    pub fn with_capacity(n: usize) -> Self {
        let mut b = SearchIndexBuilder::default();
        b.index.ids.reserve(n);
        b.index.mcp.reserve(n);
        b.index.lens.reserve(n);
        b.index.terms.reserve(n * 2);
        b.index.exact.reserve(n * 2);
        b.index.exact_keys.reserve(n * 2);
        b.index.exact_arena.reserve(n * 48);
        b.word_cache.reserve(n * 2);
        b.triples.reserve(n * 24);
        b
    }

    /// Add a document from already tokenized text.
    pub fn add_tokens<'a>(
        &mut self,
        id: String,
        name: &str,
        mcp: bool,
        tokens: impl IntoIterator<Item = &'a str>,
    ) {
        self.doc_terms.clear();
        for t in tokens {
            let term = self.index.terms.intern(t);
            self.doc_terms.push(term);
        }
        self.finish_doc(id, name, mcp);
    }

    /// Add a document whose text is supplied piece by piece: `fill` receives
    /// a sink; every piece passed to it is tokenized as by
    /// [`crate::tokenize`] (pieces behave as if joined by spaces).
    pub fn add_text(
        &mut self,
        id: String,
        name: &str,
        mcp: bool,
        fill: impl FnOnce(&mut dyn FnMut(&str)),
    ) {
        self.doc_terms.clear();
        {
            let SearchIndexBuilder {
                index,
                doc_terms,
                scratch,
                word_cache,
                long_word_cache,
                word_terms,
                ..
            } = self;
            let terms = &mut index.terms;
            let mut sink = |text: &str| {
                for_each_word(text, |word| {
                    let key = WordKey::new(word);
                    let cached = match key {
                        Some(k) => word_cache.get(&k),
                        None => long_word_cache.get(word),
                    };
                    if let Some(w) = cached {
                        w.push_into(word_terms, doc_terms);
                        return;
                    }
                    let start = word_terms.len();
                    word_tokens(word, scratch, &mut |t: &str| {
                        word_terms.push(terms.intern(t));
                    });
                    let len = word_terms.len() - start;
                    let mut w = WordTerms {
                        len: len as u32,
                        ids: [start as u32, 0, 0],
                    };
                    if len <= 3 {
                        for (slot, &t) in w.ids.iter_mut().zip(&word_terms[start..]) {
                            *slot = t;
                        }
                        word_terms.truncate(start);
                    }
                    w.push_into(word_terms, doc_terms);
                    match key {
                        Some(k) => word_cache.insert(k, w),
                        None => long_word_cache.insert(word.into(), w),
                    };
                });
            };
            fill(&mut sink);
        }
        self.finish_doc(id, name, mcp);
    }

    fn add_exact(&mut self, key_source: &str, d: u32) {
        let buf = &mut self.lower;
        let lower: &str = if !key_source.is_ascii() {
            buf.clear();
            buf.push_str(&key_source.to_lowercase());
            buf
        } else if key_source.bytes().any(|b| b.is_ascii_uppercase()) {
            buf.clear();
            buf.push_str(key_source);
            buf.make_ascii_lowercase();
            buf
        } else {
            key_source
        };
        let index = &mut self.index;
        let h = index.exact.hash(lower);
        match index
            .exact
            .find_first(h, |slot| index.exact_key(slot) == lower)
        {
            None => {
                let start = index.exact_arena.len() as u32;
                index.exact_arena.push_str(lower);
                index.exact_keys.push(ExactKey {
                    start,
                    end: index.exact_arena.len() as u32,
                    first: d,
                });
                index.exact.push(h);
            }
            Some(slot) if index.exact_keys[slot as usize].first != d => {
                let more = index.exact_more.entry(slot).or_default();
                if more.last() != Some(&d) {
                    more.push(d);
                }
            }
            Some(_) => {}
        }
    }

    fn finish_doc(&mut self, id: String, name: &str, mcp: bool) {
        let d = self.index.ids.len() as u32;
        let len = self.doc_terms.len();
        self.doc_terms.sort_unstable();
        let mut i = 0;
        while i < len {
            let mut j = i;
            while j < len && self.doc_terms[j] == self.doc_terms[i] {
                j += 1;
            }
            self.triples.push((self.doc_terms[i], d, (j - i) as u32));
            i = j;
        }
        self.total += len as u64;
        self.index.lens.push(len as u32);
        self.add_exact(name, d);
        self.add_exact(&id, d);
        self.index.ids.push(id);
        self.index.mcp.push(mcp);
    }

    /// Finish: CSR postings, `avgLen`, per-document normalization and the id
    /// collation ranks.
    pub fn finish(self) -> SearchIndex {
        let mut index = self.index;
        let n = index.ids.len();
        // Counting sort of the triples by term; docs stay ascending.
        let nterms = index.terms.len();
        let mut start = vec![0u32; nterms + 1];
        for &(t, _, _) in &self.triples {
            start[t as usize + 1] += 1;
        }
        for t in 0..nterms {
            start[t + 1] += start[t];
        }
        let mut fill = start.clone();
        let mut post = vec![(0u32, 0u32); self.triples.len()];
        for &(t, d, tf) in &self.triples {
            let slot = &mut fill[t as usize];
            post[*slot as usize] = (d, tf);
            *slot += 1;
        }
        index.post_start = start;
        index.post = post;
        index.avg_len = if n == 0 {
            0.0
        } else {
            self.total as f64 / n as f64
        };
        let avg = index.avg_len;
        index.norm = index
            .lens
            .iter()
            .map(|&len| K1 * (1.0 - B + B * len as f64 / avg))
            .collect();
        // Most ids are already lower-case ASCII: borrow those.
        let lower: Vec<Cow<'_, str>> = index
            .ids
            .iter()
            .map(|i| {
                if i.bytes().any(|b| b.is_ascii_uppercase() || !b.is_ascii()) {
                    Cow::Owned(i.to_lowercase())
                } else {
                    Cow::Borrowed(i.as_str())
                }
            })
            .collect();
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_unstable_by(|&a, &b| {
            lower[a]
                .cmp(&lower[b])
                .then_with(|| index.ids[a].cmp(&index.ids[b]))
        });
        index.id_rank = vec![0; n];
        for (rank, d) in order.into_iter().enumerate() {
            index.id_rank[d] = rank as u32;
        }
        index
    }
}

/// The interned terms: term `t` is `arena[ends[t - 1]..ends[t]]` (from 0
/// for the first), looked up through [`HashSlots`] (slot = term id).
#[derive(Debug, Clone, Default)]
struct Terms {
    slots: HashSlots,
    arena: String,
    ends: Vec<u32>,
}

impl Terms {
    fn reserve(&mut self, n: usize) {
        self.slots.reserve(n);
        self.ends.reserve(n);
        self.arena.reserve(n * 8);
    }

    fn len(&self) -> usize {
        self.ends.len()
    }

    #[inline]
    fn term(&self, t: u32) -> &str {
        let t = t as usize;
        let start = if t == 0 { 0 } else { self.ends[t - 1] as usize };
        &self.arena[start..self.ends[t] as usize]
    }

    #[inline]
    fn find(&self, h: u64, term: &str) -> Option<u32> {
        self.slots.find_first(h, |t| self.term(t) == term)
    }

    /// The id of `term`, if interned.
    #[inline]
    fn get(&self, term: &str) -> Option<u32> {
        self.find(self.slots.hash(term), term)
    }

    /// The id of `term`, interning it if new (ids are dense, in order).
    #[inline]
    fn intern(&mut self, term: &str) -> u32 {
        let h = self.slots.hash(term);
        if let Some(t) = self.find(h, term) {
            return t;
        }
        self.arena.push_str(term);
        self.ends.push(self.arena.len() as u32);
        self.slots.push(h);
        (self.ends.len() - 1) as u32
    }
}

/// One distinct exact-match key (see [`SearchIndex`]).
#[derive(Debug, Clone, Copy)]
struct ExactKey {
    start: u32,
    end: u32,
    first: u32,
}

/// A string-keyed lookup table whose keys live elsewhere (so building it
/// allocates no key strings): slots `0, 1, 2, …` are pushed in order with
/// the hash of their key; lookups hash the probe and confirm candidates
/// with a caller-supplied equality on slots (full hash collisions chain).
#[derive(Debug, Clone, Default)]
pub(crate) struct HashSlots {
    state: FastState,
    heads: HashMap<u64, u32, FastState>,
    /// Per slot: the next slot with the same hash, or `u32::MAX`.
    next: Vec<u32>,
}

impl HashSlots {
    pub(crate) fn reserve(&mut self, n: usize) {
        self.heads.reserve(n);
        self.next.reserve(n);
    }

    /// The hash of a key.
    #[inline]
    pub(crate) fn hash(&self, key: &str) -> u64 {
        self.state.hash_one(key)
    }

    /// Append the next slot, whose key hashes to `h`.
    pub(crate) fn push(&mut self, h: u64) {
        let slot = self.next.len() as u32;
        self.next.push(u32::MAX);
        match self.heads.entry(h) {
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(slot);
            }
            std::collections::hash_map::Entry::Occupied(o) => {
                let mut s = *o.get();
                while self.next[s as usize] != u32::MAX {
                    s = self.next[s as usize];
                }
                self.next[s as usize] = slot;
            }
        }
    }

    /// The candidate slots for hash `h`, in push order.
    #[inline]
    pub(crate) fn candidates(&self, h: u64) -> impl Iterator<Item = u32> + '_ {
        let mut cur = self.heads.get(&h).copied();
        std::iter::from_fn(move || {
            let s = cur?;
            let n = self.next[s as usize];
            cur = (n != u32::MAX).then_some(n);
            Some(s)
        })
    }

    /// The first slot for hash `h` whose key satisfies `eq`.
    #[inline]
    pub(crate) fn find_first(&self, h: u64, mut eq: impl FnMut(u32) -> bool) -> Option<u32> {
        self.candidates(h).find(|&s| eq(s))
    }
}

/// A fast multiplicative string hasher with a per-process random seed (so
/// crafted untrusted descriptions cannot precompute collisions).
#[derive(Debug, Clone, Copy)]
pub(crate) struct FastState(u64);

impl Default for FastState {
    fn default() -> Self {
        static SEED: OnceLock<u64> = OnceLock::new();
        FastState(*SEED.get_or_init(|| RandomState::new().build_hasher().finish() | 1))
    }
}

impl BuildHasher for FastState {
    type Hasher = FastHasher;
    fn build_hasher(&self) -> FastHasher {
        FastHasher(self.0)
    }
}

pub(crate) struct FastHasher(u64);

impl FastHasher {
    #[inline]
    fn mix(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

impl Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.mix(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut buf = [0u8; 8];
            buf[..rest.len()].copy_from_slice(rest);
            self.mix(u64::from_le_bytes(buf) ^ ((rest.len() as u64) << 59));
        }
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.mix(u64::from(i));
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.mix(i);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.mix(i as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        let mut x = self.0;
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x
    }
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

    /// Texts exercising the tokenizer: ASCII, camelCase, acronyms, digits,
    /// underscores, `$`, CJK, emoji, combining marks, non-ASCII upper case,
    /// stopwords, words longer than 32 bytes and repeated words.
    const SAMPLE_TEXTS: [&str; 16] = [
        "web_search Search the web for current information",
        "getURLs HTTPServer getOAuthToken readFile file2pdf URLsx",
        "ÀÉ ÉtéCafé café CAFÉ Ωmega ΣΊΣΥΦΟΣ straße İstanbul",
        "価格を調べて 検索する データ_取得 日本語テキスト",
        "emoji 🚀 rocket🚀launch 👍🏽 thumbs_up 🇯🇵",
        "combining e\u{301}te\u{301} a\u{308}bc n\u{303}",
        "$price $$ a$b money$ __init__ _ __ _x_ x__y",
        "123 4567abc abc123DEF 12_34 ٣٤٥ ①② Ⅻ",
        "The and with THE AND about YOUR your doIt DoIt",
        "cookies policies running runner processing scheduled analysis news",
        "aVeryLongIdentifierNameThatIsLongerThanThirtyTwoBytes_and_more_parts",
        "supercalifragilisticexpialidocious_supercalifragilisticexpialidocious",
        "repeat repeat Repeat REPEAT repeat_repeat repeatRepeat",
        "host:core:get_issue_42 mcp:server1:list-issues client:client:x",
        "tabs\tand\nnewlines, punctuation! (parens) [brackets] {braces}",
        "",
    ];

    #[test]
    fn word_cache_matches_reference_tokenization() {
        // Documents built from the sample texts, split into pieces in
        // several ways, indexed through the word cache (`add_text`) and from
        // reference token lists (`add_tokens` over `tokenize`).
        let mut docs: Vec<(String, String, Vec<String>)> = Vec::new();
        for (i, a) in SAMPLE_TEXTS.iter().enumerate() {
            for (j, b) in SAMPLE_TEXTS.iter().enumerate().step_by(3) {
                let name = format!("Tool_{i}_{j}");
                let id = format!("host:core:{name}");
                docs.push((
                    id,
                    name,
                    vec![a.to_string(), b.to_string(), format!("{a}{b}")],
                ));
            }
        }
        let mut cached = SearchIndexBuilder::with_capacity(docs.len());
        let mut reference = SearchIndexBuilder::with_capacity(docs.len());
        for (id, name, pieces) in &docs {
            cached.add_text(id.clone(), name, false, |sink| {
                sink(name);
                sink(id);
                for p in pieces {
                    sink(p);
                }
            });
            let mut text = format!("{name} {id}");
            for p in pieces {
                text.push(' ');
                text.push_str(p);
            }
            let tokens = tokenize(&text);
            reference.add_tokens(id.clone(), name, false, tokens.iter().map(String::as_str));
        }
        let (c, r) = (cached.finish(), reference.finish());
        assert_eq!(c.terms.len(), r.terms.len());
        for t in 0..c.terms.len() as u32 {
            assert_eq!(c.terms.term(t), r.terms.term(t), "term {t}");
            assert_eq!(c.terms.get(c.terms.term(t)), Some(t));
        }
        assert_eq!(c.post_start, r.post_start);
        assert_eq!(c.post, r.post);
        assert_eq!(c.lens, r.lens);
        assert_eq!(c.norm, r.norm);
        assert_eq!(c.avg_len, r.avg_len);
        assert_eq!(c.id_rank, r.id_rank);
        for q in SAMPLE_TEXTS
            .iter()
            .chain(&["tool_3_6", "HOST:CORE:TOOL_0_0", "café"])
        {
            let f = SearchFilter::default();
            assert_eq!(c.search(q, 50, f), r.search(q, 50, f), "{q}");
        }
    }

    #[test]
    fn id_ranks_match_collation() {
        let ids = [
            "b",
            "B",
            "a",
            "A",
            "_x",
            "Z",
            "ÀÉ",
            "àé",
            "é",
            "E",
            "host:core:X",
        ];
        let mut b = SearchIndexBuilder::with_capacity(ids.len());
        for id in ids {
            b.add_tokens(id.to_string(), id, false, std::iter::empty());
        }
        let index = b.finish();
        let mut sorted: Vec<usize> = (0..ids.len()).collect();
        sorted.sort_by(|&x, &y| crate::text::collate(ids[x], ids[y]));
        for (rank, d) in sorted.into_iter().enumerate() {
            assert_eq!(index.id_rank[d] as usize, rank, "{}", ids[d]);
        }
    }

    #[test]
    fn word_keys_pack_words_exactly() {
        let text = "abcdefghijklmnopqrstuvwxyz0123456789_ÀÉé";
        let mut seen = HashSet::new();
        for end in 0..=text.len() {
            if !text.is_char_boundary(end) {
                continue;
            }
            let w = &text[..end];
            let key = WordKey::new(w);
            if w.len() > 32 {
                assert!(key.is_none());
                continue;
            }
            let key = key.expect("short word");
            let mut buf = [0u8; 32];
            buf[..w.len()].copy_from_slice(w.as_bytes());
            for (i, &k) in key.0.iter().enumerate() {
                let expect = u64::from_le_bytes(buf[i * 8..i * 8 + 8].try_into().unwrap());
                assert_eq!(k, expect, "{w:?} word {i}");
            }
            assert!(seen.insert(key.0), "{w:?}");
        }
    }

    #[test]
    fn hash_slots_resolve_full_collisions() {
        let keys = ["alpha", "beta", "gamma", "beta"];
        let mut slots = HashSlots::default();
        for _ in keys {
            slots.push(42); // every key in one chain
        }
        let find = |k: &str| slots.find_first(42, |s| keys[s as usize] == k);
        assert_eq!(find("alpha"), Some(0));
        assert_eq!(find("beta"), Some(1));
        assert_eq!(find("gamma"), Some(2));
        assert_eq!(find("delta"), None);
        assert_eq!(slots.candidates(42).collect::<Vec<_>>(), [0, 1, 2, 3]);
        assert_eq!(slots.candidates(7).count(), 0);
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
