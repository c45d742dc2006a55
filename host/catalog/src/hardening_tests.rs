//! Caps on guest-driven host work (issue 19): every named cap has an obeyed
//! and a violated test; huge inputs complete with deterministically bounded
//! work; a bolero fuzz test drives the guest surfaces with arbitrary input.

use crate::*;
use serde_json::{json, Map, Value};

/// A small catalog: a strict tool (closed object), an open tool, a tool
/// without schema, a tool named `zebra`, and one MCP tool.
fn small_catalog() -> Catalog {
    Catalog::builder()
        .core(
            ToolSpec::new("web_search", "Search the web for current information")
                .with_input_schema(
                    json!({"type":"object","required":["query"],"additionalProperties":false,
                    "properties":{"query":{"type":"string"},"limit":{"type":"integer"},
                        "nested":{"type":"object","additionalProperties":false,
                            "properties":{"zone":{"type":"string"}}}}}),
                ),
        )
        .core(
            ToolSpec::new("open_tool", "Accepts any keys but needs query")
                .with_input_schema(json!({"type":"object","required":["query"],
                    "properties":{"query":{"type":"string"}}})),
        )
        .core(ToolSpec::new("read_file", "Read a file from disk"))
        .core(ToolSpec::new("zebra", "Striped animal facts"))
        .mcp("Linear", ToolSpec::new("list-issues", "List issues"))
        .build()
}

fn literal_count(q: &[QueryTerm]) -> usize {
    q.iter().filter(|t| t.weight == 1.0).count()
}

/// `n` distinct lower-case ASCII words, each one token that the stemmer
/// leaves alone and that triggers no expansion (`wabx`, `wacx`, ...).
fn distinct_words(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            let a = (b'a' + (i / 676 % 26) as u8) as char;
            let b = (b'a' + (i / 26 % 26) as u8) as char;
            let c = (b'a' + (i % 26) as u8) as char;
            format!("w{a}{b}{c}x")
        })
        .collect()
}

