//! `JSON.stringify` for plain data, in Rust.
//!
//! QuickJS's `JSON.stringify` costs about 10,000 fuel even for `{}` (it
//! builds a wrapper object, a key array and a cycle stack per call). The
//! prelude only ever stringifies *plain* data: the safe projection's output
//! (objects and arrays with own enumerable data properties, strings, finite
//! numbers, booleans, null) and its own small request objects. For those,
//! this walker writes the same text as `JSON.stringify` would:
//!
//! - keys in own-property order (integer keys ascending, then insertion
//!   order), enumerable string keys only;
//! - `undefined`, functions and symbols omitted in objects, `null` in arrays;
//! - numbers as ECMAScript `Number::toString` (`1e+21`, `1e-7`, `-0` → `0`),
//!   non-finite numbers as `null`;
//! - strings escaped like well-formed `JSON.stringify`: `\"`, `\\`, `\b`,
//!   `\f`, `\n`, `\r`, `\t`, other controls and lone surrogates as
//!   lowercase `\uXXXX`.
//!
//! Anything else (a BigInt, a nesting deeper than [`MAX_DEPTH`]) is
//! reported as `None`, and the caller falls back to the real
//! `JSON.stringify`. `tests/all/output.rs` checks the text against QuickJS's
//! own `JSON.stringify` for numbers, escapes, key order and omissions.

use rquickjs::{qjs, Array, Atom, Ctx, Object, Value};
use std::fmt::Write as _;

/// Deepest nesting written here; the projection stops at 100.
const MAX_DEPTH: usize = 512;

/// The JSON text of `value`, or `None` when it is not plain data (the
/// caller then uses `JSON.stringify`). `undefined` (and functions and
/// symbols) at the top level yield `None` too, like `JSON.stringify`'s
/// `undefined`.
pub fn stringify(ctx: &Ctx<'_>, value: &Value<'_>) -> Option<String> {
    let mut out = String::new();
    if write_value(ctx, value, &mut out, 0)? {
        Some(out)
    } else {
        None
    }
}

/// Writes `value`; `Some(false)` when it is omitted (undefined, function,
/// symbol), `None` when it is not plain data.
fn write_value(ctx: &Ctx<'_>, value: &Value<'_>, out: &mut String, depth: usize) -> Option<bool> {
    if depth > MAX_DEPTH {
        return None;
    }
    if let Some(i) = value.as_int() {
        let _ = write!(out, "{i}");
    } else if let Some(f) = value.as_float() {
        write_number(f, out);
    } else if let Some(b) = value.as_bool() {
        out.push_str(if b { "true" } else { "false" });
    } else if value.is_null() {
        out.push_str("null");
    } else if value.is_undefined() || value.is_function() || value.is_symbol() {
        return Some(false);
    } else if value.is_string() {
        write_string(ctx, value, out)?;
    } else if let Some(array) = value.as_array() {
        write_array(ctx, array, out, depth)?;
    } else if value.is_proxy() || value.is_big_int() {
        return None;
    } else if let Some(object) = value.as_object() {
        write_object(ctx, object, out, depth)?;
    } else {
        return None;
    }
    Some(true)
}

fn write_array(ctx: &Ctx<'_>, array: &Array<'_>, out: &mut String, depth: usize) -> Option<()> {
    out.push('[');
    for i in 0..array.len() {
        if i > 0 {
            out.push(',');
        }
        let item: Value = array.get(i).ok()?;
        if !write_value(ctx, &item, out, depth + 1)? {
            out.push_str("null");
        }
    }
    out.push(']');
    Some(())
}

