//! Call-time input validation and output-schema validation
//! (tool-search.md §9.2, §9.3) on top of the `jsonschema` crate.

use crate::error::{CatalogError, ErrorKind};
use crate::text::{safe_cut_bytes, CollationKey};
use jsonschema::error::ValidationErrorKind;
use jsonschema::{ValidationError, Validator};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};

/// At most this many validation details are reported.
pub const MAX_DETAILS: usize = 5;
/// Each output-validation detail is safe-cut to this many UTF-8 bytes.
pub const OUTPUT_DETAIL_BYTES: usize = 256;

/// Longest property name, in characters (Unicode scalar values), for which
/// a did-you-mean suggestion is computed. The edit distance is quadratic in
/// name length, so it is only computed when both the unexpected name and the
/// declared candidate are at most this long; a longer unexpected name simply
/// gets no suggestion (the error itself is unchanged).
pub const MAX_SUGGESTION_NAME_CHARS: usize = 64;

/// Most property names of one input that the did-you-mean search looks at
/// (names). Unexpected names are tried in validator order, then undeclared
/// keys of open objects; after this many names the search stops, and an
/// input whose close name comes later gets no suggestion.
pub const MAX_SUGGESTION_KEYS: usize = 64;

/// Serialized name lists in error details stop growing past this many UTF-8
/// bytes: every detail is cut to far fewer ([`OUTPUT_DETAIL_BYTES`], 300 for
/// inputs) before anyone sees it, so the text shown is unchanged.
const DETAIL_LIST_BYTES: usize = 4_096;

/// Compile a schema. `None` when the schema is not a valid JSON Schema or
/// needs an external `$ref` (no resolver is compiled in); such tools are then
/// not validated by quickcell (their own implementation still validates).
pub fn compile(schema: &Value) -> Option<Validator> {
    jsonschema::validator_for(schema).ok()
}

/// Most compiled schemas [`compile_shared`] keeps for the process. When it
/// is full it starts over (schemas are compiled again on their next use).
pub const SHARED_VALIDATORS: usize = 1024;

/// [`compile`], shared by every catalog of the process: a schema (by its
/// JSON text) is compiled once, however many catalogs carry it. A host that
/// builds a runtime per tenant or per request over the same tools then
/// pays the compilation (~15 µs for `{"type":"object"}`, far more for a
/// real tool's schema) once, not at the first call of each catalog.
/// Validators are immutable, so sharing one changes nothing a caller sees.
pub fn compile_shared(schema: &Value) -> Option<Arc<Validator>> {
    static SHARED: OnceLock<Mutex<HashMap<String, Option<Arc<Validator>>>>> = OnceLock::new();
    let key = serde_json::to_string(schema).ok()?;
    let shared = SHARED.get_or_init(Default::default);
    if let Some(found) = shared.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return found.clone();
    }
    // Compiled outside the lock: a schema may take milliseconds.
    let compiled = compile(schema).map(Arc::new);
    let mut map = shared.lock().unwrap_or_else(|p| p.into_inner());
    if map.len() >= SHARED_VALIDATORS {
        map.clear();
    }
    map.insert(key, compiled.clone());
    compiled
}

/// Validate `args` against a trusted host tool's input schema.
///
/// On failure returns an `input_contract` error with the text
/// `Invalid arguments for tool "<name>": <details>.` optionally followed by
/// ` Did you mean: <property>?` and ` Expected input: <hint>.`
///
/// ```
/// use quickcell_catalog::validate_input;
/// use serde_json::json;
/// let schema = json!({"type":"object","required":["query"],
///     "properties":{"query":{"type":"string"}},"additionalProperties":false});
/// let err = validate_input(&schema, &json!({"qeury":"x"}), "web_search", Some("{ query: string }"))
///     .unwrap_err();
/// assert_eq!(err.message, "Invalid arguments for tool \"web_search\": missing required property \"query\"; \
/// unexpected property \"qeury\". Did you mean: query? Expected input: { query: string }.");
/// ```
pub fn validate_input(
    schema: &Value,
    args: &Value,
    tool_name: &str,
    hint: Option<&str>,
) -> Result<(), CatalogError> {
    match compile(schema) {
        Some(v) => validate_input_with(&v, schema, args, tool_name, hint),
        None => Ok(()),
    }
}

