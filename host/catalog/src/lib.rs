//! quickcell's hidden tool catalog and Tool Search: callable names, BM25
//! ranking, signature hints, describe, call-time validation and the bounded
//! prompt surfaces. Normative specs: `tool-search.md` and `contract.md` §4,
//! §8.1–§8.4. This crate has no Wasmtime dependency.
//!
//! ```
//! use quickcell_catalog::{Catalog, SearchOptions, ToolSpec};
//! use serde_json::json;
//!
//! let catalog = Catalog::builder()
//!     .core(ToolSpec::new("web_search", "Search the web for current information")
//!         .with_input_schema(json!({"type":"object","required":["query"],
//!             "properties":{"query":{"type":"string"}}})))
//!     .core(ToolSpec::new("read_file", "Read a file from disk"))
//!     .mcp("Linear", ToolSpec::new("list-issues", "List issues"))
//!     .build();
//!
//! // Ranked search (stemming + query expansion: "price" adds "search"/"web").
//! let hits = catalog.search("look up the price", SearchOptions::default());
//! assert_eq!(hits[0].name(), "web_search");
//! assert_eq!(hits[0].input_hint(), Some("{ query: string }"));
//!
//! // Code Mode: tool globals and MCP handles.
//! let projection = catalog.callable_projection();
//! let names: Vec<_> = projection.bindings().iter().map(|b| b.callable_name.as_str()).collect();
//! assert_eq!(names, ["read_file", "web_search"]);
//! assert_eq!(projection.mcp_bindings()[0].callable_name, "MCP.linear.listIssues");
//!
//! // Call-time validation names the callable and shows the expected input.
//! let err = catalog.guest_prepare_call(&projection, "web_search", Some(json!({"qurey": "x"})))
//!     .unwrap_err();
//! assert_eq!(err.code(), Some("input_contract"));
//! assert!(err.message.ends_with("Did you mean: query? Expected input: { query: string }."));
//!
//! // Prompt surfaces.
//! assert!(catalog.quick_index(&projection).starts_with("- read_file unknown -> ?\n"));
//! assert_eq!(catalog.directory(), "Available deferred-schema tools:\n\
//!     - read_file (core): Read a file from disk\n\
//!     - web_search (core): Search the web for current information");
//! assert_eq!(catalog.telemetry(&["exec", "wait"]).search_count, 1);
//! ```
//!
//! # Modules
//!
//! - [`tokenize()`], [`stem()`], [`weighted_query`]: text processing (§3–§6).
//! - [`SearchIndex`]: BM25 and the search procedure (§7).
//! - [`input_hint`], [`output_hint`], [`render_schema`]: signature hints (§8).
//! - [`Catalog`]: entries, ids, order, shadowing, policy, counters (§1),
//!   describe and call preparation (§9), the surfaces (§10, §11,
//!   contract §8.1–§8.4) and `API.read` files.
//! - [`validate_input`], [`validate_output`]: contract validation (§9.2, §9.3).
//!
//! # Decisions on "open: implementation decides" points
//!
//! - **Client label**: client tools have ids `client:client:<name>`.
//! - **Source names in ids**: plugin ids and MCP server names are sanitized by
//!   replacing every character outside `[A-Za-z0-9_.-]` with `_`.
//! - **Collation**: lower-cased strings compared by code point, ties broken by
//!   ordinal comparison of the originals ([`collate`]), everywhere.
//! - **Lengths**: every "characters" budget (hints, quick index, directory,
//!   the 4,000-character search response) counts UTF-16 code units; the
//!   stemmer's and singularizer's lengths too. Cuts are surrogate-safe.
//! - **Stopwords**: the 57 words of [`STOPWORDS`].
//! - **Stemmer "stem of at least 3 characters"**: measured on the part left
//!   after removing the suffix, before appending a replacement (`y`).
//! - **`paramText` depth**: schemas at depth 0–4 contribute (description and
//!   property names); nothing deeper is visited.
//! - **Shadowing**: per exact tool name among host and client entries, a
//!   client entry beats any non-client entry and a later client entry beats
//!   an earlier one; among non-client entries the first in catalog order
//!   wins. MCP entries live under `MCP.<server>` and are never shadowed by
//!   name (two MCP entries with the same id keep the first). Policy and
//!   direct-only filtering happen before shadowing.
//! - **Index cache**: a catalog is built once ([`CatalogBuilder`]); its one
//!   mutation, [`Catalog::set_policy`], rebuilds the effective entries and the BM25
//!   index at once; signature hints and validators are computed lazily per
//!   entry and cached.
//! - **Policy**: allow/deny glob lists (`*` wildcard) matched against the tool
//!   name and the catalog id; deny wins; an allow list must match.
//! - **Hints**: output hints allow 800 characters; at most 5 `anyOf`/`oneOf`
//!   variants; numeric annotations are emitted in input hints only. A `false`
//!   subschema or non-object subschema renders `unknown` (incomplete).
//!   Objects append properties while they fit and stop at the first one that
//!   does not.
//! - **Validation**: schemas that cannot be compiled (invalid, or with an
//!   external `$ref`: no resolver is compiled in) are not validated by
//!   quickcell. Up to 5 details, shallow errors first, joined by `; `; each
//!   is prefixed with the JSON-pointer path of the offending value when not
//!   at the root. Did-you-mean uses case-insensitive equality or optimal
//!   string alignment distance ≤ max(1, ⌊len/3⌋) of the unexpected name;
//!   ties keep the first declared name in collation order. For objects that
//!   are not closed, an undeclared key close to a missing required property
//!   also suggests that property. The output note
//!   is "the call may already have taken effect, so do not repeat it
//!   blindly."
//! - **Structured `tool_call` repair**: see [`Catalog::tool_call_prepare`].
//!   Lookups accept the catalog id, the exact tool name, or
//!   `MCP.<server>.<tool>`; a name matching several entries is rejected as
//!   ambiguous.
//! - **`tool_search`**: hit `id` is the catalog id; a top-level `limit`
//!   applies to the scalar `query` and is the default for `queries` entries
//!   without their own; a non-integer limit falls back to the default; the
//!   response is `{results:[{query,hits}], truncated?: true}` and truncation
//!   drops hits from the end of the last non-empty group first.
//! - **Directory**: a shortened description plus its `...` fits within the
//!   chosen cap (so the cost is monotone and the largest cap is found by
//!   binary search); minimal descriptions are `...`; the closing line is
//!   `(<n> more tools omitted from this list; they remain searchable with
//!   tool_search.)`. Whitespace in descriptions collapses to single spaces;
//!   an empty description drops the `: ` separator.
//! - **Code Mode `catalog.search`**: an invalid `limit` falls back to the
//!   default; the exact-name shortcut tries case-sensitive matches (MCP
//!   callable names, then native callable/tool names) before
//!   case-insensitive ones and requires a unique match.
//! - **MCP identifiers**: first word lower-cased, later words capitalized
//!   (first letter upper, rest lower); a leading digit gets a `_` prefix; a
//!   name without alphanumerics becomes `server` / `tool`.
//! - **`API.read` scheme**: `results.d.ts`, `tools/<callableName>.d.ts`,
//!   `mcp/<server>.d.ts`; `describe` of a tool without an input schema
//!   reports `parameters: {"type":"object"}`.
//! - **`counterScope`**: 24 hex characters of SHA-256 over process id, a
//!   process-wide sequence number and the clock; fresh per built catalog,
//!   kept by every mutation.
//! - **Counting**: `callCount` counts calls that resolved and passed input
//!   validation (dispatched to the host path).
//! - **Untrusted envelope**: see [`wrap_untrusted`].
//! - **Configuration**: `searchDefaultLimit` and `maxSearchLimit` resolve
//!   through [`SearchLimits::from_config`].
//! - **Guest-driven work** (issue 19): host work driven by guest data is
//!   linear in input capped by a named constant. Search uses the first
//!   [`MAX_QUERY_BYTES`] of a query ([`cut_query`]) and its first
//!   [`MAX_QUERY_TERMS`] distinct terms (longer queries are cut, not
//!   rejected: search is best-effort ranking); limits are clamped to
//!   [`MAX_SEARCH_LIMIT`]; did-you-mean looks at [`MAX_SUGGESTION_KEYS`]
//!   names and only at names of at most [`MAX_SUGGESTION_NAME_CHARS`]
//!   characters; guest lookups reject names over [`MAX_CALLABLE_NAME_BYTES`]
//!   and `API.read` paths over [`MAX_API_PATH_BYTES`].

