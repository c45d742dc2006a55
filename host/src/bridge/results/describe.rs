//! The descriptor of a saved result (contract.md §8.9).
//!
//! `save(value)` resolves `{ id, bytes, count, shape, preview,
//! previewTruncated }`, at most [`MAX_DESCRIPTOR_BYTES`] serialized.
//! [`describe`] builds everything but the id; [`descriptor_json`] assembles
//! the object the guest receives and shrinks it until it fits.
//!
//! # Units
//!
//! Every size is in UTF-8 bytes of compact JSON (`serde_json::to_string`),
//! except the shape, which is plain text measured in its own UTF-8 bytes.
//! String and key limits are measured on the *escaped* JSON content (without
//! the quotes), so `"\u0001"` costs 6 bytes and `é` costs 2. Every cut is made
//! at a char boundary (never inside a code point or an escape), a cut never
//! ends with a zero-width joiner (it is dropped), and a cut is marked by
//! appending `…` (U+2026, 3 bytes).
//!
//! # Decisions where the contract is vague
//!
//! - `bytes`: the compact JSON size of the value; `count`: array length,
//!   object key count, or 1 for a scalar.
//! - `preview` is the value itself when `bytes ≤ 256`
//!   (`previewTruncated: false`); otherwise it is sampled
//!   (`previewTruncated: true`):
//!   `{"sampled":true,"traversalLimited":b,"fields":[..]?,"arrays":[..]}`.
//!   `previewTruncated` is true whenever the preview is not the JSON itself.
//! - Traversal is a BFS from the root over *containers* (objects and arrays;
//!   scalars are looked at as part of their parent and cost nothing), visiting
//!   at most 128 of them. The root has depth 0 and containers deeper than 5
//!   are not visited. An object contributes its first 16 keys. An array
//!   contributes only its sampled items (first, middle `len / 2`, last):
//!   sampling is by design and does not count as a limit.
//! - `traversalLimited` is true when a limit left a container unvisited: the
//!   node budget ran out with containers still queued, a container sat below
//!   depth 5, or an object's keys beyond the 16th hold a container. Skipped
//!   scalar keys do not make the traversal limited (they cannot hide arrays).
//! - `fields` (only when the root is an object): its first 16 keys, each cut
//!   to 40 bytes; keys that become equal after the cut appear once.
//! - `arrays`: every array the BFS visited (including the root), the 8 with
//!   the most items, largest first; ties keep BFS order (shallower first).
//!   Each is `{path, count, items:[{index, value}]}` with the first, middle
//!   and last items (deduplicated: 1 item for length 1, 2 for length 2).
//! - `path`: `$`, then `.key` for identifier keys (`[A-Za-z_$][A-Za-z0-9_$]*`),
//!   `["key"]` (JSON-quoted, U+0085/U+2028/U+2029 escaped too) for other keys,
//!   and `[i]` for array items. Keys in paths are cut to 40 bytes; a cut key
//!   ends with `…` and so is always bracketed.
//! - A sampled item is shown to 2 levels: the item, and the values of its
//!   fields/elements; containers below that become the strings `"{...}"` /
//!   `"[...]"` (empty containers stay `{}` / `[]`). Objects show their first 6
//!   fields and arrays their first 6 elements, without an omission marker.
//!   Strings are cut to 48 bytes plus `…` (51 at most); keys are cut to 40
//!   bytes including the `…` (37 bytes of key plus `…`).
//! - `shape` describes the largest kept array:
//!   `$.path: N items, sampled k/N homogeneous|heterogeneous: T1 | T2`, where
//!   the types are the distinct JSON types of the sampled items in order of
//!   first appearance, written `{...}`, `[...]`, `string`, `number`,
//!   `boolean`, `null` (`homogeneous` when there is one). An empty array is
//!   `$.path: 0 items`; a single item reads `1 item`. Without arrays the shape
//!   is the root's type: `$: object with 12 keys`, `$: string`, `$: number`,
//!   `$: boolean`, `$: null`. It is prefixed `limited traversal; ` when
//!   `traversalLimited`, is always one line (keys in paths are JSON-escaped),
//!   and is cut to 240 bytes (with `…`).
//! - [`descriptor_json`] keeps the full descriptor when it fits in 768 bytes.
//!   Otherwise it tries smaller previews, in this order, each step on top of
//!   the previous one: the smaller arrays lose their items (smallest first);
//!   the largest array's items lose their nested containers (1 level); the
//!   smaller arrays are dropped (smallest first); the largest array's strings
//!   are cut to 16 bytes; it keeps its first and last item, then its first;
//!   `fields` are dropped from the end; the largest array loses its items; it
//!   is dropped, leaving `{"sampled":true,"traversalLimited":true,"arrays":[]}`.
//!   A preview that was the value itself is first replaced by its sampled
//!   form. Once an array or a field is dropped, `traversalLimited` becomes
//!   true (the preview no longer shows everything traversed). Only if no
//!   preview fits with the whole shape is the shape cut (keeping at least 80
//!   bytes, then as much as fits). The bound holds for ids up to 600 bytes
//!   (ids are `result_<uuid>`, 43 bytes).
//!
//! Cost: `bytes` is counted in one serialization pass without building the
//! string; the traversal is bounded except that each visited object's keys
//! past the 16th are scanned (not descended into) for containers.
//!
//! Samples show observed data, not a schema.

use crate::output::{escaped_char_len, json_len};
use serde_json::{Map, Value};
use std::collections::VecDeque;

/// Upper bound of a serialized descriptor.
pub(crate) const MAX_DESCRIPTOR_BYTES: usize = 768;

/// Values up to this many bytes are their own preview.
const FULL_PREVIEW_MAX_BYTES: usize = 256;
/// Containers visited by the BFS.
const MAX_NODES: usize = 128;
/// Deepest container visited (the root is at depth 0).
const MAX_DEPTH: usize = 5;
/// Keys of an object followed by the BFS (and listed in `fields`).
const MAX_KEYS_PER_NODE: usize = 16;
/// Arrays kept in a sampled preview.
const MAX_ARRAYS: usize = 8;
/// Levels of a sampled item that are shown.
const SAMPLE_LEVELS: usize = 2;
/// Fields of an object (elements of an array) shown in a sampled item.
const SAMPLE_FIELDS: usize = 6;
/// Escaped bytes of a string kept in a sampled item (before the `…`).
const MAX_STRING_BYTES: usize = 48;
/// Escaped bytes of strings once the descriptor must shrink.
const TIGHT_STRING_BYTES: usize = 16;
/// Escaped bytes of a key, including the `…` of a cut one.
const MAX_KEY_BYTES: usize = 40;
/// Bytes of the shape line.
const MAX_SHAPE_BYTES: usize = 240;
/// Bytes of shape kept before the descriptor drops its last preview detail.
const MIN_CUT_SHAPE_BYTES: usize = 80;
/// Marks a cut string, key or shape.
const ELLIPSIS: &str = "…";
/// Prefix of the shape when the traversal was cut short.
const LIMITED_PREFIX: &str = "limited traversal; ";
/// Placeholder of an object below the shown levels (also its shape type).
const OBJECT_PLACEHOLDER: &str = "{...}";
/// Placeholder of an array below the shown levels (also its shape type).
const ARRAY_PLACEHOLDER: &str = "[...]";