/// [`validate_input`] with an already compiled validator.
pub fn validate_input_with(
    validator: &Validator,
    schema: &Value,
    args: &Value,
    tool_name: &str,
    hint: Option<&str>,
) -> Result<(), CatalogError> {
    let errors: Vec<ValidationError> = validator.iter_errors(args).collect();
    if errors.is_empty() {
        return Ok(());
    }
    let details: Vec<String> = ordered(&errors)
        .into_iter()
        .take(MAX_DETAILS)
        .map(|e| safe_cut_bytes(&describe_error(e), 300).to_string())
        .collect();
    let mut msg = format!(
        "Invalid arguments for tool \"{tool_name}\": {}.",
        details.join("; ").trim_end_matches('.')
    );
    if let Some(s) = did_you_mean(schema, &errors) {
        msg.push_str(&format!(" Did you mean: {s}?"));
    }
    if let Some(h) = hint {
        msg.push_str(&format!(" Expected input: {h}."));
    }
    Err(CatalogError::new(ErrorKind::InputContract, msg))
}

/// Validate a trusted tool's result details against its declared
/// `outputSchema`. On failure returns an `output_contract` error.
pub fn validate_output(
    schema: &Value,
    details: &Value,
    tool_name: &str,
) -> Result<(), CatalogError> {
    match compile(schema) {
        Some(v) => validate_output_with(&v, details, tool_name),
        None => Ok(()),
    }
}

/// [`validate_output`] with an already compiled validator.
pub fn validate_output_with(
    validator: &Validator,
    details: &Value,
    tool_name: &str,
) -> Result<(), CatalogError> {
    let errors: Vec<ValidationError> = validator.iter_errors(details).collect();
    if errors.is_empty() {
        return Ok(());
    }
    let details: Vec<String> = ordered(&errors)
        .into_iter()
        .take(MAX_DETAILS)
        .map(|e| {
            let d = describe_error(e);
            if d.len() > OUTPUT_DETAIL_BYTES {
                format!("{}[truncated]", safe_cut_bytes(&d, OUTPUT_DETAIL_BYTES))
            } else {
                d
            }
        })
        .collect();
    let msg = format!(
        "Tool \"{tool_name}\" returned details that do not match its declared outputSchema. \
         Check current state before retrying; the call may already have taken effect, so do not \
         repeat it blindly. Validation: {}",
        details.join("; ")
    );
    Err(CatalogError::new(ErrorKind::OutputContract, msg))
}

