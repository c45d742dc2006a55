//! The per-cell output budget and truncation (contract.md §10).
//!
//! [`fit_to_budget`] takes what one result wants to deliver — undelivered
//! output entries, the final value, the error — and the remaining budget
//! `B = maxOutputBytes − bytes delivered by earlier results of the cell`, and
//! returns what fits ([`Fitted`]). The caller adds [`Fitted::used_bytes`] to
//! the cell's delivered total.
//!
//! # Units
//!
//! Everything is measured in UTF-8 bytes of compact JSON as `serde_json`
//! writes it (contract §0):
//!
//! - `O` = the compact JSON of the list of undelivered entries, as the
//!   result carries it: each entry (`{"type":"text","text":"…"}`), the
//!   commas between them and the brackets. No entries → `O = 0` (an empty
//!   list costs nothing).
//! - `V` = the value's compact JSON. The value arrives as JSON text; it is
//!   parsed and re-serialized so that `V` is exactly what the caller will
//!   emit (e.g. `1.50` becomes `1.5`).
//! - **Lone surrogates.** JavaScript's well-formed `JSON.stringify` escapes
//!   lone surrogates (`"\ud800"`), which Rust strings — and so `Value` —
//!   cannot hold. Such a value or entry is kept twice ([`GuestJson`]): its
//!   *exact* canonical text, which keeps each lone surrogate as its
//!   lowercase `\udXXX` escape, and a well-formed projection with U+FFFD
//!   in its place. Sizes are the exact text's; the result's text form
//!   ([`crate::CellResult::to_json`]) writes the exact text, its structured
//!   form the projection. Cutting itself never produces U+FFFD.
//! - `E` = the error string as a JSON string literal (quotes and escapes
//!   included).
//!
//! # Allowances (contract §10.1–10.3)
//!
//! 1. Error allowance `B − min(O + V, ⌊B/2⌋)`. A longer error keeps its
//!    longest safe-cut prefix followed by ` [error truncated]`. If even the
//!    suffix does not fit, the error is the longest safe-cut prefix that fits
//!    without it (possibly `""`); if not even `""` fits, fitting fails.
//! 2. `R = B − usedError`; output allowance `R − min(V, ⌊R/2⌋)`.
//! 3. Value allowance `R − usedOutput`.
//!
//! An item exactly at its allowance is kept; one byte over and it becomes a
//! truncation marker ([`truncation_marker`]):
//! `{"truncated":true,"omittedBytes":n,"guidance":"Output truncated; rerun
//! with narrower args.","prefix":"…"}`. `prefix` is the longest prefix of the
//! item's JSON text that lets the serialized marker fit the allowance,
//! measured on the prefix's *escaped* form inside the marker, so a string of
//! quotes, control characters or emoji keeps as much as fits rather than
//! collapsing. The prefix is cut between JSON *atoms* — a whole escape
//! sequence (`\"`, `\n`, `\u001f`, a surrogate pair `\ud83d\ude00`) or one
//! code point — so it never splits an escape or a code point.
//! `omittedBytes = item bytes − prefix bytes` (bytes of the item's JSON text).
//!
//! **Overflowing output** (`O` over its allowance): the longest run of
//! leading entries is kept whole as long as a summary marker for the rest
//! still fits after them; the rest becomes one entry
//! `{"type":"json","value":<marker>}` whose item text is the compact JSON
//! array of the omitted entries. The marker appears only in the result that
//! drops output, so it is never repeated while nothing new overflows. If not
//! even a marker with an empty prefix fits, the leading entries that fit are
//! kept and the rest is dropped silently ([`Fitted::output_truncated`] tells
//! the caller).
//!
//! **Value**: if the value's marker cannot fit (tiny remaining budgets),
//! [`fit_to_budget`] returns [`FitError::OutputLimitExceeded`] so the caller
//! can fail with `output_limit_exceeded`. Invariant: `used_bytes ≤ B` on
//! every `Ok`.

use serde_json::{json, Value};

/// `guidance` of every truncation marker.
pub const TRUNCATION_GUIDANCE: &str = "Output truncated; rerun with narrower args.";

/// Suffix of a truncated error.
pub const ERROR_TRUNCATED_SUFFIX: &str = " [error truncated]";

/// Bytes an entry `{"type":"json","value":X}` adds around `X`.
const JSON_ENTRY_OVERHEAD: usize = r#"{"type":"json","value":}"#.len();