/// The descriptor of a saved result (without its id, which the caller assigns).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Described {
    /// UTF-8 bytes of the value's compact JSON.
    pub bytes: usize,
    /// Array length, object key count, or 1.
    pub count: usize,
    /// One line about the largest array (or the root's type).
    pub shape: String,
    /// The value itself (≤ 256 bytes) or its sampled form.
    pub preview: Value,
    /// `preview` is not the value itself.
    pub preview_truncated: bool,
}

/// Builds the descriptor of `value`; `bytes` is its compact JSON size.
pub(crate) fn describe(value: &Value) -> Described {
    let bytes = json_len(value);
    let count = match value {
        Value::Array(items) => items.len(),
        Value::Object(map) => map.len(),
        _ => 1,
    };
    let traversal = traverse(value);
    let shape = shape_line(value, &traversal);
    let (preview, preview_truncated) = if bytes <= FULL_PREVIEW_MAX_BYTES {
        (value.clone(), false)
    } else {
        (sampled_preview(value, &traversal), true)
    };
    Described {
        bytes,
        count,
        shape,
        preview,
        preview_truncated,
    }
}

/// The descriptor as the JSON object the guest receives:
/// `{"id","bytes","count","shape","preview","previewTruncated"}`, at most
/// [`MAX_DESCRIPTOR_BYTES`] serialized (see the module docs for how it
/// shrinks).
pub(crate) fn descriptor_json(id: &str, d: &Described) -> Value {
    let full = assemble(id, d, &d.shape, &d.preview, d.preview_truncated);
    if fits(&full) {
        return full;
    }
    let mut candidates: Vec<(Value, bool)> = Vec::new();
    if d.preview_truncated {
        candidates.extend(shrink_ladder(&d.preview).into_iter().map(|p| (p, true)));
    } else {
        candidates.push((d.preview.clone(), false));
        let sampled = sampled_preview(&d.preview, &traverse(&d.preview));
        candidates.extend(shrink_ladder(&sampled).into_iter().map(|p| (p, true)));
    }
    for (preview, truncated) in &candidates {
        let json = assemble(id, d, &d.shape, preview, *truncated);
        if fits(&json) {
            return json;
        }
    }
    for (preview, truncated) in &candidates {
        if let Some(json) = fit_shape(id, d, preview, *truncated, MIN_CUT_SHAPE_BYTES) {
            return json;
        }
    }
    let (preview, truncated) = candidates
        .last()
        .map_or_else(|| (minimal_preview(), true), |(p, t)| (p.clone(), *t));
    fit_shape(id, d, &preview, truncated, 0)
        .unwrap_or_else(|| assemble(id, d, "", &preview, truncated))
}

/// The descriptor object with the given shape and preview.
fn assemble(id: &str, d: &Described, shape: &str, preview: &Value, truncated: bool) -> Value {
    let mut map = Map::new();
    map.insert("id".to_owned(), Value::from(id));
    map.insert("bytes".to_owned(), Value::from(d.bytes));
    map.insert("count".to_owned(), Value::from(d.count));
    map.insert("shape".to_owned(), Value::from(shape));
    map.insert("preview".to_owned(), preview.clone());
    map.insert("previewTruncated".to_owned(), Value::from(truncated));
    Value::Object(map)
}

fn fits(descriptor: &Value) -> bool {
    json_len(descriptor) <= MAX_DESCRIPTOR_BYTES
}

/// The descriptor with the longest cut of the shape that fits, if that cut
/// keeps at least `min_keep` bytes (or the whole shape when shorter).
fn fit_shape(
    id: &str,
    d: &Described,
    preview: &Value,
    truncated: bool,
    min_keep: usize,
) -> Option<Value> {
    let shape = d.shape.as_str();
    let build = |end: usize| {
        let mut cut = trim_joiners(&shape[..end]).to_owned();
        if end < shape.len() {
            cut.push_str(ELLIPSIS);
        }
        assemble(id, d, &cut, preview, truncated)
    };
    // Char boundaries, ascending; the descriptor's size grows with the cut.
    let mut ends: Vec<usize> = shape.char_indices().map(|(i, _)| i).collect();
    ends.push(shape.len());
    let (mut lo, mut hi) = (0, ends.len());
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if fits(&build(ends[mid])) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    // `lo` boundaries fit; the longest is `ends[lo - 1]`.
    let best = ends[..lo].last().copied()?;
    if best < min_keep.min(shape.len()) {
        return None;
    }
    Some(build(best))
}

// ---------------------------------------------------------------------------
// Traversal

/// What the BFS found.
struct Traversal<'a> {
    /// The kept arrays, largest first.
    arrays: Vec<FoundArray<'a>>,
    /// A limit left a container unvisited.
    limited: bool,
}

struct FoundArray<'a> {
    path: String,
    items: &'a [Value],
}

fn traverse(root: &Value) -> Traversal<'_> {
    let mut arrays = Vec::new();
    let mut limited = false;
    let mut queue: VecDeque<(String, &Value, usize)> = VecDeque::new();
    if is_container(root) {
        queue.push_back(("$".to_owned(), root, 0));
    }
    let mut visited = 0;
    while let Some((path, value, depth)) = queue.pop_front() {
        if visited == MAX_NODES {
            limited = true;
            break;
        }
        visited += 1;
        match value {
            Value::Array(items) => {
                for index in sample_indices(items.len()) {
                    let child = &items[index];
                    if !is_container(child) {
                        continue;
                    }
                    if depth >= MAX_DEPTH {
                        limited = true;
                    } else {
                        queue.push_back((format!("{path}[{index}]"), child, depth + 1));
                    }
                }
                arrays.push(FoundArray { path, items });
            }
            Value::Object(map) => {
                for (key, child) in map.iter().take(MAX_KEYS_PER_NODE) {
                    if !is_container(child) {
                        continue;
                    }
                    if depth >= MAX_DEPTH {
                        limited = true;
                    } else {
                        let child_path = format!("{path}{}", key_segment(key));
                        queue.push_back((child_path, child, depth + 1));
                    }
                }
                if map.values().skip(MAX_KEYS_PER_NODE).any(is_container) {
                    limited = true;
                }
            }
            _ => {}
        }
    }
    // Stable: equal counts keep BFS order.
    arrays.sort_by_key(|a: &FoundArray<'_>| std::cmp::Reverse(a.items.len()));
    arrays.truncate(MAX_ARRAYS);
    Traversal { arrays, limited }
}

