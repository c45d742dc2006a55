//! `TextEncoder` and `TextDecoder`: the classes are JavaScript
//! (`text_encoding.js`), the UTF-8 conversion is Rust. Both are linear in
//! the text, which the cell's heap limit bounds.

use rquickjs::{prelude::Func, qjs, ArrayBuffer, Ctx, Exception, Function, Value};

/// The JavaScript half, evaluated once at pre-initialization.
const GLUE: &str = include_str!("text_encoding.js");

/// Defines the globals `TextEncoder` and `TextDecoder`.
pub(crate) fn register(ctx: &Ctx<'_>) -> Result<(), String> {
    let mut options = rquickjs::context::EvalOptions::default();
    options.global = true;
    options.strict = true;
    options.filename = Some("quickcell:text_encoding.js".into());
    let install: Function = ctx
        .eval_with_options(GLUE, options)
        .map_err(|e| e.to_string())?;
    let classes: rquickjs::Array = install
        .call((Func::from(encode_utf8), Func::from(decode_utf8)))
        .map_err(|e| e.to_string())?;
    let globals = ctx.globals();
    for (index, name) in ["TextEncoder", "TextDecoder"].into_iter().enumerate() {
        let class: Value = classes.get(index).map_err(|e| e.to_string())?;
        globals.set(name, class).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The UTF-8 bytes of a well-formed string (the glue calls
/// `toWellFormed` first), in a new `ArrayBuffer`.
fn encode_utf8<'js>(
    ctx: Ctx<'js>,
    text: rquickjs::String<'js>,
) -> rquickjs::Result<ArrayBuffer<'js>> {
    let mut len = 0;
    // SAFETY: the pointer is valid for `len` bytes until it is freed below.
    let ptr = unsafe { qjs::JS_ToCStringLen(ctx.as_raw().as_ptr(), &mut len, text.as_raw()) };
    if ptr.is_null() {
        return Err(rquickjs::Error::Exception);
    }
    let bytes = unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len as usize) };
    let buffer = ArrayBuffer::new_copy(ctx.clone(), bytes);
    unsafe { qjs::JS_FreeCString(ctx.as_raw().as_ptr(), ptr) };
    buffer
}

/// Decodes `length` bytes of `buffer` from `offset` as UTF-8: invalid
/// sequences become U+FFFD, or a `TypeError` when `fatal`; a leading byte
/// order mark is dropped unless `ignore_bom`.
fn decode_utf8<'js>(
    ctx: Ctx<'js>,
    buffer: ArrayBuffer<'js>,
    offset: f64,
    length: f64,
    fatal: bool,
    ignore_bom: bool,
) -> rquickjs::Result<rquickjs::String<'js>> {
    // A detached buffer reads as empty, as the standard says.
    let all: &[u8] = match buffer.as_raw() {
        Some(raw) => unsafe { raw.as_ref() },
        None => &[],
    };
    let start = offset as usize;
    let bytes = start
        .checked_add(length as usize)
        .and_then(|end| all.get(start..end))
        .unwrap_or(&[]);
    let bytes = match bytes {
        [0xEF, 0xBB, 0xBF, rest @ ..] if !ignore_bom => rest,
        _ => bytes,
    };
    let text = if fatal {
        match std::str::from_utf8(bytes) {
            Ok(text) => std::borrow::Cow::Borrowed(text),
            Err(e) => {
                return Err(Exception::throw_type(
                    &ctx,
                    &format!(
                        "TextDecoder.decode: the input is not valid UTF-8 (at byte {})",
                        e.valid_up_to()
                    ),
                ))
            }
        }
    } else {
        String::from_utf8_lossy(bytes)
    };
    rquickjs::String::from_str(ctx, &text)
}