/// JSON from the guest: its well-formed projection, and its exact
/// canonical text when that holds lone-surrogate escapes the projection
/// cannot (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct GuestJson {
    /// The projection: lone surrogates are U+FFFD.
    pub value: Value,
    /// The canonical compact text with lone surrogates as `\udXXX`; `None`
    /// when it is the projection's own text.
    pub exact: Option<String>,
}

impl GuestJson {
    /// JSON made on the host: no exact text.
    pub fn host(value: Value) -> Self {
        Self { value, exact: None }
    }

    /// Bytes of its text as a result carries it.
    pub fn len(&self) -> usize {
        match &self.exact {
            Some(text) => text.len(),
            None => json_len(&self.value),
        }
    }

    /// Its text as a result carries it.
    fn text(&self) -> std::borrow::Cow<'_, str> {
        match &self.exact {
            Some(text) => text.into(),
            None => self.value.to_string().into(),
        }
    }
}

/// What fits in the budget.
#[derive(Debug, Clone, PartialEq)]
pub struct Fitted {
    /// Output entries to deliver (leading entries, maybe a summary marker),
    /// as projections.
    pub output: Vec<Value>,
    /// The exact texts of entries of `output` that hold lone surrogates,
    /// by index.
    pub output_exact: Vec<(usize, String)>,
    /// The value, or its truncation marker; `None` when no value was given.
    pub value: Option<Value>,
    /// The value's exact text, when it is whole and holds lone surrogates.
    pub value_exact: Option<String>,
    /// The error, possibly cut and suffixed; `None` when none was given.
    pub error: Option<String>,
    /// Bytes used by `output` (sum of entries), `value` and `error` (as JSON
    /// string); never more than the budget.
    pub used_bytes: usize,
    /// Output entries were replaced by a summary marker or dropped.
    pub output_truncated: bool,
    /// The value was replaced by a truncation marker.
    pub value_truncated: bool,
    /// The error was cut.
    pub error_truncated: bool,
}

/// Why a result could not be fitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FitError {
    /// Not even the smallest representation (a marker with an empty prefix,
    /// an empty error string) fits: fail with `output_limit_exceeded`.
    OutputLimitExceeded,
    /// `value_json` is not JSON (a host bug, not a guest error).
    InvalidValueJson(String),
}

impl std::fmt::Display for FitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::OutputLimitExceeded => f.write_str("result does not fit the output budget"),
            Self::InvalidValueJson(message) => write!(f, "value is not valid JSON: {message}"),
        }
    }
}

impl std::error::Error for FitError {}

/// Fits undelivered output, the value (compact JSON text) and the error into
/// `budget` bytes, per contract §10 and the module documentation.
///
/// # Errors
///
/// [`FitError::OutputLimitExceeded`] when not even the smallest form of the
/// value or error fits; [`FitError::InvalidValueJson`] when `value_json` is
/// not JSON.
pub fn fit_to_budget(
    budget: usize,
    output: Vec<Value>,
    value_json: Option<&str>,
    error: Option<&str>,
) -> Result<Fitted, FitError> {
    fit_to_budget_with_dropped(budget, output, value_json, error, 0)
}