/// Shallow errors first; at one depth missing properties, then unexpected
/// ones, then the rest in validator order.
fn ordered<'a, 'b>(errors: &'b [ValidationError<'a>]) -> Vec<&'b ValidationError<'a>> {
    let mut v: Vec<&ValidationError> = errors.iter().collect();
    v.sort_by_key(|e| {
        let rank = match e.kind() {
            ValidationErrorKind::Required { .. } => 0,
            ValidationErrorKind::AdditionalProperties { .. }
            | ValidationErrorKind::UnevaluatedProperties { .. } => 1,
            _ => 2,
        };
        (e.instance_path().iter().count(), rank)
    });
    v
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn literal_list(v: &Value) -> String {
    match v {
        Value::Array(items) => items
            .iter()
            .map(|i| serde_json::to_string(i).unwrap_or_default())
            .collect::<Vec<_>>()
            .join(", "),
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}

/// The names JSON-quoted and joined by `, `, stopping once the text is
/// longer than [`DETAIL_LIST_BYTES`] (a name is serialized from a prefix of
/// that many bytes at most). The result is a prefix of the full list at
/// least `DETAIL_LIST_BYTES` long, so cutting it to a detail's budget gives
/// the same text as cutting the full list, at a cost independent of the
/// number and length of the names.
fn quoted_list(names: &[String]) -> String {
    let mut out = String::new();
    for (i, n) in names.iter().enumerate() {
        if out.len() > DETAIL_LIST_BYTES {
            break;
        }
        if i > 0 {
            out.push_str(", ");
        }
        let n = safe_cut_bytes(n, DETAIL_LIST_BYTES);
        out.push_str(&serde_json::to_string(n).unwrap_or_default());
    }
    out
}

/// One detail, prefixed by the JSON-pointer path of the offending value
/// (omitted at the root).
fn describe_error(e: &ValidationError) -> String {
    let path = e.instance_path().as_str().to_string();
    let body = match e.kind() {
        ValidationErrorKind::Required { property } => match property.as_str() {
            Some(p) => format!(
                "missing required property {}",
                serde_json::to_string(p).unwrap_or_default()
            ),
            None => format!("missing required property {property}"),
        },
        ValidationErrorKind::AdditionalProperties { unexpected }
        | ValidationErrorKind::UnevaluatedProperties { unexpected } => {
            let noun = if unexpected.len() == 1 {
                "property"
            } else {
                "properties"
            };
            format!("unexpected {noun} {}", quoted_list(unexpected))
        }
        ValidationErrorKind::Type { kind } => {
            let expected = match kind {
                jsonschema::error::TypeKind::Single(t) => t.as_str().to_string(),
                jsonschema::error::TypeKind::Multiple(set) => set
                    .iter()
                    .map(|t| t.as_str())
                    .collect::<Vec<_>>()
                    .join(" or "),
            };
            format!("expected {expected}, got {}", json_type(e.instance()))
        }
        ValidationErrorKind::Enum { options } => {
            format!("must be one of {}", literal_list(options))
        }
        ValidationErrorKind::Constant { expected_value } => {
            format!(
                "must equal {}",
                serde_json::to_string(&**expected_value).unwrap_or_default()
            )
        }
        _ => {
            let text = e.to_string();
            safe_cut_bytes(&text, 4096).to_string()
        }
    };
    if path.is_empty() {
        body
    } else {
        format!("{path}: {body}")
    }
}

/// Declared properties of the object schema at `path` (a walk through
/// `properties` and object-form `items`).
fn declared_properties<'s>(schema: &'s Value, segments: &[String]) -> Vec<&'s String> {
    let mut cur = schema;
    for seg in segments {
        let next = cur
            .get("properties")
            .and_then(|p| p.get(seg.as_str()))
            .or_else(|| {
                seg.parse::<usize>()
                    .ok()
                    .and_then(|_| cur.get("items").filter(|i| i.is_object()))
            });
        match next {
            Some(n) => cur = n,
            None => return Vec::new(),
        }
    }
    cur.get("properties")
        .and_then(Value::as_object)
        .map(|m| m.keys().collect())
        .unwrap_or_default()
}

fn did_you_mean(schema: &Value, errors: &[ValidationError]) -> Option<String> {
    // Every property name looked at spends one unit; the search stops when
    // the budget is spent.
    let mut budget = MAX_SUGGESTION_KEYS;
    for e in errors {
        let unexpected = match e.kind() {
            ValidationErrorKind::AdditionalProperties { unexpected }
            | ValidationErrorKind::UnevaluatedProperties { unexpected } => unexpected,
            _ => continue,
        };
        if budget == 0 {
            return None;
        }
        let segments: Vec<String> = e.instance_path().iter().map(|s| s.to_string()).collect();
        let mut declared = declared_properties(schema, &segments);
        declared.sort_by_cached_key(|k| CollationKey::new(k));
        for u in unexpected {
            if budget == 0 {
                return None;
            }
            budget -= 1;
            if let Some(s) = closest(u, &declared) {
                return Some(s.to_string());
            }
        }
    }
    // Open objects: an undeclared key close to a missing required property.
    for e in errors {
        let ValidationErrorKind::Required { property } = e.kind() else {
            continue;
        };
        let (Some(missing), Some(obj)) = (property.as_str(), e.instance().as_object()) else {
            continue;
        };
        if budget == 0 {
            return None;
        }
        let segments: Vec<String> = e.instance_path().iter().map(|s| s.to_string()).collect();
        let declared: HashSet<&str> = declared_properties(schema, &segments)
            .into_iter()
            .map(String::as_str)
            .collect();
        let missing = missing.to_string();
        for key in obj.keys() {
            if budget == 0 {
                return None;
            }
            budget -= 1;
            if declared.contains(key.as_str()) {
                continue;
            }
            if closest(key, &[&missing]).is_some() {
                return Some(missing);
            }
        }
    }
    None
}

