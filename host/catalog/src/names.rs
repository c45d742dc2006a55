//! Callable names for tool globals (contract.md §8.1) and MCP namespace
//! identifiers (contract.md §8.4).

use crate::text::CollationKey;
use sha2::{Digest, Sha256};
use std::collections::HashSet;

/// quickcell's own guest globals.
pub const QUICKCELL_GLOBALS: &[&str] = &[
    "API",
    "MCP",
    "catalog",
    "namespaces",
    "results",
    "store",
    "load",
    "text",
    "json",
    "console",
    "setTimeout",
    "clearTimeout",
    "yield_control",
    "TextEncoder",
    "TextDecoder",
    "globalThis",
];

/// Legacy and future names kept free.
pub const LEGACY_GLOBALS: &[&str] = &[
    "ALL_TOOLS",
    "tools",
    "agents",
    "nodes",
    "skills",
    "log",
    "phase",
];

/// Intrinsics on the QuickJS(-ng) global object, plus `Object.prototype`
/// members reachable as globals that must never be shadowed.
pub const JS_INTRINSICS: &[&str] = &[
    "globalThis",
    "undefined",
    "NaN",
    "Infinity",
    "eval",
    "isNaN",
    "isFinite",
    "parseInt",
    "parseFloat",
    "encodeURI",
    "decodeURI",
    "encodeURIComponent",
    "decodeURIComponent",
    "escape",
    "unescape",
    "Object",
    "Function",
    "Array",
    "Number",
    "Boolean",
    "String",
    "Symbol",
    "BigInt",
    "Math",
    "JSON",
    "Reflect",
    "Proxy",
    "Promise",
    "Date",
    "RegExp",
    "Map",
    "Set",
    "WeakMap",
    "WeakSet",
    "WeakRef",
    "FinalizationRegistry",
    "ArrayBuffer",
    "SharedArrayBuffer",
    "DataView",
    "Atomics",
    "Int8Array",
    "Uint8Array",
    "Uint8ClampedArray",
    "Int16Array",
    "Uint16Array",
    "Int32Array",
    "Uint32Array",
    "BigInt64Array",
    "BigUint64Array",
    "Float16Array",
    "Float32Array",
    "Float64Array",
    "Error",
    "EvalError",
    "RangeError",
    "ReferenceError",
    "SyntaxError",
    "TypeError",
    "URIError",
    "InternalError",
    "AggregateError",
    "SuppressedError",
    "DOMException",
    "Iterator",
    "AsyncIterator",
    "DisposableStack",
    "AsyncDisposableStack",
    "performance",
    "queueMicrotask",
    "structuredClone",
    "navigator",
    "gc",
    "print",
    "arguments",
    "__proto__",
    "constructor",
    "prototype",
    "toString",
    "toLocaleString",
    "valueOf",
    "hasOwnProperty",
    "isPrototypeOf",
    "propertyIsEnumerable",
    "__defineGetter__",
    "__defineSetter__",
    "__lookupGetter__",
    "__lookupSetter__",
];

/// ECMAScript keywords and strict-mode reserved words.
pub const JS_RESERVED_WORDS: &[&str] = &[
    "break",
    "case",
    "catch",
    "class",
    "const",
    "continue",
    "debugger",
    "default",
    "delete",
    "do",
    "else",
    "export",
    "extends",
    "false",
    "finally",
    "for",
    "function",
    "if",
    "import",
    "in",
    "instanceof",
    "let",
    "new",
    "null",
    "return",
    "super",
    "switch",
    "this",
    "throw",
    "true",
    "try",
    "typeof",
    "var",
    "void",
    "while",
    "with",
    "await",
    "enum",
    "implements",
    "interface",
    "package",
    "private",
    "protected",
    "public",
    "static",
    "yield",
];

/// Names each MCP server object reserves for itself.
pub const MCP_SERVER_RESERVED: &[&str] = &["$api", "resources", "prompts"];

/// Whether `name` is reserved for tool globals (contract.md §8.1 item 6).
pub fn is_reserved_global(name: &str) -> bool {
    QUICKCELL_GLOBALS.contains(&name)
        || LEGACY_GLOBALS.contains(&name)
        || JS_INTRINSICS.contains(&name)
        || JS_RESERVED_WORDS.contains(&name)
}

/// Step 2 of the projection: `name.replace(/[^A-Za-z0-9_$]/g, "_")`, prefixed
/// with `tool_` when it does not start with `[A-Za-z_$]` or starts with
/// `__quickcell`.
///
/// ```
/// use quickcell_catalog::callable_base;
/// assert_eq!(callable_base("llm-task"), "llm_task");
/// assert_eq!(callable_base("9patch"), "tool_9patch");
/// assert_eq!(callable_base("__quickcellResult"), "tool___quickcellResult");
/// ```
pub fn callable_base(name: &str) -> String {
    // JavaScript's regex without the `u` flag replaces each UTF-16 code unit.
    let mut base = String::with_capacity(name.len());
    for c in name.chars() {
        if c.is_ascii_alphanumeric() || c == '_' || c == '$' {
            base.push(c);
        } else {
            for _ in 0..c.len_utf16() {
                base.push('_');
            }
        }
    }
    let starts_ok = base
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '$');
    if !starts_ok || base.starts_with("__quickcell") {
        base.insert_str(0, "tool_");
    }
    base
}