/// [`fit_to_budget`] for output of which the host already dropped
/// `dropped_bytes` beyond the entries given (its buffer keeps at most the
/// budget; see `channel::OutputBuffer`): a summary marker counts them in its
/// `omittedBytes`, sized for the larger number from the start, so the
/// result never grows past the budget afterwards.
///
/// # Errors
///
/// As [`fit_to_budget`].
pub fn fit_to_budget_with_dropped(
    budget: usize,
    output: Vec<impl Into<GuestJson>>,
    value_json: Option<&str>,
    error: Option<&str>,
    dropped_bytes: usize,
) -> Result<Fitted, FitError> {
    let output: Vec<GuestJson> = output.into_iter().map(Into::into).collect();
    // A value whose text is over twice the budget cannot fit in any form
    // (canonical text is at least half as long as the guest's
    // `JSON.stringify` text, which has no whitespace and escapes only
    // controls and lone surrogates, kept as they are: only a number may be
    // written differently), so it is never parsed: its marker is cut
    // from the guest's text. This keeps a huge value from becoming a huge
    // tree on the host.
    let value = match value_json {
        Some(text) if text.len() > budget.saturating_mul(2) => Some(ValueText::Unparsed(text)),
        Some(text) => Some(ValueText::Parsed(canonical_value(text)?)),
        None => None,
    };
    let entry_lens: Vec<usize> = output.iter().map(GuestJson::len).collect();
    let o = list_len(entry_lens.iter().sum(), entry_lens.len());
    let v = value.as_ref().map_or(0, ValueText::len);

    // 1. Error.
    let (error, used_error, error_truncated) = match error {
        None => (None, 0, false),
        Some(error) => {
            let allowance = budget - (o.saturating_add(v)).min(budget / 2);
            let len = json_string_len(error);
            if len <= allowance {
                (Some(error.to_owned()), len, false)
            } else {
                let cut = truncate_error(error, allowance).ok_or(FitError::OutputLimitExceeded)?;
                let len = json_string_len(&cut);
                (Some(cut), len, true)
            }
        }
    };
    let r = budget - used_error;

    // 2. Output.
    let output_allowance = r - v.min(r / 2);
    let (output, used_output, output_truncated) = if o <= output_allowance {
        (output, o, false)
    } else {
        let (kept, used) = summarize_output(output, &entry_lens, output_allowance, dropped_bytes);
        (kept, used, true)
    };

    // 3. Value.
    let value_allowance = r - used_output;
    let (value, used_value, value_truncated) = match value {
        None => (None, 0, false),
        Some(ValueText::Parsed(value)) if value.len() <= value_allowance => {
            let len = value.len();
            (Some(GuestJson::from(value)), len, false)
        }
        Some(value) => {
            let marker = truncation_marker(value.text(), value_allowance)
                .ok_or(FitError::OutputLimitExceeded)?;
            let len = json_len(&marker);
            (Some(GuestJson::host(marker)), len, true)
        }
    };
    let (value, value_exact) = match value {
        Some(GuestJson { value, exact }) => (Some(value), exact),
        None => (None, None),
    };
    let mut output_exact = Vec::new();
    let output = output
        .into_iter()
        .enumerate()
        .map(|(i, entry)| {
            if let Some(text) = entry.exact {
                output_exact.push((i, text));
            }
            entry.value
        })
        .collect();

    let used_bytes = used_error + used_output + used_value;
    debug_assert!(used_bytes <= budget);
    Ok(Fitted {
        output,
        output_exact,
        value,
        value_exact,
        error,
        used_bytes,
        output_truncated,
        value_truncated,
        error_truncated,
    })
}

/// A value to fit: parsed, with its canonical text, or (too large to fit
/// in any form) the guest's text alone.
enum ValueText<'a> {
    Parsed(Canonical),
    Unparsed(&'a str),
}

impl ValueText<'_> {
    fn text(&self) -> &str {
        match self {
            Self::Parsed(canonical) => &canonical.text,
            Self::Unparsed(text) => text,
        }
    }

    fn len(&self) -> usize {
        self.text().len()
    }
}

/// Guest JSON parsed: the projection and the exact canonical text.
struct Canonical {
    value: Value,
    text: String,
    /// `text` holds lone-surrogate escapes (it is not the projection's).
    exact: bool,
}

impl Canonical {
    fn len(&self) -> usize {
        self.text.len()
    }
}

impl From<Value> for GuestJson {
    fn from(value: Value) -> Self {
        Self::host(value)
    }
}

impl From<Canonical> for GuestJson {
    fn from(c: Canonical) -> Self {
        Self {
            exact: c.exact.then_some(c.text),
            value: c.value,
        }
    }
}