/// The closest declared name: case-insensitive equality, or optimal-string-
/// alignment Damerau–Levenshtein distance ≤ max(1, floor(len/3)) where `len`
/// is the character length of the unexpected name. Ties keep the first
/// candidate in collation order.
///
/// Names longer than [`MAX_SUGGESTION_NAME_CHARS`] characters take no part:
/// an unexpected name over the cap gets `None` at once (without lower-casing
/// or measuring more than the cap), and a declared name over the cap is never
/// suggested. Candidates whose length differs by more than the threshold are
/// skipped without computing the distance (it is at least the difference).
/// The work is thus at most `declared.len()` distances of at most
/// `MAX_SUGGESTION_NAME_CHARS`² steps each.
pub fn closest<'a>(unexpected: &str, declared: &[&'a String]) -> Option<&'a str> {
    let within_cap = |s: &str| {
        s.chars().take(MAX_SUGGESTION_NAME_CHARS + 1).count() <= MAX_SUGGESTION_NAME_CHARS
    };
    if !within_cap(unexpected) {
        return None;
    }
    let u: Vec<char> = unexpected.to_lowercase().chars().collect();
    let threshold = std::cmp::max(1, unexpected.chars().count() / 3);
    let mut best: Option<(usize, &str)> = None;
    for d in declared {
        if !within_cap(d) {
            continue;
        }
        let dv: Vec<char> = d.to_lowercase().chars().collect();
        if u.len().abs_diff(dv.len()) > threshold {
            continue;
        }
        let dist = osa_distance(&u, &dv);
        if dist <= threshold && best.is_none_or(|(b, _)| dist < b) {
            best = Some((dist, d.as_str()));
        }
    }
    best.map(|(_, s)| s)
}