/// The weighted query as computed before the caps (quadratic
/// de-duplication over the whole query): the reference for ordinary input.
fn reference_weighted_query(query: &str) -> Vec<QueryTerm> {
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
                    added.extend(tokenize(a));
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

/// The full-matrix optimal string alignment distance (the reference for the
/// three-row version).
fn reference_osa(a: &[char], b: &[char]) -> usize {
    let (n, m) = (a.len(), b.len());
    let mut d = vec![vec![0usize; m + 1]; n + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=n {
        for j in 1..=m {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = v;
        }
    }
    d[n][m]
}

const ORDINARY_QUERIES: [&str; 14] = [
    "look up the price",
    "search the latest news",
    "say",
    "reminders",
    "the and with",
    "価格を調べて",
    "getURLs readFile web_search",
    "remind me tomorrow to check the weather in the folder",
    "cookies policies running runner processing",
    "look look look LOOK lookup google research",
    "Café ÉtéCafé straße 🚀 rocket🚀launch",
    "file2pdf HTTPServer getOAuthToken",
    "",
    "   ",
];

#[test]
fn ordinary_queries_weigh_as_before() {
    for q in ORDINARY_QUERIES {
        assert_eq!(weighted_query(q), reference_weighted_query(q), "{q:?}");
        assert_eq!(cut_query(q), q);
    }
    let long: String = distinct_words(100).join(" ");
    assert_eq!(weighted_query(&long), reference_weighted_query(&long));
}

#[test]
fn osa_distance_matches_full_matrix() {
    let words = [
        "", "a", "ab", "ba", "abc", "acb", "query", "qeury", "qurey", "kitten", "sitting", "ca",
        "abc", "éte", "été", "limit", "limti", "zone", "zome",
    ];
    for a in words {
        for b in words {
            let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
            assert_eq!(osa_distance(&a, &b), reference_osa(&a, &b), "{a:?} {b:?}");
        }
    }
}

// --- MAX_QUERY_BYTES -------------------------------------------------------

/// Padding of `n` bytes of `x` words, then ` zebra` (so the query ends with
/// the word `zebra` exactly at byte `n + 6`).
fn padded_zebra(pad: usize) -> String {
    let mut q = "x ".repeat(pad / 2);
    if pad % 2 == 1 {
        q.push(' ');
    }
    q.push_str(" zebra");
    q
}

#[test]
fn query_bytes_cap_obeyed() {
    let c = small_catalog();
    let q = padded_zebra(MAX_QUERY_BYTES - 6);
    assert_eq!(q.len(), MAX_QUERY_BYTES);
    assert_eq!(cut_query(&q), q);
    assert!(weighted_query(&q).iter().any(|t| t.term == "zebra"));
    let hits = c.search(&q, SearchOptions::default());
    assert_eq!(hits[0].name(), "zebra");
    let p = c.callable_projection();
    assert_eq!(c.guest_search(&p, &q, None)[0].callable_name, "zebra");
}

#[test]
fn query_bytes_cap_violated() {
    let c = small_catalog();
    let p = c.callable_projection();
    // One byte over: the cut splits `zebra`, which is dropped whole.
    let q = padded_zebra(MAX_QUERY_BYTES - 5);
    assert_eq!(q.len(), MAX_QUERY_BYTES + 1);
    let cut = cut_query(&q);
    assert_eq!(cut.len(), MAX_QUERY_BYTES - 4);
    assert!(cut.trim_end().ends_with('x'));
    assert!(!weighted_query(&q)
        .iter()
        .any(|t| t.term.starts_with("zebr")));
    assert!(c.search(&q, SearchOptions::default()).is_empty());
    assert!(c.guest_search(&p, &q, None).is_empty());
    // A word wholly after the cap is ignored.
    let q = padded_zebra(MAX_QUERY_BYTES);
    assert!(c.search(&q, SearchOptions::default()).is_empty());
    // The cut lands on a character boundary (`é` straddles the cap) and
    // the partial word is dropped.
    let q = format!("{}bé tail", "a ".repeat(MAX_QUERY_BYTES / 2 - 1));
    assert!(!q.is_char_boundary(MAX_QUERY_BYTES));
    let cut = cut_query(&q);
    assert_eq!(cut.len(), MAX_QUERY_BYTES - 2);
    assert!(cut.ends_with("a "));
    // A single word longer than the cap leaves nothing to search.
    assert_eq!(cut_query(&"z".repeat(MAX_QUERY_BYTES + 1)), "");
    // Leading whitespace is trimmed before the cut.
    let q = format!("{}zebra", " ".repeat(MAX_QUERY_BYTES * 4));
    assert_eq!(c.search(&q, SearchOptions::default())[0].name(), "zebra");
    assert_eq!(c.guest_search(&p, &q, None)[0].callable_name, "zebra");
}

// --- MAX_QUERY_TERMS -------------------------------------------------------

#[test]
fn query_terms_cap_obeyed() {
    let words = distinct_words(MAX_QUERY_TERMS);
    let q = weighted_query(&words.join(" "));
    assert_eq!(q.len(), MAX_QUERY_TERMS);
    assert_eq!(literal_count(&q), MAX_QUERY_TERMS);
    assert_eq!(q.last().unwrap().term, words[MAX_QUERY_TERMS - 1]);
    // At the cap, the word that fills it is still expanded.
    let mut w = distinct_words(MAX_QUERY_TERMS - 1);
    w.push("weather".into());
    let q = weighted_query(&w.join(" "));
    assert_eq!(literal_count(&q), MAX_QUERY_TERMS);
    assert!(q
        .iter()
        .any(|t| t.term == "web" && t.weight == EXPANSION_WEIGHT));
    assert_eq!(q, reference_weighted_query(&w.join(" ")));
}

#[test]
fn query_terms_cap_violated() {
    let words = distinct_words(MAX_QUERY_TERMS + 10);
    let mut text = words.join(" ");
    text.push_str(" weather zebra");
    assert!(text.len() < MAX_QUERY_BYTES);
    let q = weighted_query(&text);
    // Later words are neither scored nor expanded.
    assert_eq!(q.len(), MAX_QUERY_TERMS);
    assert_eq!(literal_count(&q), MAX_QUERY_TERMS);
    assert_eq!(q.last().unwrap().term, words[MAX_QUERY_TERMS - 1]);
    assert!(!q.iter().any(|t| t.term == words[MAX_QUERY_TERMS]));
    assert!(!q.iter().any(|t| t.term == "web" || t.term == "zebra"));
    let c = small_catalog();
    assert!(c.search(&text, SearchOptions::default()).is_empty());
    // A word whose parts cross the cap keeps only the parts that fit.
    let mut w = distinct_words(MAX_QUERY_TERMS - 2);
    w.push("getOAuthToken".into()); // getoauthtoken, get, o, auth, token
    let q = weighted_query(&w.join(" "));
    assert_eq!(q.len(), MAX_QUERY_TERMS);
    assert_eq!(q[MAX_QUERY_TERMS - 2].term, "getoauthtoken");
    assert_eq!(q[MAX_QUERY_TERMS - 1].term, "get");
}

#[test]
fn huge_queries_complete_with_bounded_terms() {
    let c = small_catalog();
    let p = c.callable_projection();
    let expansion_terms: std::collections::HashSet<String> = EXPANSIONS
        .iter()
        .flat_map(|(_, adds)| adds.iter().flat_map(|a| tokenize(a)))
        .collect();
    // 150,000 distinct words, and 150,000 repetitions of a trigger word.
    let distinct = distinct_words(150_000).join(" ");
    let repeated = "look ".repeat(150_000);
    for (q, literal) in [(&distinct, MAX_QUERY_TERMS), (&repeated, 1)] {
        let cut = cut_query(q);
        assert!(cut.len() <= MAX_QUERY_BYTES);
        let wq = weighted_query(q);
        assert_eq!(wq, weighted_query(cut), "only the cut part counts");
        assert_eq!(literal_count(&wq), literal);
        assert!(wq.len() <= MAX_QUERY_TERMS + expansion_terms.len());
        assert!(c.search(q, SearchOptions::default()).len() <= 8);
        assert!(c.guest_search(&p, q, Some(&json!(50))).len() <= 50);
        c.index()
            .search(q, usize::MAX, SearchFilter::default())
            .into_iter()
            .for_each(|h| assert!(h.doc < c.index().len()));
    }
    let wq = weighted_query(&repeated);
    let terms: Vec<&str> = wq.iter().map(|t| t.term.as_str()).collect();
    assert_eq!(terms, ["look", "search", "web", "find"]);
}

// --- MAX_SEARCH_LIMIT ------------------------------------------------------

fn many_widgets(limits: SearchLimits) -> Catalog {
    let mut b = Catalog::builder().limits(limits);
    for i in 0..MAX_SEARCH_LIMIT + 10 {
        b = b.core(ToolSpec::new(format!("widget_{i}"), "widget tool"));
    }
    b.build()
}

#[test]
fn search_limit_cap_obeyed() {
    let c = many_widgets(SearchLimits {
        default_limit: 8,
        max_limit: 50,
    });
    let n = |limit: i64| {
        c.search(
            "widget",
            SearchOptions {
                limit: Some(limit),
                ..SearchOptions::default()
            },
        )
        .len()
    };
    assert_eq!(n(MAX_SEARCH_LIMIT as i64), MAX_SEARCH_LIMIT);
    assert_eq!(n(7), 7);
}

#[test]
fn search_limit_cap_violated() {
    // Even a host configuration beyond the cap cannot size a search past it.
    let unbounded = SearchLimits {
        default_limit: usize::MAX,
        max_limit: usize::MAX,
    };
    assert_eq!(unbounded.resolve(None), MAX_SEARCH_LIMIT);
    assert_eq!(unbounded.resolve_int(Some(i64::MAX)), MAX_SEARCH_LIMIT);
    let c = many_widgets(unbounded);
    let p = c.callable_projection();
    let hits = c.guest_search(&p, "widget", Some(&json!(1e300)));
    assert_eq!(hits.len(), MAX_SEARCH_LIMIT);
    let hits = c.guest_search(&p, "widget", Some(&json!(u64::MAX)));
    assert_eq!(hits.len(), MAX_SEARCH_LIMIT);
    // The index itself takes any limit without sizing anything by it.
    let all = c
        .index()
        .search("widget", usize::MAX, SearchFilter::default());
    assert_eq!(all.len(), MAX_SEARCH_LIMIT + 10);
}

// --- MAX_SUGGESTION_NAME_CHARS ---------------------------------------------

/// A strict schema declaring one property `name`.
fn one_property(name: &str) -> Value {
    json!({"type":"object","additionalProperties":false,
        "properties":{ name: {"type":"string"} }})
}

fn suggestion(schema: &Value, args: &Value) -> Option<String> {
    let e = validate_input(schema, args, "t", None).unwrap_err();
    assert_eq!(e.code(), Some("input_contract"));
    e.message
        .split("Did you mean: ")
        .nth(1)
        .map(|s| s.trim_end_matches('?').to_string())
}

/// A name of `n` characters ending in `éb` (multi-byte, so characters and
/// bytes differ) and its typo (last two characters swapped).
fn name_and_typo(n: usize) -> (String, String) {
    let base = "p".repeat(n - 2);
    (format!("{base}éb"), format!("{base}bé"))
}

#[test]
fn suggestion_name_cap_obeyed() {
    let (name, typo) = name_and_typo(MAX_SUGGESTION_NAME_CHARS);
    let schema = one_property(&name);
    assert_eq!(
        suggestion(&schema, &json!({ typo.clone(): "x" })),
        Some(name.clone())
    );
    assert_eq!(
        suggestion(&schema, &json!({ name.to_uppercase(): "x" })),
        Some(name.clone())
    );
    assert_eq!(closest(&typo, &[&name]), Some(name.as_str()));
}

#[test]
fn suggestion_name_cap_violated() {
    let (name, typo) = name_and_typo(MAX_SUGGESTION_NAME_CHARS + 1);
    let schema = one_property(&name);
    assert_eq!(suggestion(&schema, &json!({ typo.clone(): "x" })), None);
    assert_eq!(
        suggestion(&schema, &json!({ name.to_uppercase(): "x" })),
        None
    );
    assert_eq!(closest(&typo, &[&name]), None);
    // A name within the cap is never matched to a declared name over it,
    // however close.
    let (within, _) = name_and_typo(MAX_SUGGESTION_NAME_CHARS);
    assert_eq!(closest(&within, &[&name]), None);
    assert_eq!(suggestion(&schema, &json!({ within: "x" })), None);
    // The error itself still names the property.
    let e = validate_input(&schema, &json!({ typo.clone(): "x" }), "t", None).unwrap_err();
    assert!(e
        .message
        .contains(&format!("unexpected property \"{}", &typo[..40])));
}

// --- MAX_SUGGESTION_KEYS ---------------------------------------------------

/// `n` filler keys (`a000`, `a001`, ...: far from any declared name, and
/// ordered before `qurey`) plus `qurey`.
fn fillers_and_typo(n: usize) -> Value {
    let mut m = Map::new();
    for i in 0..n {
        m.insert(format!("a{i:03}"), json!(1));
    }
    m.insert("qurey".into(), json!("x"));
    Value::Object(m)
}

fn strict_query() -> Value {
    json!({"type":"object","additionalProperties":false,
        "properties":{"query":{"type":"string"}}})
}

fn open_query() -> Value {
    json!({"type":"object","required":["query"],"properties":{"query":{"type":"string"}}})
}

#[test]
fn suggestion_keys_cap_obeyed() {
    let args = fillers_and_typo(MAX_SUGGESTION_KEYS - 1);
    assert_eq!(suggestion(&strict_query(), &args), Some("query".into()));
    assert_eq!(suggestion(&open_query(), &args), Some("query".into()));
}

#[test]
fn suggestion_keys_cap_violated() {
    let args = fillers_and_typo(MAX_SUGGESTION_KEYS);
    assert_eq!(suggestion(&strict_query(), &args), None);
    assert_eq!(suggestion(&open_query(), &args), None);
    // Many keys: the error is still reported, with a bounded message.
    let args = fillers_and_typo(100_000 - 1);
    let e = validate_input(&strict_query(), &args, "t", None).unwrap_err();
    assert!(e
        .message
        .starts_with("Invalid arguments for tool \"t\": unexpected properties \"a000\", \"a001\""));
    assert!(e.message.len() < 1_000, "{}", e.message.len());
}

#[test]
fn one_megabyte_property_name_completes() {
    let c = small_catalog();
    let p = c.callable_projection();
    let long = "q".repeat(1 << 20);
    let e = c
        .guest_prepare_call(
            &p,
            "web_search",
            Some(json!({"query": "x", long.clone(): 1})),
        )
        .unwrap_err();
    assert_eq!(e.code(), Some("input_contract"));
    assert!(e.message.contains("unexpected property \"qqqq"));
    assert!(!e.message.contains("Did you mean"));
    assert!(e.message.len() < 1_000, "{}", e.message.len());
    // Open object missing its required property.
    let e = c
        .guest_prepare_call(&p, "open_tool", Some(json!({ long.clone(): 1 })))
        .unwrap_err();
    assert!(e.message.contains("missing required property \"query\""));
    assert!(!e.message.contains("Did you mean"));
    // Nested, and as a close-but-long variant of a declared name.
    let e = c
        .guest_prepare_call(
            &p,
            "web_search",
            Some(json!({"query": "x", "nested": { format!("zone{long}"): 1 }})),
        )
        .unwrap_err();
    assert!(e.message.len() < 1_000);
}

// --- MAX_CALLABLE_NAME_BYTES -----------------------------------------------

#[test]
fn callable_name_cap_obeyed() {
    let name = format!("t{}", "x".repeat(MAX_CALLABLE_NAME_BYTES - 1));
    let c = Catalog::builder()
        .core(ToolSpec::new(name.clone(), "long-named tool"))
        .mcp("Linear", ToolSpec::new("list-issues", "List issues"))
        .build();
    let p = c.callable_projection();
    assert_eq!(p.bindings()[0].callable_name, name);
    assert_eq!(c.guest_describe(&p, &name).unwrap()["name"], json!(name));
    assert!(c.guest_prepare_call(&p, &name, None).is_ok());
    // A name at the cap that names nothing gets the ordinary error.
    let other = "y".repeat(MAX_CALLABLE_NAME_BYTES);
    let e = c.guest_describe(&p, &other).unwrap_err();
    assert_eq!(e.message, format!("Unknown catalog function: {other}."));
    let e = c.mcp_api(&other, None, false).unwrap_err();
    assert_eq!(e.message, format!("Unknown MCP server: {other}."));
    let e = c.mcp_api("linear", Some(&other), false).unwrap_err();
    assert_eq!(
        e.message,
        format!("Unknown MCP method: MCP.linear.{other}.")
    );
    assert!(c.mcp_api("linear", Some("listIssues"), false).is_ok());
}

#[test]
fn callable_name_cap_violated() {
    let c = small_catalog();
    let p = c.callable_projection();
    let over = "y".repeat(MAX_CALLABLE_NAME_BYTES + 1);
    let expected = format!(
        "the name is {} bytes long; names are at most {MAX_CALLABLE_NAME_BYTES} bytes.",
        MAX_CALLABLE_NAME_BYTES + 1
    );
    let e = c.guest_describe(&p, &over).unwrap_err();
    assert_eq!(e.kind, ErrorKind::UnknownCallable);
    assert_eq!(e.message, format!("Unknown catalog function: {expected}"));
    let e = c.guest_prepare_call(&p, &over, None).unwrap_err();
    assert_eq!(e.message, format!("Unknown catalog function: {expected}"));
    let e = c.mcp_api(&over, None, false).unwrap_err();
    assert_eq!(e.message, format!("Unknown MCP server: {expected}"));
    let e = c.mcp_api("linear", Some(&over), false).unwrap_err();
    assert_eq!(e.message, format!("Unknown MCP method: {expected}"));
    // A 1 MB name: rejected without being echoed.
    let huge = "web_search".repeat(100_000);
    let e = c.guest_prepare_call(&p, &huge, None).unwrap_err();
    assert!(e.message.len() < 200, "{}", e.message);
}

// --- MAX_API_PATH_BYTES ----------------------------------------------------

#[test]
fn api_path_cap_obeyed() {
    let c = small_catalog();
    let p = c.callable_projection();
    assert!(c.api_read(&p, "tools/zebra.d.ts").is_ok());
    let path = format!(
        "tools/{}.d.ts",
        "z".repeat(MAX_API_PATH_BYTES - "tools/.d.ts".len())
    );
    assert_eq!(path.len(), MAX_API_PATH_BYTES);
    let e = c.api_read(&p, &path).unwrap_err();
    assert_eq!(e.message, format!("Unknown API file: {path}"));
}

#[test]
fn api_path_cap_violated() {
    let c = small_catalog();
    let p = c.callable_projection();
    let path = format!(
        "tools/{}.d.ts",
        "z".repeat(MAX_API_PATH_BYTES + 1 - "tools/.d.ts".len())
    );
    let e = c.api_read(&p, &path).unwrap_err();
    assert_eq!(e.kind, ErrorKind::UnknownApiFile);
    assert_eq!(
        e.message,
        format!(
            "Unknown API file: the path is {} bytes long; API file paths are at most {MAX_API_PATH_BYTES} bytes.",
            MAX_API_PATH_BYTES + 1
        )
    );
}

// --- fuzz ------------------------------------------------------------------

/// A JSON-ish value from fuzz bytes: `tag` picks the shape.
fn json_ish(tag: u8, key: &str) -> Value {
    match tag % 8 {
        0 => Value::Null,
        1 => json!(tag > 128),
        2 => json!(tag as i64 - 100),
        3 => json!(key),
        4 => json!([key, tag, null]),
        5 => json!({ key: tag }),
        6 => json!({"zone": key, key: [1.5]}),
        _ => json!(f64::from(tag) / 7.0),
    }
}

#[test]
fn fuzz_guest_surfaces() {
    // The validators' trait objects are not `RefUnwindSafe`; a panic fails
    // the test anyway, so the catalog is never observed after one.
    let c = std::panic::AssertUnwindSafe(small_catalog());
    let p = c.callable_projection();
    let names = [
        "web_search",
        "open_tool",
        "read_file",
        "zebra",
        "MCP.linear.listIssues",
    ];
    bolero::check!()
        .with_type::<(String, u8, String, Vec<(String, u8)>)>()
        .for_each(|(query, limit, name, fields)| {
            // Search with arbitrary text and limits.
            let hits = c.guest_search(&p, query, Some(&json!(*limit as i64 - 20)));
            assert!(hits.len() <= MAX_SEARCH_LIMIT);
            let hits = c.search(
                query,
                SearchOptions {
                    limit: Some(*limit as i64),
                    ..SearchOptions::default()
                },
            );
            assert!(hits.len() <= c.limits().max_limit.min(MAX_SEARCH_LIMIT));
            let wq = weighted_query(query);
            assert!(literal_count(&wq) <= MAX_QUERY_TERMS);
            assert!(cut_query(query).len() <= MAX_QUERY_BYTES);
            // Describe and call with an arbitrary or a real name.
            let callable = if limit % 2 == 0 {
                name.as_str()
            } else {
                names[*limit as usize / 2 % names.len()]
            };
            if let Err(e) = c.guest_describe(&p, callable) {
                assert!(e.message.len() <= 64 + MAX_CALLABLE_NAME_BYTES);
            }
            let mut args = Map::new();
            for (k, tag) in fields {
                args.insert(k.clone(), json_ish(*tag, k));
            }
            let input = if limit % 5 == 0 {
                Some(json_ish(*limit, name))
            } else {
                Some(Value::Object(args))
            };
            match c.guest_prepare_call(&p, callable, input.clone()) {
                Ok(prepared) => {
                    assert_eq!(
                        Some(prepared.arguments),
                        input.filter(|v| !v.is_null()).or(Some(json!({})))
                    );
                }
                Err(e) => assert!(e.message.len() <= 4_096, "{}", e.message.len()),
            }
            let _ = c.api_read(&p, name);
            let _ = c.mcp_api(name, Some(query), *limit % 3 == 0);
        });
}