/// The longest prefix of `s` of at most `max_bytes` bytes that ends on a
/// code point boundary.
pub fn safe_cut_utf8(s: &str, max_bytes: usize) -> &str {
    if max_bytes >= s.len() {
        return s;
    }
    let mut end = max_bytes;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A truncation marker for an item whose compact JSON text is `item_json`,
/// with the longest prefix that keeps the serialized marker within
/// `allowance` bytes. `None` if not even an empty prefix fits.
pub fn truncation_marker(item_json: &str, allowance: usize) -> Option<Value> {
    truncation_marker_with_guidance(item_json, allowance, TRUNCATION_GUIDANCE)
}

/// [`truncation_marker`] with another `guidance` text (the automatic
/// reference's "Not retained: …" cases, contract §10.4).
pub fn truncation_marker_with_guidance(
    item_json: &str,
    allowance: usize,
    guidance: &str,
) -> Option<Value> {
    marker_counting(item_json, allowance, guidance, 0)
}

/// A truncation marker whose `omittedBytes` also counts `extra` bytes that
/// are not in `item_json` (output the host already dropped).
fn marker_counting(
    item_json: &str,
    allowance: usize,
    guidance: &str,
    extra: usize,
) -> Option<Value> {
    let marker = |omitted: usize, prefix: &str| {
        let mut m = marker(omitted, prefix);
        m["guidance"] = Value::String(guidance.to_string());
        m
    };
    let total = item_json.len().saturating_add(extra);
    // Marker bytes without the digits of omittedBytes and the prefix text.
    let base = json_len(&marker(0, "")) - 1;
    let fits = |prefix_bytes: usize, escaped: usize| {
        base + digits(total - prefix_bytes) + escaped <= allowance
    };
    if !fits(0, 0) {
        return None;
    }
    let mut best = 0;
    let mut prefix_bytes = 0;
    let mut escaped = 0;
    for (atom_bytes, atom_escaped) in json_atoms(item_json) {
        prefix_bytes += atom_bytes;
        escaped += atom_escaped;
        if base + 1 + escaped > allowance {
            break;
        }
        if fits(prefix_bytes, escaped) {
            best = prefix_bytes;
        }
    }
    Some(marker(total - best, &item_json[..best]))
}

/// Compact JSON size of a value in bytes.
pub fn json_len(value: &Value) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    // Serializing a `Value` into an infallible writer cannot fail.
    let _ = serde_json::to_writer(&mut counter, value);
    counter.0
}

/// Size of `s` as a JSON string literal, quotes included.
pub fn json_string_len(s: &str) -> usize {
    2 + s.chars().map(escaped_char_len).sum::<usize>()
}

fn marker(omitted: usize, prefix: &str) -> Value {
    json!({
        "truncated": true,
        "omittedBytes": omitted,
        "guidance": TRUNCATION_GUIDANCE,
        "prefix": prefix,
    })
}

fn digits(mut n: usize) -> usize {
    let mut count = 1;
    while n >= 10 {
        n /= 10;
        count += 1;
    }
    count
}

/// Bytes `c` takes inside a JSON string written by `serde_json`.
pub(crate) fn escaped_char_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
        c if (c as u32) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

/// Splits JSON text into atoms that may not be cut: an escape sequence
/// (a `\uXXXX\uXXXX` surrogate pair is one atom) or one code point. Yields
/// `(bytes in the text, bytes once escaped inside a JSON string)`.
fn json_atoms(text: &str) -> impl Iterator<Item = (usize, usize)> + '_ {
    let mut rest = text;
    std::iter::from_fn(move || {
        let c = rest.chars().next()?;
        let len = if c == '\\' {
            escape_len(rest)
        } else {
            c.len_utf8()
        };
        let (atom, tail) = rest.split_at(len);
        rest = tail;
        Some((len, atom.chars().map(escaped_char_len).sum()))
    })
}

/// Length of the escape sequence at the start of `s` (which starts with `\`).
///
/// Works on bytes: `s` comes from the guest and may hold any text after the
/// backslash (multi-byte characters included), so nothing here slices `s`
/// at an offset that was not checked to be a character boundary.
fn escape_len(s: &str) -> usize {
    let bytes = s.as_bytes();
    match bytes.get(1) {
        Some(b'u') => match hex_unit(bytes, 2) {
            Some(high) => {
                let pair = (0xD800..0xDC00).contains(&high)
                    && bytes.get(6..8) == Some(b"\\u".as_slice())
                    && hex_unit(bytes, 8).is_some_and(|low| (0xDC00..0xE000).contains(&low));
                if pair {
                    12
                } else {
                    6
                }
            }
            // `\u` without four hex digits (not JSON): the backslash and
            // the `u` alone.
            None => 2,
        },
        Some(_) => 1 + s[1..].chars().next().map_or(0, char::len_utf8),
        None => 1,
    }
}

/// The UTF-16 unit spelled by `bytes[at..at + 4]`, if those are four ASCII
/// hex digits.
fn hex_unit(bytes: &[u8], at: usize) -> Option<u16> {
    let digits = bytes.get(at..at.checked_add(4)?)?;
    digits.iter().try_fold(0u16, |unit, &b| {
        let digit = (b as char).to_digit(16)? as u16;
        Some(unit << 4 | digit)
    })
}