fn is_container(value: &Value) -> bool {
    matches!(value, Value::Array(_) | Value::Object(_))
}

/// First, middle and last index, without repeats.
fn sample_indices(len: usize) -> Vec<usize> {
    if len == 0 {
        return Vec::new();
    }
    let mut indices = vec![0, len / 2, len - 1];
    indices.dedup();
    indices
}

/// `.key` for identifiers, else `["key"]`; the key cut to 40 bytes.
fn key_segment(key: &str) -> String {
    let key = cut_key(key);
    if is_identifier(&key) {
        return format!(".{key}");
    }
    let mut quoted = String::with_capacity(key.len() + 6);
    for c in Value::from(key).to_string().chars() {
        match c {
            '\u{85}' => quoted.push_str("\\u0085"),
            '\u{2028}' => quoted.push_str("\\u2028"),
            '\u{2029}' => quoted.push_str("\\u2029"),
            c => quoted.push(c),
        }
    }
    format!("[{quoted}]")
}

fn is_identifier(key: &str) -> bool {
    let mut chars = key.chars();
    match chars.next() {
        Some(c) if c.is_ascii_alphabetic() || c == '_' || c == '$' => {}
        _ => return false,
    }
    chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
}

// ---------------------------------------------------------------------------
// Shape

fn shape_line(value: &Value, traversal: &Traversal<'_>) -> String {
    let prefix = if traversal.limited {
        LIMITED_PREFIX
    } else {
        ""
    };
    let body = match traversal.arrays.first() {
        Some(array) => {
            let n = array.items.len();
            let head = format!("{}: {n} {}", array.path, plural(n, "item"));
            if n == 0 {
                head
            } else {
                let indices = sample_indices(n);
                let mut kinds: Vec<&str> = Vec::new();
                for &index in &indices {
                    let kind = kind_of(&array.items[index]);
                    if !kinds.contains(&kind) {
                        kinds.push(kind);
                    }
                }
                let variety = if kinds.len() == 1 {
                    "homogeneous"
                } else {
                    "heterogeneous"
                };
                format!(
                    "{head}, sampled {}/{n} {variety}: {}",
                    indices.len(),
                    kinds.join(" | ")
                )
            }
        }
        None => match value {
            Value::Object(map) => {
                let n = map.len();
                format!("$: object with {n} {}", plural(n, "key"))
            }
            Value::Array(items) => {
                let n = items.len();
                format!("$: array with {n} {}", plural(n, "item"))
            }
            scalar => format!("$: {}", kind_of(scalar)),
        },
    };
    cut_text(&format!("{prefix}{body}"), MAX_SHAPE_BYTES)
}

fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        word.to_owned()
    } else {
        format!("{word}s")
    }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Object(_) => OBJECT_PLACEHOLDER,
        Value::Array(_) => ARRAY_PLACEHOLDER,
        Value::String(_) => "string",
        Value::Number(_) => "number",
        Value::Bool(_) => "boolean",
        Value::Null => "null",
    }
}

// ---------------------------------------------------------------------------
// Sampled preview

fn sampled_preview(value: &Value, traversal: &Traversal<'_>) -> Value {
    let mut preview = Map::new();
    preview.insert("sampled".to_owned(), Value::Bool(true));
    preview.insert(
        "traversalLimited".to_owned(),
        Value::Bool(traversal.limited),
    );
    if let Value::Object(root) = value {
        let mut fields: Vec<Value> = Vec::new();
        for key in root.keys().take(MAX_KEYS_PER_NODE) {
            let key = Value::String(cut_key(key));
            if !fields.contains(&key) {
                fields.push(key);
            }
        }
        preview.insert("fields".to_owned(), Value::Array(fields));
    }
    let arrays = traversal
        .arrays
        .iter()
        .map(|array| {
            let items = sample_indices(array.items.len())
                .into_iter()
                .map(|index| {
                    let mut item = Map::new();
                    item.insert("index".to_owned(), Value::from(index));
                    item.insert(
                        "value".to_owned(),
                        render(&array.items[index], SAMPLE_LEVELS, MAX_STRING_BYTES),
                    );
                    Value::Object(item)
                })
                .collect();
            let mut entry = Map::new();
            entry.insert("path".to_owned(), Value::from(array.path.as_str()));
            entry.insert("count".to_owned(), Value::from(array.items.len()));
            entry.insert("items".to_owned(), Value::Array(items));
            Value::Object(entry)
        })
        .collect();
    preview.insert("arrays".to_owned(), Value::Array(arrays));
    Value::Object(preview)
}

fn minimal_preview() -> Value {
    let mut preview = Map::new();
    preview.insert("sampled".to_owned(), Value::Bool(true));
    preview.insert("traversalLimited".to_owned(), Value::Bool(true));
    preview.insert("arrays".to_owned(), Value::Array(Vec::new()));
    Value::Object(preview)
}

/// `value` shown to `levels` levels: deeper non-empty containers become
/// placeholders, objects/arrays keep 6 fields/elements, strings are cut to
/// `max_string` escaped bytes and keys to 40. Idempotent on its own output.
fn render(value: &Value, levels: usize, max_string: usize) -> Value {
    match value {
        Value::String(s) => Value::String(cut_string(s, max_string)),
        Value::Array(items) if items.is_empty() => Value::Array(Vec::new()),
        Value::Object(map) if map.is_empty() => Value::Object(Map::new()),
        Value::Array(_) if levels == 0 => Value::from(ARRAY_PLACEHOLDER),
        Value::Object(_) if levels == 0 => Value::from(OBJECT_PLACEHOLDER),
        Value::Array(items) => items
            .iter()
            .take(SAMPLE_FIELDS)
            .map(|item| render(item, levels - 1, max_string))
            .collect(),
        Value::Object(map) => {
            let mut out = Map::new();
            for (key, field) in map.iter().take(SAMPLE_FIELDS) {
                let key = cut_key(key);
                if !out.contains_key(&key) {
                    let field = render(field, levels - 1, max_string);
                    out.insert(key, field);
                }
            }
            Value::Object(out)
        }
        scalar => scalar.clone(),
    }
}

/// A sampled preview taken apart, to be shrunk step by step.
struct Sampled {
    limited: bool,
    fields: Option<Vec<Value>>,
    arrays: Vec<Map<String, Value>>,
}