/// Optimal string alignment distance (Damerau–Levenshtein with adjacent
/// transpositions, no substring edited twice).
///
/// Takes `a.len() · b.len()` steps and three rows of `b.len() + 1` cells:
/// callers bound the lengths ([`closest`] caps both names at
/// [`MAX_SUGGESTION_NAME_CHARS`]).
pub fn osa_distance(a: &[char], b: &[char]) -> usize {
    let m = b.len();
    // Rows i-2, i-1 and i of the full matrix.
    let mut prev2 = vec![0usize; m + 1];
    let mut prev: Vec<usize> = (0..=m).collect();
    let mut cur = vec![0usize; m + 1];
    for i in 1..=a.len() {
        cur[0] = i;
        for j in 1..=m {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (prev[j] + 1).min(cur[j - 1] + 1).min(prev[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(prev2[j - 2] + 1);
            }
            cur[j] = v;
        }
        std::mem::swap(&mut prev2, &mut prev);
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[m]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "required": ["id", "mode"],
            "additionalProperties": false,
            "properties": {
                "id": {"type": "string"},
                "mode": {"enum": ["drip", "flood"]},
                "count": {"type": "integer"},
                "kind": {"const": "fixed"},
                "nested": {"type":"object","additionalProperties":false,
                    "properties":{"zone":{"type":"string"}}}
            }
        })
    }

    fn err(args: Value) -> String {
        validate_input(&schema(), &args, "irrigate", Some("{ id: string }"))
            .unwrap_err()
            .message
    }

    #[test]
    fn valid_input_passes() {
        assert!(validate_input(&schema(), &json!({"id":"a","mode":"drip"}), "t", None).is_ok());
    }

    #[test]
    fn missing_required() {
        let m = err(json!({"mode":"drip"}));
        assert_eq!(
            m,
            "Invalid arguments for tool \"irrigate\": missing required property \"id\". Expected input: { id: string }."
        );
    }

    #[test]
    fn wrong_type_enum_const() {
        let m = err(json!({"id": 5, "mode": "rain", "kind": "x"}));
        assert!(m.contains("/id: expected string, got integer"), "{m}");
        assert!(
            m.contains("/mode: must be one of \"drip\", \"flood\""),
            "{m}"
        );
        assert!(m.contains("/kind: must equal \"fixed\""), "{m}");
        assert!(m.starts_with("Invalid arguments for tool \"irrigate\": "));
        assert!(m.ends_with(" Expected input: { id: string }."));
    }

    #[test]
    fn unexpected_property_with_did_you_mean() {
        let m = err(json!({"id":"a","mode":"drip","cuont": 1}));
        assert_eq!(
            m,
            "Invalid arguments for tool \"irrigate\": unexpected property \"cuont\". Did you mean: count? Expected input: { id: string }."
        );
        // Case-insensitive equality counts as close.
        assert!(err(json!({"id":"a","mode":"drip","MODE":"x"})).contains("Did you mean: mode?"));
        // Nothing close: no suggestion.
        let m = err(json!({"id":"a","mode":"drip","zzzzzzzz": 1}));
        assert!(!m.contains("Did you mean"), "{m}");
    }

    #[test]
    fn nested_violation_has_path_and_suggestion() {
        let m = validate_input(
            &schema(),
            &json!({"id":"a","mode":"drip","nested":{"zome":"x"}}),
            "irrigate",
            None,
        )
        .unwrap_err();
        assert_eq!(m.code(), Some("input_contract"));
        assert_eq!(m.effect_status(), Some("unknown"));
        assert_eq!(
            m.message,
            "Invalid arguments for tool \"irrigate\": /nested: unexpected property \"zome\". Did you mean: zone?"
        );
    }

    #[test]
    fn output_validation_message() {
        let s = json!({"type":"object","required":["ok"],"properties":{"ok":{"type":"boolean"}}});
        assert!(validate_output(&s, &json!({"ok":true}), "t").is_ok());
        let e = validate_output(&s, &json!({"ok":"yes"}), "t").unwrap_err();
        assert_eq!(e.code(), Some("output_contract"));
        assert!(e.message.starts_with(
            "Tool \"t\" returned details that do not match its declared outputSchema. Check current state before retrying; "
        ));
        assert!(
            e.message
                .ends_with("Validation: /ok: expected boolean, got string"),
            "{}",
            e.message
        );
        // At most 5 details, each cut to 256 bytes plus [truncated].
        let s = json!({"type":"array","items":{"type":"string","maxLength":1}});
        let long = "é".repeat(400);
        let vals: Vec<Value> = (0..8).map(|_| json!(long)).collect();
        let e = validate_output(&s, &Value::Array(vals), "t").unwrap_err();
        let tail = e.message.split("Validation: ").nth(1).unwrap();
        let parts: Vec<&str> = tail
            .split("[truncated]")
            .filter(|p| !p.is_empty())
            .collect();
        assert_eq!(parts.len(), MAX_DETAILS, "{tail}");
        for p in parts {
            assert!(p.trim_start_matches("; ").len() <= OUTPUT_DETAIL_BYTES);
        }
    }

    #[test]
    fn distance() {
        let c = |s: &str| s.chars().collect::<Vec<_>>();
        assert_eq!(osa_distance(&c("qeury"), &c("query")), 1);
        assert_eq!(osa_distance(&c("kitten"), &c("sitting")), 3);
        let q = "query".to_string();
        let l = "limit".to_string();
        assert_eq!(closest("qurey", &[&l, &q]), Some("query"));
        assert_eq!(closest("x", &[&l, &q]), None);
    }
}

#[cfg(test)]
mod shared_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn equal_schemas_share_one_validator_up_to_the_cap() {
        // One test: the cache is process-wide, and the cap check clears it.
        let schema = json!({"type": "object", "properties": {"shared-test": {"type": "string"}}});
        let a = compile_shared(&schema).expect("valid schema");
        let b = compile_shared(&schema.clone()).expect("valid schema");
        assert!(Arc::ptr_eq(&a, &b), "the same schema text is compiled once");
        let other = compile_shared(&json!({"type": "array"})).expect("valid schema");
        assert!(!Arc::ptr_eq(&a, &other));
        assert!(
            compile_shared(&json!({"type": 12})).is_none(),
            "invalid schemas stay unvalidated"
        );
        assert!(b.is_valid(&json!({"shared-test": "x"})));
        assert!(!b.is_valid(&json!({"shared-test": 1})));
        // Past the cap the cache starts over: the schema is compiled anew,
        // and still validates the same way.
        for i in 0..SHARED_VALIDATORS {
            compile_shared(&json!({"type": "object", "title": format!("filler {i}")}));
        }
        let c = compile_shared(&schema).expect("valid schema");
        assert!(!Arc::ptr_eq(&a, &c));
        assert!(!c.is_valid(&json!({"shared-test": 1})));
    }
}