/// Cuts `error` to fit `allowance` bytes as a JSON string (see module docs).
fn truncate_error(error: &str, allowance: usize) -> Option<String> {
    if allowance < 2 {
        return None;
    }
    let suffix_len = json_string_len(ERROR_TRUNCATED_SUFFIX) - 2;
    let (room, suffix) = if allowance >= 2 + suffix_len {
        (allowance - 2 - suffix_len, ERROR_TRUNCATED_SUFFIX)
    } else {
        (allowance - 2, "")
    };
    let mut used = 0;
    let mut end = 0;
    for (i, c) in error.char_indices() {
        let len = escaped_char_len(c);
        if used + len > room {
            break;
        }
        used += len;
        end = i + c.len_utf8();
    }
    let mut cut = String::with_capacity(end + suffix.len());
    cut.push_str(&error[..end]);
    cut.push_str(suffix);
    Some(cut)
}

/// Bytes of a list of output entries as a result carries it (0 when empty).
#[cfg(test)]
pub(crate) fn output_len(entries: &[Value]) -> usize {
    list_len(entries.iter().map(json_len).sum(), entries.len())
}

/// Bytes of the compact JSON list of entries whose own sizes sum to `sum`:
/// the entries, a comma between each two, and the brackets — or nothing
/// for no entries (contract §10: an empty list costs nothing).
fn list_len(sum: usize, count: usize) -> usize {
    if count == 0 {
        0
    } else {
        sum + count + 1
    }
}

/// Keeps leading entries and summarizes the rest in one marker entry.
/// Returns the entries and the size of their JSON list ([`list_len`]).
fn summarize_output(
    mut output: Vec<GuestJson>,
    lens: &[usize],
    allowance: usize,
    dropped_bytes: usize,
) -> (Vec<GuestJson>, usize) {
    // The marker entry with an empty prefix and a one-digit count, its
    // separator and the list's closing bracket.
    let base = json_len(&marker(0, "")) - 1 + JSON_ENTRY_OVERHEAD + 2;
    let n = lens.len();
    // Size of the JSON array text of entries k.. : sum + brackets + commas.
    let mut suffix_sums = vec![0usize; n + 1];
    for k in (0..n).rev() {
        suffix_sums[k] = suffix_sums[k + 1] + lens[k];
    }
    let rest_text_len = |k: usize| suffix_sums[k] + 2 + (n - k).saturating_sub(1) + dropped_bytes;
    // Kept entries cost their size and one byte each (`[` or a comma).
    let mut kept_cost = 0;
    let mut best_k = None;
    for (k, &len) in lens.iter().enumerate() {
        if kept_cost + base + digits(rest_text_len(k)) <= allowance {
            best_k = Some(k);
        }
        kept_cost += len + 1;
        if kept_cost > allowance {
            break;
        }
    }
    let Some(k) = best_k else {
        // Not even a marker fits: keep whole leading entries that fit.
        let mut cost = 1;
        let keep = lens
            .iter()
            .take_while(|&&len| {
                cost += len + 1;
                cost <= allowance
            })
            .count();
        output.truncate(keep);
        let used = list_len(lens[..keep].iter().sum(), keep);
        return (output, used);
    };
    let rest = output.split_off(k);
    let kept_len: usize = lens[..k].iter().sum();
    let mut rest_text = String::from("[");
    for (i, entry) in rest.iter().enumerate() {
        if i > 0 {
            rest_text.push(',');
        }
        rest_text.push_str(&entry.text());
    }
    rest_text.push(']');
    // What the marker entry leaves: the kept entries with their separators,
    // its own separator, the closing bracket and its `{"type":"json",…}`.
    let marker_allowance = allowance - (kept_len + k) - 2 - JSON_ENTRY_OVERHEAD;
    if let Some(marker) = marker_counting(
        &rest_text,
        marker_allowance,
        TRUNCATION_GUIDANCE,
        dropped_bytes,
    ) {
        let entry = json!({ "type": "json", "value": marker });
        let used = list_len(kept_len + json_len(&entry), k + 1);
        output.push(GuestJson::host(entry));
        (output, used)
    } else {
        (output, list_len(kept_len, k))
    }
}

/// Parses JSON text produced by the guest's `JSON.stringify` into its
/// well-formed projection (escaped lone surrogates become U+FFFD).
pub(crate) fn parse_guest_json(text: &str) -> Result<Value, FitError> {
    canonical_value(text).map(|c| c.value)
}

/// Parses JSON text produced by the guest: its projection and, when it
/// holds lone surrogates, its exact canonical text.
pub(crate) fn parse_guest_entry(text: &str) -> Result<GuestJson, FitError> {
    canonical_value(text).map(GuestJson::from)
}