impl Sampled {
    /// Tolerant: unknown parts of a preview are dropped.
    fn from_preview(preview: &Value) -> Sampled {
        let limited = preview
            .get("traversalLimited")
            .and_then(Value::as_bool)
            .unwrap_or(true);
        let fields = preview.get("fields").and_then(Value::as_array).cloned();
        let arrays = preview
            .get("arrays")
            .and_then(Value::as_array)
            .map(|arrays| {
                arrays
                    .iter()
                    .filter_map(|a| a.as_object().cloned())
                    .collect()
            })
            .unwrap_or_default();
        Sampled {
            limited,
            fields,
            arrays,
        }
    }

    fn to_preview(&self) -> Value {
        let mut preview = Map::new();
        preview.insert("sampled".to_owned(), Value::Bool(true));
        preview.insert("traversalLimited".to_owned(), Value::Bool(self.limited));
        if let Some(fields) = &self.fields {
            preview.insert("fields".to_owned(), Value::Array(fields.clone()));
        }
        let arrays = self.arrays.iter().cloned().map(Value::Object).collect();
        preview.insert("arrays".to_owned(), Value::Array(arrays));
        Value::Object(preview)
    }
}

fn items_mut(array: &mut Map<String, Value>) -> Option<&mut Vec<Value>> {
    array.get_mut("items").and_then(Value::as_array_mut)
}

/// Applies `f` to each item's `value`; tells whether anything changed.
fn map_item_values(array: &mut Map<String, Value>, f: impl Fn(&Value) -> Value) -> bool {
    let mut changed = false;
    if let Some(items) = items_mut(array) {
        for item in items.iter_mut() {
            if let Some(value) = item.get_mut("value") {
                let new = f(value);
                if new != *value {
                    *value = new;
                    changed = true;
                }
            }
        }
    }
    changed
}

/// `preview`, then ever smaller versions of it, ending with
/// `{"sampled":true,"traversalLimited":..,"arrays":[]}`.
fn shrink_ladder(preview: &Value) -> Vec<Value> {
    let mut steps = vec![preview.clone()];
    let mut s = Sampled::from_preview(preview);
    let push = |steps: &mut Vec<Value>, s: &Sampled| {
        let next = s.to_preview();
        if steps.last() != Some(&next) {
            steps.push(next);
        }
    };
    push(&mut steps, &s);
    // The smaller arrays lose their items, smallest first.
    for i in (1..s.arrays.len()).rev() {
        if let Some(items) = items_mut(&mut s.arrays[i]) {
            if !items.is_empty() {
                items.clear();
                push(&mut steps, &s);
            }
        }
    }
    // The largest array's items lose their nested containers.
    if let Some(first) = s.arrays.first_mut() {
        if map_item_values(first, |v| render(v, 1, MAX_STRING_BYTES)) {
            push(&mut steps, &s);
        }
    }
    // The smaller arrays go, smallest first.
    while s.arrays.len() > 1 {
        s.arrays.pop();
        s.limited = true;
        push(&mut steps, &s);
    }
    if let Some(first) = s.arrays.first_mut() {
        // Shorter strings.
        if map_item_values(first, |v| render(v, 1, TIGHT_STRING_BYTES)) {
            push(&mut steps, &s);
        }
        // First and last item, then the first only.
        for keep in [2, 1] {
            let first = &mut s.arrays[0];
            if let Some(items) = items_mut(first) {
                if items.len() > keep {
                    if keep == 2 {
                        let last = items.len() - 1;
                        items.drain(1..last);
                    } else {
                        items.truncate(1);
                    }
                    push(&mut steps, &s);
                }
            }
        }
    }
    // Fields, from the end.
    while let Some(fields) = &mut s.fields {
        if fields.pop().is_none() {
            s.fields = None;
        }
        s.limited = true;
        push(&mut steps, &s);
    }
    // The largest array loses its items, then goes.
    if let Some(items) = s.arrays.first_mut().and_then(items_mut) {
        if !items.is_empty() {
            items.clear();
            push(&mut steps, &s);
        }
    }
    if !s.arrays.is_empty() {
        s.arrays.clear();
        s.limited = true;
        push(&mut steps, &s);
    }
    steps
}

// ---------------------------------------------------------------------------
// Sizes and safe cuts

fn escaped_len(s: &str) -> usize {
    s.chars().map(escaped_char_len).sum()
}

/// The longest prefix of `s` whose escaped JSON content is ≤ `max` bytes.
fn escaped_prefix(s: &str, max: usize) -> &str {
    let mut used = 0;
    for (i, c) in s.char_indices() {
        used += escaped_char_len(c);
        if used > max {
            return &s[..i];
        }
    }
    s
}

/// A dangling zero-width joiner would glue the `…` to the cut sequence.
fn trim_joiners(s: &str) -> &str {
    s.trim_end_matches('\u{200d}')
}

/// `s` if its escaped content is ≤ `max` bytes, else a prefix of that size
/// plus `…`.
fn cut_string(s: &str, max: usize) -> String {
    if escaped_len(s) <= max {
        return s.to_owned();
    }
    format!("{}{ELLIPSIS}", trim_joiners(escaped_prefix(s, max)))
}

/// `key` if its escaped content is ≤ 40 bytes, else 37 bytes of it plus `…`.
fn cut_key(key: &str) -> String {
    if escaped_len(key) <= MAX_KEY_BYTES {
        return key.to_owned();
    }
    let prefix = escaped_prefix(key, MAX_KEY_BYTES - ELLIPSIS.len());
    format!("{}{ELLIPSIS}", trim_joiners(prefix))
}