fn write_object(ctx: &Ctx<'_>, object: &Object<'_>, out: &mut String, depth: usize) -> Option<()> {
    out.push('{');
    let mut first = true;
    for key in object.keys::<Atom>() {
        let key = key.ok()?;
        let item: Value = object.get(key.clone()).ok()?;
        let mark = out.len();
        if !first {
            out.push(',');
        }
        let name = key.to_js_string().ok()?;
        write_string(ctx, name.as_value(), out)?;
        out.push(':');
        if write_value(ctx, &item, out, depth + 1)? {
            first = false;
        } else {
            out.truncate(mark);
        }
    }
    out.push('}');
    Some(())
}

/// ECMAScript `Number::toString` for a finite double (`null` otherwise).
pub(crate) fn write_number(f: f64, out: &mut String) {
    if !f.is_finite() {
        out.push_str("null");
    } else if f == 0.0 {
        out.push('0');
    } else if (1e-6..1e21).contains(&f.abs()) {
        // Shortest round-trip digits in positional notation, as JS does in
        // this range.
        let _ = write!(out, "{f}");
    } else {
        // `1e21` → `1e+21`, `1.5e-7` stays.
        let text = format!("{f:e}");
        match text.split_once('e') {
            Some((mantissa, exp)) if !exp.starts_with('-') => {
                let _ = write!(out, "{mantissa}e+{exp}");
            }
            _ => out.push_str(&text),
        }
    }
}

/// Writes a JS string as a JSON string literal. QuickJS hands out lone
/// surrogates as their 3-byte (WTF-8) encoding; they become `\udXXX`.
pub(crate) fn write_string(ctx: &Ctx<'_>, value: &Value<'_>, out: &mut String) -> Option<()> {
    let mut len: usize = 0;
    // SAFETY: `value` is a live string of this context; the returned buffer
    // is freed below and not used afterwards.
    let ptr = unsafe { qjs::JS_ToCStringLen(ctx.as_raw().as_ptr(), &mut len, value.as_raw()) };
    if ptr.is_null() {
        // Out of memory: leave no exception pending; the caller falls back.
        let _ = ctx.catch();
        return None;
    }
    let bytes = unsafe { std::slice::from_raw_parts(ptr as *const u8, len) };
    escape_wtf8(bytes, out);
    unsafe { qjs::JS_FreeCString(ctx.as_raw().as_ptr(), ptr) };
    Some(())
}

pub(crate) fn escape_wtf8(bytes: &[u8], out: &mut String) {
    out.push('"');
    let mut i = 0;
    let mut start = 0;
    // Copies `bytes[start..end]`, which holds only well-formed UTF-8.
    let flush = |out: &mut String, start: usize, end: usize| {
        if start < end {
            // SAFETY: the range holds complete UTF-8 sequences (ASCII and
            // non-surrogate multi-byte sequences as QuickJS encodes them).
            out.push_str(unsafe { std::str::from_utf8_unchecked(&bytes[start..end]) });
        }
    };
    while i < bytes.len() {
        let b = bytes[i];
        let escape: Option<&str> = match b {
            b'"' => Some("\\\""),
            b'\\' => Some("\\\\"),
            b'\n' => Some("\\n"),
            b'\r' => Some("\\r"),
            b'\t' => Some("\\t"),
            0x08 => Some("\\b"),
            0x0c => Some("\\f"),
            _ => None,
        };
        if let Some(e) = escape {
            flush(out, start, i);
            out.push_str(e);
            i += 1;
            start = i;
        } else if b < 0x20 {
            flush(out, start, i);
            let _ = write!(out, "\\u{:04x}", b);
            i += 1;
            start = i;
        } else if b == 0xed && i + 2 < bytes.len() && bytes[i + 1] >= 0xa0 {
            // U+D800–U+DFFF: a lone surrogate.
            flush(out, start, i);
            let cp = 0xd000 | ((bytes[i + 1] as u32 & 0x3f) << 6) | (bytes[i + 2] as u32 & 0x3f);
            let _ = write!(out, "\\u{cp:04x}");
            i += 3;
            start = i;
        } else {
            i += 1;
        }
    }
    flush(out, start, i);
    out.push('"');
}