#![warn(missing_docs)]

/// The README's examples, run as doc tests so that they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExamples;

mod api_files;
mod catalog;
mod error;
mod expand;
mod hashing;
mod hints;
mod names;
mod projection;
mod search;
mod stem;
mod surfaces;
mod text;
mod tokenize;
mod validate;

pub use api_files::{mcp_declaration, tool_declaration, RESULTS_DTS};
pub use catalog::{
    glob_match, param_text, sanitize_source_name, Catalog, CatalogBuilder, CatalogMode, Entry,
    McpServer, Policy, SearchLimits, SearchOptions, Source, SourceCounts, SourceKind, Telemetry,
    ToolSpec, MAX_POLICY_PATTERNS, MAX_POLICY_PATTERN_BYTES, MAX_SEARCH_LIMIT,
    MCP_DESCRIPTION_UNITS,
};
pub use error::{CatalogError, ErrorKind};
pub use expand::{
    cut_query, singularize, weighted_query, QueryTerm, EXPANSIONS, EXPANSION_WEIGHT,
    MAX_QUERY_BYTES, MAX_QUERY_TERMS,
};
pub use hints::{
    input_hint, is_bare_key, output_hint, render_schema, HintBudget, RenderedHint,
    INPUT_HINT_BUDGET, OUTPUT_HINT_BUDGET,
};
pub use names::{
    assign_callable_names, assign_mcp_identifiers, callable_base, is_reserved_global,
    mcp_identifier, sha256_hex, NameCandidate, JS_INTRINSICS, JS_RESERVED_WORDS, LEGACY_GLOBALS,
    MCP_SERVER_RESERVED, QUICKCELL_GLOBALS,
};
pub use projection::{Binding, Projection, MAX_API_PATH_BYTES, MAX_CALLABLE_NAME_BYTES};
pub use search::{Hit, IndexDoc, SearchFilter, SearchIndex, SearchIndexBuilder, B, K1};
pub use stem::{stem, STEM_EXCEPTIONS};
pub use surfaces::{
    directory_omitted_line, neutralize_control_tokens, quick_index_omitted_footer,
    render_directory, wrap_untrusted, DirectoryRow, Meta, PreparedCall, BATCH_MAX_ENTRIES,
    BATCH_MAX_GRAPHEMES, BATCH_MAX_QUERY_BYTES, BATCH_MAX_RESULTS, DIRECTORY_CHARS,
    DIRECTORY_HEADER, DIRECTORY_NONE, QUICK_INDEX_CHARS, QUICK_INDEX_FOOTER, SEARCH_RESPONSE_CHARS,
};
pub use text::{collate, safe_cut_bytes, safe_cut_utf16, utf16_len, CollationKey};
pub use tokenize::{is_stopword, query_words, split_parts, split_words, tokenize, STOPWORDS};
pub use validate::{
    closest, osa_distance, validate_input, validate_output, MAX_SUGGESTION_KEYS,
    MAX_SUGGESTION_NAME_CHARS,
};

#[cfg(test)]
mod hardening_tests;
#[cfg(test)]
mod tests;