/// Lower-case hex SHA-256 of `s`.
pub fn sha256_hex(s: &str) -> String {
    sha256_hex_bytes(&Sha256::digest(s.as_bytes()))
}

/// Lower-case hex of raw bytes.
pub(crate) fn sha256_hex_bytes(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// One projection candidate: a winning non-MCP entry.
#[derive(Debug, Clone)]
pub struct NameCandidate<'a> {
    /// Original tool name.
    pub name: &'a str,
    /// Catalog id.
    pub id: &'a str,
}

/// Assign callable names (contract.md §8.1 steps 2–4). Returns one callable
/// name per candidate, in the input order. `extra_reserved` adds names taken
/// by the MCP namespace.
pub fn assign_callable_names(
    candidates: &[NameCandidate<'_>],
    extra_reserved: &HashSet<String>,
) -> Vec<String> {
    let reserved = |n: &str| is_reserved_global(n) || extra_reserved.contains(n);
    let bases: Vec<String> = candidates.iter().map(|c| callable_base(c.name)).collect();
    let mut order: Vec<usize> = (0..candidates.len()).collect();
    let keep: Vec<bool> = candidates
        .iter()
        .zip(&bases)
        .map(|(c, b)| c.name == b && !reserved(b))
        .collect();
    let base_keys: Vec<CollationKey> = bases.iter().map(|b| CollationKey::new(b)).collect();
    let id_keys: Vec<CollationKey> = candidates.iter().map(|c| CollationKey::new(c.id)).collect();
    order.sort_by(|&a, &b| {
        keep[b]
            .cmp(&keep[a])
            .then_with(|| base_keys[a].cmp(&base_keys[b]))
            .then_with(|| id_keys[a].cmp(&id_keys[b]))
    });
    let mut taken: HashSet<String> = HashSet::new();
    let mut out = vec![String::new(); candidates.len()];
    for i in order {
        let base = &bases[i];
        let name = if !reserved(base) && !taken.contains(base) {
            base.clone()
        } else {
            let hex = sha256_hex(candidates[i].id);
            let mut len = 8;
            loop {
                let candidate = if len <= hex.len() {
                    format!("{base}_{}", &hex[..len])
                } else {
                    // Astronomically unlikely: extend with a counter.
                    format!("{base}_{hex}_{}", len - hex.len())
                };
                if !reserved(&candidate) && !taken.contains(&candidate) {
                    break candidate;
                }
                len += 2;
            }
        };
        taken.insert(name.clone());
        out[i] = name;
    }
    out
}

/// Camel-case an MCP server or tool name into a JavaScript identifier
/// (contract.md §8.4): split on non-alphanumerics, lower-case the first word,
/// capitalize the rest (first letter upper-case, remaining letters
/// lower-case). A leading digit gets a `_` prefix; a name without any
/// alphanumerics becomes `fallback`.
///
/// ```
/// use quickcell_catalog::mcp_identifier;
/// assert_eq!(mcp_identifier("list-invoices", "tool"), "listInvoices");
/// assert_eq!(mcp_identifier("GET_USER_INFO", "tool"), "getUserInfo");
/// assert_eq!(mcp_identifier("2fa", "tool"), "_2fa");
/// ```
pub fn mcp_identifier(name: &str, fallback: &str) -> String {
    let mut out = String::new();
    for (i, word) in name
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .enumerate()
    {
        if i == 0 {
            out.push_str(&word.to_ascii_lowercase());
        } else {
            let mut chars = word.chars();
            if let Some(first) = chars.next() {
                out.push(first.to_ascii_uppercase());
                out.push_str(&chars.as_str().to_ascii_lowercase());
            }
        }
    }
    if out.is_empty() {
        return fallback.to_string();
    }
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

/// Whether an MCP identifier must be avoided (reserved globals, reserved
/// words, `__proto__`, `constructor`, `prototype`).
fn mcp_avoid(name: &str) -> bool {
    is_reserved_global(name)
}

/// Assign unique identifiers with numeric suffixes `2`, `3`, … in input order.
/// `server_scope` adds the per-server reserved names (`$api`, `resources`,
/// `prompts`).
pub fn assign_mcp_identifiers(names: &[&str], server_scope: bool, fallback: &str) -> Vec<String> {
    let mut taken: HashSet<String> = HashSet::new();
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let base = mcp_identifier(name, fallback);
        let blocked = |n: &str, taken: &HashSet<String>| {
            taken.contains(n) || mcp_avoid(n) || (server_scope && MCP_SERVER_RESERVED.contains(&n))
        };
        let mut ident = base.clone();
        let mut k = 2;
        while blocked(&ident, &taken) {
            ident = format!("{base}{k}");
            k += 1;
        }
        taken.insert(ident.clone());
        out.push(ident);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contract_example_2_names() {
        let tools = [
            ("llm-task", "host:core:llm-task"),
            ("llm_task", "host:core:llm_task"),
            ("catalog", "host:core:catalog"),
            ("class", "host:core:class"),
            ("9patch", "host:core:9patch"),
            ("__quickcellResult", "host:core:__quickcellResult"),
            ("tool___quickcellResult", "host:core:tool___quickcellResult"),
        ];
        let cands: Vec<NameCandidate> = tools
            .iter()
            .map(|(n, i)| NameCandidate { name: n, id: i })
            .collect();
        let names = assign_callable_names(&cands, &HashSet::new());
        let hex = |re_base: &str, s: &str| {
            s.strip_prefix(re_base)
                .and_then(|r| r.strip_prefix('_'))
                .is_some_and(|h| {
                    h.len() == 8 && h.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f'))
                })
        };
        assert_eq!(names[1], "llm_task");
        assert!(hex("llm_task", &names[0]), "{}", names[0]);
        assert_eq!(
            names[0],
            format!("llm_task_{}", &sha256_hex("host:core:llm-task")[..8])
        );
        assert!(hex("catalog", &names[2]), "{}", names[2]);
        assert!(hex("class", &names[3]), "{}", names[3]);
        assert_eq!(names[4], "tool_9patch");
        assert!(hex("tool___quickcellResult", &names[5]), "{}", names[5]);
        assert_eq!(names[6], "tool___quickcellResult");
        assert!(names.iter().all(|n| !n.starts_with("__quickcell")));
        let unique: HashSet<&String> = names.iter().collect();
        assert_eq!(unique.len(), names.len());
    }

    #[test]
    fn reserved_names_cover_intrinsics() {
        for n in [
            "Array",
            "Object",
            "eval",
            "undefined",
            "globalThis",
            "Promise",
            "JSON",
            "Math",
            "Reflect",
            "Proxy",
            "Symbol",
            "Map",
            "Set",
            "WeakMap",
            "WeakSet",
            "WeakRef",
            "FinalizationRegistry",
            "ArrayBuffer",
            "SharedArrayBuffer",
            "DataView",
            "Uint8Array",
            "Float64Array",
            "BigInt64Array",
            "BigInt",
            "Boolean",
            "Number",
            "String",
            "Date",
            "RegExp",
            "Error",
            "TypeError",
            "AggregateError",
            "Function",
            "isNaN",
            "isFinite",
            "parseInt",
            "parseFloat",
            "encodeURI",
            "decodeURIComponent",
            "escape",
            "unescape",
            "Atomics",
            "Iterator",
            "performance",
            "queueMicrotask",
            "structuredClone",
            "API",
            "MCP",
            "yield_control",
            "ALL_TOOLS",
            "phase",
            "await",
            "yield",
            "enum",
            "static",
        ] {
            assert!(is_reserved_global(n), "{n}");
        }
        for n in ["exec", "wait", "process", "web_search", "read"] {
            assert!(!is_reserved_global(n), "{n}");
        }
    }

    #[test]
    fn collision_suffix_grows_when_taken() {
        // A tool literally named like the 8-hex suffix forces 10 hex digits.
        let id = "host:core:Array";
        let eight = format!("Array_{}", &sha256_hex(id)[..8]);
        let cands = [
            NameCandidate { name: "Array", id },
            NameCandidate {
                name: &eight,
                id: "host:core:other",
            },
        ];
        let names = assign_callable_names(&cands, &HashSet::new());
        assert_eq!(names[1], eight);
        assert_eq!(names[0], format!("Array_{}", &sha256_hex(id)[..10]));
    }

    #[test]
    fn order_prefers_exact_then_base_then_id() {
        // Two non-exact names share a base; the one with the smaller id wins
        // the bare base only if no exact owner exists.
        let cands = [
            NameCandidate {
                name: "a-b",
                id: "host:core:z",
            },
            NameCandidate {
                name: "a.b",
                id: "host:core:a",
            },
        ];
        let names = assign_callable_names(&cands, &HashSet::new());
        assert_eq!(names[1], "a_b");
        assert!(names[0].starts_with("a_b_"));
    }

    #[test]
    fn mcp_identifiers() {
        assert_eq!(mcp_identifier("list-invoices", "t"), "listInvoices");
        assert_eq!(mcp_identifier("Linear", "s"), "linear");
        assert_eq!(mcp_identifier("---", "server"), "server");
        let ids = assign_mcp_identifiers(
            &[
                "list-invoices",
                "list_invoices",
                "resources",
                "$api",
                "constructor",
                "class",
            ],
            true,
            "tool",
        );
        assert_eq!(
            ids,
            [
                "listInvoices",
                "listInvoices2",
                "resources2",
                "api",
                "constructor2",
                "class2"
            ]
        );
    }
}
