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
#[path = "describe_tests.rs"]
mod tests;