/// Plain text cut to `max` bytes in total, `…` included when cut.
fn cut_text(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max - ELLIPSIS.len();
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{ELLIPSIS}", trim_joiners(&s[..end]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const ID: &str = "result_123e4567-e89b-12d3-a456-426614174000";

    fn size(value: &Value) -> usize {
        serde_json::to_string(value).unwrap().len()
    }

    /// Checks the descriptor's bound, keys, order and types.
    fn check_descriptor(value: &Value) -> Value {
        let d = describe(value);
        let j = descriptor_json(ID, &d);
        let text = serde_json::to_string(&j).unwrap();
        assert!(
            text.len() <= MAX_DESCRIPTOR_BYTES,
            "{} bytes: {text}",
            text.len()
        );
        let reparsed: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(reparsed, j);
        let keys: Vec<&str> = j.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "id",
                "bytes",
                "count",
                "shape",
                "preview",
                "previewTruncated"
            ]
        );
        assert_eq!(j["id"], ID);
        assert_eq!(j["bytes"], d.bytes);
        assert_eq!(j["count"], d.count);
        let shape = j["shape"].as_str().unwrap();
        assert!(!shape.contains(['\n', '\r', '\u{2028}', '\u{2029}', '\u{85}']));
        if j["previewTruncated"] == false {
            assert_eq!(&j["preview"], value);
        } else {
            assert_eq!(j["preview"]["sampled"], true);
            assert!(j["preview"]["traversalLimited"].is_boolean());
            assert!(j["preview"]["arrays"].is_array());
        }
        j
    }

    fn rows_value() -> Value {
        let rows: Vec<Value> = (0..180)
            .map(|i| match i {
                0..=59 => json!({"id": i, "name": format!("row {i}"), "tags": ["a", "b"]}),
                60..=119 => json!(format!("text row {i}")),
                _ => Value::Null,
            })
            .collect();
        json!({"structuredContent": {"rows": rows}, "isError": false})
    }

    /// A chain of `depth` nested objects `{"next": ...}` ending in `[1,2,3]`.
    fn deep(depth: usize) -> Value {
        let mut value = json!([1, 2, 3]);
        for _ in 0..depth {
            value = json!({ "next": value });
        }
        value
    }

    fn preview_counts(d: &Described) -> Vec<u64> {
        d.preview["arrays"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["count"].as_u64().unwrap())
            .collect()
    }

    #[test]
    fn small_value_preview_is_the_value_itself() {
        let value = json!({"a": 1, "b": [1, 2, 3], "c": "héllo 👋"});
        let d = describe(&value);
        assert_eq!(d.preview, value);
        assert!(!d.preview_truncated);
        assert_eq!(d.bytes, size(&value));
        let j = check_descriptor(&value);
        assert_eq!(j["preview"], value);
        assert_eq!(j["previewTruncated"], false);
        assert_eq!(d.shape, "$.b: 3 items, sampled 3/3 homogeneous: number");
    }

    #[test]
    fn preview_boundary_is_256_bytes() {
        // `"` + 254 + `"` = 256 bytes: still the value itself.
        let at = json!("x".repeat(254));
        assert_eq!(size(&at), 256);
        assert!(!describe(&at).preview_truncated);
        let over = json!("x".repeat(255));
        let d = describe(&over);
        assert!(d.preview_truncated);
        assert_eq!(
            d.preview,
            json!({"sampled": true, "traversalLimited": false, "arrays": []})
        );
        assert_eq!(d.shape, "$: string");
    }

    #[test]
    fn count_of_array_object_and_scalars() {
        assert_eq!(describe(&json!([1, 2, 3, 4])).count, 4);
        assert_eq!(describe(&json!([])).count, 0);
        assert_eq!(describe(&json!({"a": 1, "b": 2})).count, 2);
        assert_eq!(describe(&json!({})).count, 0);
        for scalar in [json!(null), json!(true), json!(3.5), json!("s")] {
            assert_eq!(describe(&scalar).count, 1);
        }
        let big: Vec<Value> = (0..1000).map(|i| json!(i)).collect();
        assert_eq!(describe(&Value::Array(big)).count, 1000);
    }

    #[test]
    fn bytes_is_compact_json_size() {
        let value = json!({"k": "日本語 🎉", "n": [1.5, null, true], "e": "\u{1}\"\\"});
        assert_eq!(describe(&value).bytes, size(&value));
        let big = rows_value();
        assert_eq!(describe(&big).bytes, size(&big));
    }

    #[test]
    fn scalar_and_object_shapes() {
        assert_eq!(describe(&json!("s")).shape, "$: string");
        assert_eq!(describe(&json!(1)).shape, "$: number");
        assert_eq!(describe(&json!(false)).shape, "$: boolean");
        assert_eq!(describe(&json!(null)).shape, "$: null");
        assert_eq!(describe(&json!({"a": 1})).shape, "$: object with 1 key");
        let twelve: Map<String, Value> = (0..12).map(|i| (format!("k{i}"), json!(i))).collect();
        assert_eq!(
            describe(&Value::Object(twelve)).shape,
            "$: object with 12 keys"
        );
        assert_eq!(describe(&json!([])).shape, "$: 0 items");
        assert_eq!(
            describe(&json!(["x"])).shape,
            "$: 1 item, sampled 1/1 homogeneous: string"
        );
        assert_eq!(
            describe(&json!([1, "x"])).shape,
            "$: 2 items, sampled 2/2 heterogeneous: number | string"
        );
        assert_eq!(
            describe(&json!([[1], {"a": 1}, true])).shape,
            "$: 3 items, sampled 3/3 heterogeneous: [...] | {...} | boolean"
        );
    }

    #[test]
    fn structured_content_rows() {
        let value = rows_value();
        let d = describe(&value);
        assert_eq!(d.count, 2);
        assert!(d.preview_truncated);
        assert!(d
            .shape
            .starts_with("$.structuredContent.rows: 180 items, sampled 3/180 heterogeneous:"));
        assert_eq!(
            d.shape,
            "$.structuredContent.rows: 180 items, sampled 3/180 heterogeneous: {...} | string | null"
        );
        let p = &d.preview;
        assert_eq!(p["sampled"], true);
        assert_eq!(p["traversalLimited"], false);
        assert_eq!(p["fields"], json!(["structuredContent", "isError"]));
        let rows = &p["arrays"][0];
        assert_eq!(rows["path"], "$.structuredContent.rows");
        assert_eq!(rows["count"], 180);
        assert_eq!(
            rows["items"],
            json!([
                {"index": 0, "value": {"id": 0, "name": "row 0", "tags": ["a", "b"]}},
                {"index": 90, "value": "text row 90"},
                {"index": 179, "value": null}
            ])
        );
        // The tags array inside the first sampled item was found too.
        assert_eq!(p["arrays"][1]["path"], "$.structuredContent.rows[0].tags");
        assert_eq!(p["arrays"][1]["count"], 2);
        let j = check_descriptor(&value);
        assert_eq!(j["shape"], d.shape);
        assert_eq!(j["preview"], d.preview);
    }

    #[test]
    fn homogeneous_rows() {
        let rows: Vec<Value> = (0..50).map(|i| json!({"id": i, "ok": true})).collect();
        let d = describe(&json!({ "rows": rows }));
        assert_eq!(d.shape, "$.rows: 50 items, sampled 3/50 homogeneous: {...}");
        let indices: Vec<u64> = d.preview["arrays"][0]["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["index"].as_u64().unwrap())
            .collect();
        assert_eq!(indices, [0, 25, 49]);
    }

    #[test]
    fn sample_indices_are_first_middle_last() {
        assert_eq!(sample_indices(0), Vec::<usize>::new());
        assert_eq!(sample_indices(1), [0]);
        assert_eq!(sample_indices(2), [0, 1]);
        assert_eq!(sample_indices(3), [0, 1, 2]);
        assert_eq!(sample_indices(4), [0, 2, 3]);
        assert_eq!(sample_indices(180), [0, 90, 179]);
    }

    #[test]
    fn wide_and_deep_value_is_limited() {
        let mut root: Map<String, Value> = (0..10_000)
            .map(|i| (format!("key{i}"), json!({ "v": [i] })))
            .collect();
        root.insert("deep".to_owned(), deep(50));
        let value = Value::Object(root);
        let d = describe(&value);
        assert_eq!(d.count, 10_001);
        assert!(d.shape.starts_with("limited traversal; "), "{}", d.shape);
        assert_eq!(d.preview["traversalLimited"], true);
        assert_eq!(d.preview["fields"].as_array().unwrap().len(), 16);
        let j = check_descriptor(&value);
        assert_eq!(j["preview"]["traversalLimited"], true);
        assert!(j["shape"]
            .as_str()
            .unwrap()
            .starts_with("limited traversal; "));
    }

    #[test]
    fn limited_by_skipped_keys_holding_containers() {
        let mut root: Map<String, Value> = (0..16).map(|i| (format!("k{i}"), json!(i))).collect();
        root.insert("hidden".to_owned(), json!([1, 2, 3]));
        let d = describe(&Value::Object(root));
        assert!(d
            .shape
            .starts_with("limited traversal; $: object with 17 keys"));
    }

    #[test]
    fn not_limited_by_skipped_scalar_keys() {
        let root: Map<String, Value> = (0..40)
            .map(|i| (format!("key{i}"), json!("some text value")))
            .collect();
        let d = describe(&Value::Object(root));
        assert_eq!(d.shape, "$: object with 40 keys");
        assert_eq!(d.preview["traversalLimited"], false);
        assert_eq!(d.preview["fields"].as_array().unwrap().len(), 16);
    }

    #[test]
    fn limited_by_depth() {
        // The array at depth 5 is found; at depth 6 it is not.
        let d = describe(&deep(5));
        assert_eq!(
            d.shape,
            "$.next.next.next.next.next: 3 items, sampled 3/3 homogeneous: number"
        );
        let d = describe(&deep(6));
        assert_eq!(d.shape, "limited traversal; $: object with 1 key");
        // An array at depth 5 holding containers is found, its items are not.
        let mut value = json!([[1], [2]]);
        for _ in 0..5 {
            value = json!({ "n": value });
        }
        let d = describe(&value);
        assert!(d
            .shape
            .starts_with("limited traversal; $.n.n.n.n.n: 2 items"));
    }

    #[test]
    fn limited_by_node_budget() {
        // 1 + 16 + 256 objects: more than 128 containers within depth 2.
        let inner: Map<String, Value> = (0..16)
            .map(|i| (format!("c{i}"), json!({"x": 1})))
            .collect();
        let root: Map<String, Value> = (0..16)
            .map(|i| (format!("b{i}"), Value::Object(inner.clone())))
            .collect();
        let d = describe(&Value::Object(root));
        assert!(d.shape.starts_with("limited traversal; "));
        assert_eq!(d.preview["traversalLimited"], true);
        // Exactly 128 containers (1 + 16 objects + 111 arrays): no limit;
        // one more array and the budget runs out.
        let build = |arrays: usize| {
            let mut left = arrays;
            let root: Map<String, Value> = (0..16)
                .map(|i| {
                    let n = left.min(7);
                    left -= n;
                    let inner: Map<String, Value> =
                        (0..n).map(|j| (format!("a{j}"), json!([j]))).collect();
                    (format!("o{i}"), Value::Object(inner))
                })
                .collect();
            describe(&Value::Object(root))
        };
        let d = build(111);
        assert!(!d.shape.starts_with("limited"), "{}", d.shape);
        assert_eq!(d.preview["traversalLimited"], false);
        let d = build(112);
        assert!(d.shape.starts_with("limited traversal; "), "{}", d.shape);
    }

    #[test]
    fn eight_largest_arrays_are_kept() {
        // Lengths 1..=12 in shuffled key order, plus ties.
        let lengths = [3, 12, 1, 7, 9, 5, 11, 2, 10, 4, 8, 6];
        let mut root = Map::new();
        for (i, n) in lengths.iter().enumerate() {
            root.insert(format!("a{i}"), Value::Array(vec![json!(1000); *n]));
        }
        let d = describe(&Value::Object(root));
        assert_eq!(preview_counts(&d), [12, 11, 10, 9, 8, 7, 6, 5]);
        assert_eq!(d.preview["arrays"][0]["path"], "$.a1");
        assert_eq!(d.shape, "$.a1: 12 items, sampled 3/12 homogeneous: number");
        // Ties keep BFS order: shallower first, then key order.
        let value = json!({
            "x": {"deep": [1, 2]},
            "y": [1, 2],
            "z": [1, 2],
            "pad": "p".repeat(300)
        });
        let d = describe(&value);
        let paths: Vec<&str> = d.preview["arrays"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["path"].as_str().unwrap())
            .collect();
        assert_eq!(paths, ["$.y", "$.z", "$.x.deep"]);
    }

    #[test]
    fn items_show_two_levels_and_six_fields() {
        let item = json!({
            "a": 1, "b": {"c": {"d": 1}, "e": [1, [2]], "f": {}, "g": []},
            "c": 3, "d": 4, "e": 5, "f": 6, "g": 7, "h": 8
        });
        let rendered = render(&item, SAMPLE_LEVELS, MAX_STRING_BYTES);
        assert_eq!(
            rendered,
            json!({
                "a": 1, "b": {"c": "{...}", "e": "[...]", "f": {}, "g": []},
                "c": 3, "d": 4, "e": 5, "f": 6
            })
        );
        let list = json!([1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(
            render(&list, SAMPLE_LEVELS, MAX_STRING_BYTES),
            json!([1, 2, 3, 4, 5, 6])
        );
        // Idempotent on its own output.
        assert_eq!(render(&rendered, SAMPLE_LEVELS, MAX_STRING_BYTES), rendered);
    }

    #[test]
    fn strings_and_keys_are_cut() {
        let long = "a".repeat(100);
        assert_eq!(cut_string(&long, 48), format!("{}…", "a".repeat(48)));
        assert_eq!(cut_string(&"a".repeat(48), 48), "a".repeat(48));
        assert_eq!(cut_key(&long), format!("{}…", "a".repeat(37)));
        assert_eq!(cut_key(&long).len(), 40);
        assert_eq!(cut_key(&"k".repeat(40)), "k".repeat(40));
        // Escapes count as their JSON size.
        let quotes = "\"".repeat(30); // 60 escaped bytes
        assert_eq!(cut_string(&quotes, 48), format!("{}…", "\"".repeat(24)));
        let controls = "\u{1}".repeat(10); // 60 escaped bytes
        assert_eq!(cut_string(&controls, 48), format!("{}…", "\u{1}".repeat(8)));
        // Keys that collide after the cut appear once.
        let value = json!({
            format!("{long}1"): 1, format!("{long}2"): 2, "pad": "p".repeat(300)
        });
        let d = describe(&value);
        assert_eq!(
            d.preview["fields"],
            json!([format!("{}…", "a".repeat(37)), "pad"])
        );
    }

    #[test]
    fn unicode_is_cut_on_char_boundaries() {
        let emoji = "😀".repeat(30); // 4 bytes each
        let cut = cut_string(&emoji, 48);
        assert_eq!(cut, format!("{}…", "😀".repeat(12)));
        let cjk = "漢字かな".repeat(20); // 3 bytes each
        let cut = cut_string(&cjk, 48);
        assert_eq!(cut.len(), 48 + 3);
        assert!(cjk.starts_with(cut.trim_end_matches('…')));
        // 47 ASCII bytes then an emoji: the emoji does not fit, no half of it.
        let mixed = format!("{}😀😀", "a".repeat(47));
        assert_eq!(cut_string(&mixed, 48), format!("{}…", "a".repeat(47)));
        // A ZWJ sequence cut right after the joiner drops the joiner.
        let family = format!("{}👨\u{200d}👩", "a".repeat(41)); // 41 + 4 + 3 = 48
        assert_eq!(cut_string(&family, 47), format!("{}👨…", "a".repeat(41)));
        let key = "é".repeat(30); // 60 bytes
        let cut = cut_key(&key);
        assert!(cut.len() <= 40);
        assert_eq!(cut, format!("{}…", "é".repeat(18)));
        let shape = cut_text(&"日".repeat(100), MAX_SHAPE_BYTES);
        assert!(shape.len() <= MAX_SHAPE_BYTES);
        assert_eq!(shape, format!("{}…", "日".repeat(79)));
        // Sampled items of unicode-heavy values.
        let rows: Vec<Value> = (0..20)
            .map(|i| json!({"t": format!("{i}{}", "🎉漢".repeat(40))}))
            .collect();
        let d = describe(&json!({ "rows": rows }));
        let first = d.preview["arrays"][0]["items"][0]["value"]["t"]
            .as_str()
            .unwrap();
        assert!(first.ends_with('…'));
        assert!(first.len() <= 48 + 3);
        check_descriptor(&json!({ "rows": rows }));
    }

    #[test]
    fn escaped_len_matches_serde_json() {
        let mut chars: Vec<char> = (0u32..0x80).filter_map(char::from_u32).collect();
        chars.extend(['é', '漢', '😀', '\u{2028}', '\u{85}', '\u{7f}', '\u{200d}']);
        for c in chars {
            let json = serde_json::to_string(&c.to_string()).unwrap();
            assert_eq!(escaped_char_len(c), json.len() - 2, "{c:?}");
        }
    }

    #[test]
    fn paths_use_dots_brackets_and_indices() {
        assert_eq!(key_segment("rows"), ".rows");
        assert_eq!(key_segment("_a$1"), "._a$1");
        assert_eq!(key_segment("1a"), "[\"1a\"]");
        assert_eq!(key_segment("with space"), "[\"with space\"]");
        assert_eq!(key_segment(""), "[\"\"]");
        assert_eq!(key_segment("日本"), "[\"日本\"]");
        assert_eq!(key_segment("a\"b"), "[\"a\\\"b\"]");
        assert_eq!(key_segment("l\ni\u{2028}ne"), "[\"l\\ni\\u2028ne\"]");
        assert_eq!(
            key_segment(&"k".repeat(50)),
            format!("[\"{}…\"]", "k".repeat(37))
        );
        let value = json!({"my key": [[1, 2], {"x": [true, false]}]});
        let d = describe(&value);
        let paths: Vec<&str> = d.preview["arrays"]
            .as_array()
            .map(|a| a.iter().map(|a| a["path"].as_str().unwrap()).collect())
            .unwrap_or_default();
        // Small value: the preview is the value; check the traversal directly.
        assert!(paths.is_empty());
        let t = traverse(&value);
        let paths: Vec<&str> = t.arrays.iter().map(|a| a.path.as_str()).collect();
        assert_eq!(
            paths,
            ["$[\"my key\"]", "$[\"my key\"][0]", "$[\"my key\"][1].x"]
        );
    }

    #[test]
    fn shape_is_one_line_and_bounded() {
        let key = format!("{}\n\u{2028}", "κλειδί".repeat(20));
        let mut value = json!({ key.clone(): [1, 2, 3] });
        for _ in 0..4 {
            value = json!({ key.clone(): value });
        }
        let d = describe(&value);
        assert!(d.shape.len() <= MAX_SHAPE_BYTES, "{}", d.shape.len());
        assert!(!d.shape.contains(['\n', '\u{2028}']));
        assert!(d.shape.ends_with('…'));
        check_descriptor(&value);
    }

    #[test]
    fn descriptor_of_small_values_is_complete() {
        for value in [
            json!(null),
            json!(0),
            json!("text"),
            json!([]),
            json!({}),
            json!({"a": [1, 2, 3], "b": {"c": "d"}}),
        ] {
            let j = check_descriptor(&value);
            assert_eq!(j["preview"], value);
            assert_eq!(j["previewTruncated"], false);
        }
    }

    #[test]
    fn descriptor_fits_adversarial_values() {
        let long_key = "K".repeat(10_000);
        let escapes = "\u{1}\"\\".repeat(2_000);
        let emoji = "👨\u{200d}👩\u{200d}👧".repeat(500);
        // 16 × 16 arrays: more than the node budget, all with fat items.
        let many_arrays: Map<String, Value> = (0..16)
            .map(|i| {
                let inner: Map<String, Value> = (0..16)
                    .map(|k| {
                        let items = (0..=(i * 16 + k) % 40)
                            .map(|j| json!({"v": escapes[..600].to_owned(), "j": j}))
                            .collect();
                        (
                            format!("array {k} with a long name {}", "x".repeat(60)),
                            items,
                        )
                    })
                    .collect();
                (format!("group{i}"), Value::Object(inner))
            })
            .collect();
        let long_keys: Map<String, Value> = (0..100)
            .map(|i| {
                (
                    format!("{i}{long_key}"),
                    json!([{ long_key.clone(): emoji.clone() }]),
                )
            })
            .collect();
        let fat_items: Vec<Value> = (0..10)
            .map(|_| {
                let obj: Map<String, Value> = (0..6)
                    .map(|k| {
                        let inner: Map<String, Value> = (0..6)
                            .map(|m| (format!("{escapes}{m}"), json!(escapes)))
                            .collect();
                        (format!("{k}{escapes}"), Value::Object(inner))
                    })
                    .collect();
                Value::Object(obj)
            })
            .collect();
        let mut nested = json!([escapes.clone()]);
        for i in 0..60 {
            nested = json!({ format!("\u{2028}{i}\n{long_key}"): [nested, [i]] });
        }
        let values = [
            Value::Object(many_arrays),
            Value::Object(long_keys),
            Value::Array(fat_items),
            nested,
            json!(escapes),
            json!(emoji),
            json!({ long_key.clone(): escapes }),
            json!([[[[[[[[[[1]]]]]]]]]]),
        ];
        for value in &values {
            let j = check_descriptor(value);
            assert_eq!(j["previewTruncated"], json!(size(value) > 256));
        }
    }

    #[test]
    fn descriptor_fits_generated_values() {
        // A small deterministic generator (no external crates).
        struct Lcg(u64, usize);
        impl Lcg {
            fn next(&mut self, n: u64) -> usize {
                self.0 = self
                    .0
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                usize::try_from((self.0 >> 33) % n).unwrap_or_default()
            }
            fn text(&mut self) -> String {
                const PARTS: [&str; 8] = ["a", "é", "漢", "😀", "\"", "\u{1}", "\n", "\u{200d}"];
                let len = [0, 3, 40, 200][self.next(4)];
                (0..len).map(|_| PARTS[self.next(8)]).collect()
            }
            fn value(&mut self, depth: usize) -> Value {
                // Field 1 bounds the containers' total size.
                self.1 = self.1.saturating_sub(1);
                let kind = if depth > 7 || self.1 == 0 {
                    self.next(4)
                } else {
                    self.next(7)
                };
                match kind {
                    0 => Value::Null,
                    1 => json!(self.next(1_000_000)),
                    2 => json!(self.next(2) == 0),
                    3 => json!(self.text()),
                    4 | 5 => {
                        let n = [0, 1, 3, 30][self.next(4)];
                        (0..n).map(|_| self.value(depth + 1)).collect()
                    }
                    _ => {
                        let n = [0, 2, 8, 25][self.next(4)];
                        let map: Map<String, Value> = (0..n)
                            .map(|_| (self.text(), self.value(depth + 1)))
                            .collect();
                        Value::Object(map)
                    }
                }
            }
        }
        let mut rng = Lcg(42, 0);
        for _ in 0..300 {
            rng.1 = 3_000;
            let value = rng.value(0);
            check_descriptor(&value);
        }
    }

    #[test]
    fn shrinking_keeps_the_largest_array_first() {
        // Many mid-sized arrays with fat items: they cannot all fit.
        let mut root = Map::new();
        for i in 0..8 {
            let items: Vec<Value> = (0..(20 + i))
                .map(|j| json!({"name": "n".repeat(60), "j": j, "more": "m".repeat(60)}))
                .collect();
            root.insert(format!("list{i}"), Value::Array(items));
        }
        let value = Value::Object(root);
        let d = describe(&value);
        assert_eq!(preview_counts(&d), [27, 26, 25, 24, 23, 22, 21, 20]);
        assert!(size(&d.preview) > MAX_DESCRIPTOR_BYTES);
        let j = check_descriptor(&value);
        assert_eq!(j["preview"]["arrays"][0]["path"], "$.list7");
        assert_eq!(j["preview"]["arrays"][0]["count"], 27);
        assert!(!j["preview"]["arrays"][0]["items"]
            .as_array()
            .unwrap()
            .is_empty());
        assert_eq!(j["shape"], d.shape);
    }

    #[test]
    fn shrinking_ladder_ends_minimal() {
        let d = describe(&rows_value());
        let ladder = shrink_ladder(&d.preview);
        assert_eq!(ladder.first(), Some(&d.preview));
        assert_eq!(
            ladder.last(),
            Some(&json!({"sampled": true, "traversalLimited": true, "arrays": []}))
        );
        for pair in ladder.windows(2) {
            assert!(size(&pair[1]) < size(&pair[0]), "{pair:?}");
        }
        // Nothing to drop: the flag is kept.
        let ladder = shrink_ladder(&describe(&json!("x".repeat(300))).preview);
        assert_eq!(
            ladder,
            [json!({"sampled": true, "traversalLimited": false, "arrays": []})]
        );
    }

    #[test]
    fn descriptor_fits_caller_made_descriptors() {
        let escapes = "\u{1}\"".repeat(400);
        // A huge, escape-heavy shape with a full preview.
        let d = Described {
            bytes: 10,
            count: 1,
            shape: escapes.clone(),
            preview: json!({"a": [1, 2]}),
            preview_truncated: false,
        };
        let j = descriptor_json(ID, &d);
        assert!(size(&j) <= MAX_DESCRIPTOR_BYTES);
        assert_eq!(j["preview"], json!({"a": [1, 2]}));
        assert!(j["shape"].as_str().unwrap().ends_with('…'));
        assert!(j["shape"].as_str().unwrap().len() >= MIN_CUT_SHAPE_BYTES);
        // A malformed sampled preview and a huge shape.
        let d = Described {
            bytes: usize::MAX,
            count: usize::MAX,
            shape: "日".repeat(5_000),
            preview: json!(escapes),
            preview_truncated: true,
        };
        let j = descriptor_json(ID, &d);
        assert!(size(&j) <= MAX_DESCRIPTOR_BYTES);
        assert_eq!(
            j["preview"],
            json!({"sampled": true, "traversalLimited": true, "arrays": []})
        );
        // The bound holds for a 600-byte id, even with the largest numbers.
        let j = descriptor_json(&"i".repeat(600), &d);
        assert!(size(&j) <= MAX_DESCRIPTOR_BYTES, "{}", size(&j));
        // A full preview too large to be one.
        let big: Vec<Value> = (0..100).map(|i| json!({ "i": i })).collect();
        let d = Described {
            bytes: 1,
            count: 1,
            shape: "$".to_owned(),
            preview: Value::Array(big),
            preview_truncated: false,
        };
        let j = descriptor_json(ID, &d);
        assert!(size(&j) <= MAX_DESCRIPTOR_BYTES);
        assert_eq!(j["previewTruncated"], true);
        assert_eq!(j["preview"]["arrays"][0]["count"], 100);
    }
}
