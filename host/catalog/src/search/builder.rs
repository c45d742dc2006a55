//! Incremental construction of a [`SearchIndex`]: documents are tokenized
//! word by word (each distinct word once, through a word cache) and their
//! tokens interned straight into the index.

use super::{ExactKey, SearchIndex, B, K1};
use crate::hashing::FastState;
use crate::tokenize::{for_each_word, word_tokens, TokenScratch};
use std::borrow::Cow;
use std::collections::HashMap;
use std::hash::Hasher;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::search::SearchFilter;
    use crate::tokenize::tokenize;
    use std::collections::HashSet;

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
}