/// Parses value JSON: its projection and its canonical compact text.
fn canonical_value(text: &str) -> Result<Canonical, FitError> {
    let canonical = |value: &Value| {
        serde_json::to_string(value).map_err(|e| FitError::InvalidValueJson(e.to_string()))
    };
    match serde_json::from_str::<Value>(text) {
        Ok(value) => Ok(Canonical {
            text: canonical(&value)?,
            value,
            exact: false,
        }),
        Err(first) => {
            let value = serde_json::from_str::<Value>(&replace_lone_surrogates(text))
                .map_err(|_| FitError::InvalidValueJson(first.to_string()))?;
            match exact_text(text, &value) {
                Some(text) => Ok(Canonical {
                    text,
                    value,
                    exact: true,
                }),
                None => Ok(Canonical {
                    text: canonical(&value)?,
                    value,
                    exact: false,
                }),
            }
        }
    }
}

/// The canonical compact text of guest JSON `text` (whose projection is
/// `projection`) with its lone surrogates kept as lowercase `\udXXX`
/// escapes: whitespace dropped, each number and each run of a string
/// between lone surrogates written as `serde_json` writes it. `None` when
/// the text does not project back to `projection` (never for the guest's
/// JSON; then the projection's own text is used). Linear in `text`.
fn exact_text(text: &str, projection: &Value) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b' ' | b'\t' | b'\n' | b'\r' => i += 1,
            b'"' => {
                let end = string_end(bytes, i)?;
                write_exact_string(&text[i + 1..end], &mut out)?;
                i = end + 1;
            }
            b'-' | b'0'..=b'9' => {
                let end = bytes[i..]
                    .iter()
                    .position(|b| !matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
                    .map_or(bytes.len(), |n| i + n);
                let number: Value = serde_json::from_str(&text[i..end]).ok()?;
                out.push_str(&number.to_string());
                i = end;
            }
            b => {
                out.push(b as char);
                i += 1;
            }
        }
    }
    let projected: Value = serde_json::from_str(&replace_lone_surrogates(&out)).ok()?;
    (projected == *projection).then_some(out)
}

/// The index of the quote that closes the JSON string opening at `start`.
fn string_end(bytes: &[u8], start: usize) -> Option<usize> {
    let mut i = start + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'"' => return Some(i),
            _ => i += 1,
        }
    }
    None
}

/// Writes the JSON string whose content (between the quotes) is `content`
/// canonically, keeping lone-surrogate escapes as lowercase `\udXXX`.
fn write_exact_string(content: &str, out: &mut String) -> Option<()> {
    out.push('"');
    let mut run_start = 0;
    let mut rest = content;
    let mut at = 0;
    while let Some(pos) = rest.find('\\') {
        let escape = &rest[pos..];
        let len = escape_len(escape);
        let lone = len == 6
            && hex_unit(escape.as_bytes(), 2).is_some_and(|u| (0xD800..0xE000).contains(&u));
        if lone {
            write_run(&content[run_start..at + pos], out)?;
            out.push_str(&escape[..6].to_ascii_lowercase());
            run_start = at + pos + 6;
        }
        at += pos + len;
        rest = &content[at..];
    }
    write_run(&content[run_start..], out)?;
    out.push('"');
    Some(())
}

/// Writes the string content `run` (no lone surrogates) as `serde_json`
/// writes it, without quotes.
fn write_run(run: &str, out: &mut String) -> Option<()> {
    let decoded: String = serde_json::from_str(&format!("\"{run}\"")).ok()?;
    let written = serde_json::to_string(&decoded).ok()?;
    out.push_str(&written[1..written.len() - 1]);
    Some(())
}

/// Replaces `\uD800`–`\uDFFF` escapes that are not part of a valid pair
/// with `\ufffd`.
fn replace_lone_surrogates(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(pos) = rest.find('\\') {
        out.push_str(&rest[..pos]);
        rest = &rest[pos..];
        let len = escape_len(rest);
        let atom = &rest[..len];
        let lone = len == 6
            && atom.as_bytes()[1] == b'u'
            && u16::from_str_radix(&atom[2..6], 16).is_ok_and(|u| (0xD800..0xE000).contains(&u));
        out.push_str(if lone { "\\ufffd" } else { atom });
        rest = &rest[len..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
#[path = "output_tests.rs"]
mod tests;
