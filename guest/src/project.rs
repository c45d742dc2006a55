//! The safe projection (contract §8.7) written straight to JSON text.
//!
//! `prelude.js` defines the projection (`project`): own enumerable data
//! properties only, no getters and no `toJSON` run, cycles → `"[Circular]"`,
//! depth 100 → `"[Depth limit]"`, BigInt → decimal string, Date → ISO string
//! (`null` when invalid), Promise → the unawaited-promise text, Error →
//! `{name, message, ...own}` without `stack`, an object whose inspection
//! throws → `"[Unserializable]"`. In JavaScript it costs thousands of fuel
//! per property (`Object.getOwnPropertyDescriptor` alone is ~9,000) plus a
//! `JSON.stringify` of the copy; this walker reads the same descriptors
//! through the QuickJS API and writes the JSON text in one pass.
//!
//! Values this walker does not reproduce exactly are handed back
//! ([`Projected::Fallback`]) and the prelude projects them in JavaScript:
//! functions (tool handles project to their metadata, which lives in the
//! prelude), proxies (their traps run in a defined order) and typed arrays.

use crate::plain_json::{write_number, write_string};
use rquickjs::{qjs, Ctx, Function, Object, Persistent, Value};
use std::cell::RefCell;
use std::ffi::c_void;

/// Nesting depth at which the projection stops (as in the prelude).
const MAX_PROJECTION_DEPTH: usize = 100;
/// Longest prototype chain walked when looking for Date or Error.
const MAX_PROTO_CHAIN: usize = 10_000;

/// What the prelude captured at initialization, before user code ran.
///
/// The prototypes are kept as raw values: `_keep` holds their references, so
/// they stay valid (and a snapshot of linear memory keeps them) without a
/// reference taken per projection.
struct Intrinsics {
    _keep: Vec<Persistent<Object<'static>>>,
    date_proto: qjs::JSValue,
    error_proto: qjs::JSValue,
    /// `Object.prototype` and `Array.prototype`: an object whose prototype
    /// is one of them is neither a Date nor an Error, so the common case
    /// skips both prototype-chain walks.
    plain_protos: [qjs::JSValue; 2],
    date_to_iso_string: Persistent<Function<'static>>,
    unawaited: String,
}

thread_local! {
    static INTRINSICS: RefCell<Option<Intrinsics>> = const { RefCell::new(None) };
}

/// Records the intrinsics the projection compares against (called once by
/// the prelude at initialization).
pub fn set_intrinsics<'js>(
    ctx: &Ctx<'js>,
    date_proto: Object<'js>,
    error_proto: Object<'js>,
    date_to_iso_string: Function<'js>,
    unawaited: String,
) {
    // At initialization no user code has run, so these are the originals.
    let object_proto = Object::new(ctx.clone())
        .ok()
        .and_then(|o| o.get_prototype());
    let array_proto = rquickjs::Array::new(ctx.clone())
        .ok()
        .and_then(|a| a.as_object().get_prototype());
    let (Some(object_proto), Some(array_proto)) = (object_proto, array_proto) else {
        return;
    };
    let protos = [date_proto, error_proto, object_proto, array_proto];
    let raw = protos.each_ref().map(|p| p.as_raw());
    INTRINSICS.with(|i| {
        *i.borrow_mut() = Some(Intrinsics {
            _keep: protos
                .into_iter()
                .map(|p| Persistent::save(ctx, p))
                .collect(),
            date_proto: raw[0],
            error_proto: raw[1],
            plain_protos: [raw[2], raw[3]],
            date_to_iso_string: Persistent::save(ctx, date_to_iso_string),
            unawaited,
        })
    });
}

/// The outcome of [`project_json`].
pub enum Projected {
    /// The projection's JSON text.
    Text(String),
    /// The value projects to `undefined` (symbols, `undefined`).
    Undefined,
    /// The prelude must project this value itself.
    Fallback,
}

/// Projects `value` and writes it as JSON.
pub fn project_json<'js>(ctx: &Ctx<'js>, value: &Value<'js>) -> Projected {
    INTRINSICS.with(|i| {
        let borrowed = i.borrow();
        let Some(intrinsics) = borrowed.as_ref() else {
            return Projected::Fallback;
        };
        let mut p = Projector {
            ctx,
            date_proto: intrinsics.date_proto,
            error_proto: intrinsics.error_proto,
            plain_protos: intrinsics.plain_protos,
            to_iso: &intrinsics.date_to_iso_string,
            unawaited: &intrinsics.unawaited,
            stack: Vec::new(),
            out: String::new(),
        };
        match p.value(value, 0) {
            Step::Wrote => Projected::Text(p.out),
            Step::Omitted => Projected::Undefined,
            Step::Fallback => Projected::Fallback,
        }
    })
}

#[derive(PartialEq, Eq)]
enum Step {
    Wrote,
    Omitted,
    Fallback,
}

/// A JavaScript exception was raised (and is pending on the context).
struct Thrown;

/// A proxy sits on a prototype chain the walker would have to read.
enum ProxyOnChain {
    Yes,
}

struct Projector<'a, 'js> {
    ctx: &'a Ctx<'js>,
    date_proto: qjs::JSValue,
    error_proto: qjs::JSValue,
    plain_protos: [qjs::JSValue; 2],
    to_iso: &'a Persistent<Function<'static>>,
    unawaited: &'a str,
    /// Objects on the current path (for cycles).
    stack: Vec<*mut c_void>,
    out: String,
}

fn ptr_of(v: qjs::JSValue) -> *mut c_void {
    unsafe { qjs::JS_VALUE_GET_PTR(v) }
}

impl<'a, 'js> Projector<'a, 'js> {
    fn raw_ctx(&self) -> *mut qjs::JSContext {
        self.ctx.as_raw().as_ptr()
    }

    fn literal(&mut self, text: &str) {
        // The markers are plain ASCII without quotes or backslashes.
        self.out.push('"');
        self.out.push_str(text);
        self.out.push('"');
    }

    fn value(&mut self, v: &Value<'js>, depth: usize) -> Step {
        let raw = v.as_raw();
        let tag = unsafe { qjs::JS_VALUE_GET_NORM_TAG(raw) };
        match tag {
            qjs::JS_TAG_STRING | qjs::JS_TAG_STRING_ROPE => {
                if write_string(self.ctx, v, &mut self.out).is_none() {
                    return Step::Fallback;
                }
            }
            qjs::JS_TAG_INT => {
                use std::fmt::Write as _;
                let _ = write!(self.out, "{}", unsafe { qjs::JS_VALUE_GET_INT(raw) });
            }
            qjs::JS_TAG_FLOAT64 => {
                write_number(unsafe { qjs::JS_VALUE_GET_FLOAT64(raw) }, &mut self.out)
            }
            qjs::JS_TAG_BOOL => self
                .out
                .push_str(if unsafe { qjs::JS_VALUE_GET_BOOL(raw) } {
                    "true"
                } else {
                    "false"
                }),
            qjs::JS_TAG_NULL => self.out.push_str("null"),
            qjs::JS_TAG_UNDEFINED | qjs::JS_TAG_SYMBOL | qjs::JS_TAG_UNINITIALIZED => {
                return Step::Omitted
            }
            qjs::JS_TAG_BIG_INT | qjs::JS_TAG_SHORT_BIG_INT => {
                let text = unsafe {
                    Value::from_raw(self.ctx.clone(), qjs::JS_ToString(self.raw_ctx(), raw))
                };
                if !text.is_string() || write_string(self.ctx, &text, &mut self.out).is_none() {
                    let _ = self.ctx.catch();
                    return Step::Fallback;
                }
            }
            qjs::JS_TAG_OBJECT => return self.object(v, depth),
            _ => return Step::Fallback,
        }
        Step::Wrote
    }

    fn object(&mut self, v: &Value<'js>, depth: usize) -> Step {
        let raw = v.as_raw();
        if v.is_function() || v.is_proxy() || unsafe { qjs::JS_GetTypedArrayType(raw) } >= 0 {
            return Step::Fallback;
        }
        if v.is_promise() {
            let text = self.unawaited.to_owned();
            self.literal_escaped(&text);
            return Step::Wrote;
        }
        let ptr = ptr_of(raw);
        if self.stack.contains(&ptr) {
            self.literal("[Circular]");
            return Step::Wrote;
        }
        if depth >= MAX_PROJECTION_DEPTH {
            self.literal("[Depth limit]");
            return Step::Wrote;
        }
        self.stack.push(ptr);
        let mark = self.out.len();
        let step = match self.object_body(v, depth) {
            Ok(step) => step,
            Err(Thrown) => {
                let _ = self.ctx.catch();
                self.out.truncate(mark);
                self.literal("[Unserializable]");
                Step::Wrote
            }
        };
        self.stack.pop();
        step
    }

    /// A string that may need escaping, as a JSON literal.
    fn literal_escaped(&mut self, text: &str) {
        crate::plain_json::escape_wtf8(text.as_bytes(), &mut self.out);
    }

    /// Whether `proto` is on `v`'s prototype chain. `None` when the chain
    /// holds a proxy (its traps are the prelude's to run, in its order) or
    /// cannot be read.
    fn has_proto(&self, v: &Value<'js>, proto: qjs::JSValue) -> Option<bool> {
        let target = ptr_of(proto);
        let mut current = v.clone();
        for _ in 0..MAX_PROTO_CHAIN {
            let next = self.prototype_of(&current)?;
            if next.is_null() || !next.is_object() {
                return Some(false);
            }
            if ptr_of(next.as_raw()) == target {
                return Some(true);
            }
            if next.is_proxy() {
                return None;
            }
            current = next;
        }
        Some(false)
    }

    /// `v`'s prototype; `None` (and no exception pending) when it cannot be
    /// read.
    fn prototype_of(&self, v: &Value<'js>) -> Option<Value<'js>> {
        // SAFETY: `v` is a live non-proxy object of this context; the result
        // is a new reference, owned by the `Value` below.
        let proto = unsafe {
            Value::from_raw(
                self.ctx.clone(),
                qjs::JS_GetPrototype(self.raw_ctx(), v.as_raw()),
            )
        };
        if proto.is_exception() {
            let _ = self.ctx.catch();
            return None;
        }
        Some(proto)
    }

    /// Whether `v`'s prototype is `Object.prototype` or `Array.prototype`.
    fn has_plain_proto(&self, v: &Value<'js>) -> bool {
        let Some(proto) = self.prototype_of(v) else {
            return false;
        };
        proto.is_object()
            && self
                .plain_protos
                .iter()
                .any(|p| ptr_of(*p) == ptr_of(proto.as_raw()))
    }

    fn object_body(&mut self, v: &Value<'js>, depth: usize) -> Result<Step, Thrown> {
        let plain = self.has_plain_proto(v);
        let Some(is_date) = (if plain {
            Some(false)
        } else {
            self.has_proto(v, self.date_proto)
        }) else {
            return Ok(Step::Fallback);
        };
        if is_date {
            let Ok(to_iso) = self.to_iso.clone().restore(self.ctx) else {
                return Ok(Step::Fallback);
            };
            match to_iso.call::<_, Value>((rquickjs::function::This(v.clone()),)) {
                Ok(s) if s.is_string() => {
                    if write_string(self.ctx, &s, &mut self.out).is_none() {
                        return Ok(Step::Fallback);
                    }
                }
                _ => {
                    let _ = self.ctx.catch();
                    self.out.push_str("null");
                }
            }
            return Ok(Step::Wrote);
        }
        if unsafe { qjs::JS_IsArray(v.as_raw()) } {
            return self.array(v, depth);
        }
        let Some(is_error) = (if plain {
            Some(false)
        } else {
            self.has_proto(v, self.error_proto)
        }) else {
            return Ok(Step::Fallback);
        };
        // (key JSON, value JSON); an Error's name and message come first.
        let mut entries: Vec<(String, String, bool)> = Vec::new();
        if is_error {
            let (Ok(name), Ok(message)) = (
                self.data_prop_string(v, "name")?,
                self.data_prop_string(v, "message")?,
            ) else {
                return Ok(Step::Fallback);
            };
            let mut n = String::new();
            match name {
                Some(s) => {
                    if write_string(self.ctx, &s, &mut n).is_none() {
                        return Ok(Step::Fallback);
                    }
                }
                None => n.push_str("\"Error\""),
            }
            let mut m = String::new();
            match message {
                Some(s) => {
                    if write_string(self.ctx, &s, &mut m).is_none() {
                        return Ok(Step::Fallback);
                    }
                }
                None => m.push_str("\"\""),
            }
            entries.push(("\"name\"".into(), n, false));
            entries.push(("\"message\"".into(), m, false));
        }
        let ctx = self.raw_ctx();
        let mut tab: *mut qjs::JSPropertyEnum = std::ptr::null_mut();
        let mut len: u32 = 0;
        let flags = (qjs::JS_GPN_STRING_MASK | qjs::JS_GPN_ENUM_ONLY) as i32;
        if unsafe { qjs::JS_GetOwnPropertyNames(ctx, &mut tab, &mut len, v.as_raw(), flags) } < 0 {
            return Err(Thrown);
        }
        let atoms: Vec<qjs::JSAtom> = (0..len as usize)
            .map(|i| unsafe { (*tab.add(i)).atom })
            .collect();
        let result = (|| -> Result<Option<Step>, Thrown> {
            for atom in atoms {
                let Some(item) = self.own_data(v, atom, true)? else {
                    continue;
                };
                let key =
                    unsafe { Value::from_raw(self.ctx.clone(), qjs::JS_AtomToString(ctx, atom)) };
                if !key.is_string() {
                    return Err(Thrown);
                }
                let mut key_json = String::new();
                if write_string(self.ctx, &key, &mut key_json).is_none() {
                    return Ok(Some(Step::Fallback));
                }
                if is_error && key_json == "\"stack\"" {
                    continue;
                }
                let saved = std::mem::take(&mut self.out);
                let step = self.value(&item, depth + 1);
                let value_json = std::mem::replace(&mut self.out, saved);
                match step {
                    Step::Fallback => return Ok(Some(Step::Fallback)),
                    Step::Omitted => {}
                    Step::Wrote => {
                        let index = is_array_index(&key_json);
                        // Only an Error's leading name and message can be
                        // met again; other keys are unique.
                        let existing =
                            if is_error && (key_json == "\"name\"" || key_json == "\"message\"") {
                                entries.iter_mut().find(|e| e.0 == key_json)
                            } else {
                                None
                            };
                        match existing {
                            Some(e) => e.1 = value_json,
                            None => entries.push((key_json, value_json, index)),
                        }
                    }
                }
            }
            Ok(None)
        })();
        unsafe { qjs::JS_FreePropertyEnum(ctx, tab, len) };
        if let Some(step) = result? {
            return Ok(step);
        }
        // Integer keys come first, ascending, as in any JS object; only an
        // Error's leading name and message can put them out of order here.
        if is_error && entries.iter().any(|e| e.2) {
            let mut indexed: Vec<_> = entries.iter().filter(|e| e.2).cloned().collect();
            indexed.sort_by_key(|e| e.0.trim_matches('"').parse::<u64>().unwrap_or(0));
            let rest: Vec<_> = entries.iter().filter(|e| !e.2).cloned().collect();
            entries = indexed.into_iter().chain(rest).collect();
        }
        self.out.push('{');
        for (i, (k, val, _)) in entries.iter().enumerate() {
            if i > 0 {
                self.out.push(',');
            }
            self.out.push_str(k);
            self.out.push(':');
            self.out.push_str(val);
        }
        self.out.push('}');
        Ok(Step::Wrote)
    }

    fn array(&mut self, v: &Value<'js>, depth: usize) -> Result<Step, Thrown> {
        let ctx = self.raw_ctx();
        let length_atom = unsafe { qjs::JS_NewAtom(ctx, c"length".as_ptr()) };
        let length = self.own_data(v, length_atom, false);
        unsafe { qjs::JS_FreeAtom(ctx, length_atom) };
        let n = match length? {
            Some(l) => l.as_number().map_or(0, |n| n as u64),
            None => 0,
        };
        self.out.push('[');
        for i in 0..n {
            if i > 0 {
                self.out.push(',');
            }
            let atom = unsafe { qjs::JS_NewAtomUInt32(ctx, i as u32) };
            let item = self.own_data(v, atom, false);
            unsafe { qjs::JS_FreeAtom(ctx, atom) };
            match item? {
                None => self.out.push_str("null"),
                Some(item) => match self.value(&item, depth + 1) {
                    Step::Wrote => {}
                    Step::Omitted => self.out.push_str("null"),
                    Step::Fallback => return Ok(Step::Fallback),
                },
            }
        }
        self.out.push(']');
        Ok(Step::Wrote)
    }

    /// The value of `v`'s own data property `atom`; `None` when it is
    /// missing, an accessor, or not enumerable while `enumerable` is asked
    /// for (array elements and `length` are read either way, as in the
    /// prelude).
    fn own_data(
        &self,
        v: &Value<'js>,
        atom: qjs::JSAtom,
        enumerable: bool,
    ) -> Result<Option<Value<'js>>, Thrown> {
        let ctx = self.raw_ctx();
        let mut desc = qjs::JSPropertyDescriptor {
            flags: 0,
            value: qjs::JS_MKVAL(qjs::JS_TAG_UNDEFINED, 0),
            getter: qjs::JS_MKVAL(qjs::JS_TAG_UNDEFINED, 0),
            setter: qjs::JS_MKVAL(qjs::JS_TAG_UNDEFINED, 0),
        };
        let found = unsafe { qjs::JS_GetOwnProperty(ctx, &mut desc, v.as_raw(), atom) };
        if found < 0 {
            return Err(Thrown);
        }
        if found == 0 {
            return Ok(None);
        }
        let value = unsafe { Value::from_raw(self.ctx.clone(), desc.value) };
        drop(unsafe { Value::from_raw(self.ctx.clone(), desc.getter) });
        drop(unsafe { Value::from_raw(self.ctx.clone(), desc.setter) });
        let flags = desc.flags as u32;
        if flags & qjs::JS_PROP_GETSET != 0 || (enumerable && flags & qjs::JS_PROP_ENUMERABLE == 0)
        {
            return Ok(None);
        }
        Ok(Some(value))
    }

    /// The prelude's `dataProp` for an Error's `name` / `message`: the first
    /// own property along the prototype chain, if it is a data property
    /// holding a string.
    fn data_prop_string(
        &self,
        v: &Value<'js>,
        key: &str,
    ) -> Result<Result<Option<Value<'js>>, ProxyOnChain>, Thrown> {
        let ctx = self.raw_ctx();
        let c_key = if key == "name" { c"name" } else { c"message" };
        let atom = unsafe { qjs::JS_NewAtom(ctx, c_key.as_ptr()) };
        let result = (|| -> Result<Result<Option<Value<'js>>, Thrown>, ProxyOnChain> {
            let mut current = Some(v.clone());
            for _ in 0..MAX_PROTO_CHAIN {
                let Some(o) = current else {
                    return Ok(Ok(None));
                };
                if o.is_proxy() {
                    // Its trap is the prelude's to run.
                    return Err(ProxyOnChain::Yes);
                }
                let mut desc = qjs::JSPropertyDescriptor {
                    flags: 0,
                    value: qjs::JS_MKVAL(qjs::JS_TAG_UNDEFINED, 0),
                    getter: qjs::JS_MKVAL(qjs::JS_TAG_UNDEFINED, 0),
                    setter: qjs::JS_MKVAL(qjs::JS_TAG_UNDEFINED, 0),
                };
                let found = unsafe { qjs::JS_GetOwnProperty(ctx, &mut desc, o.as_raw(), atom) };
                if found < 0 {
                    return Ok(Err(Thrown));
                }
                if found > 0 {
                    let value = unsafe { Value::from_raw(self.ctx.clone(), desc.value) };
                    drop(unsafe { Value::from_raw(self.ctx.clone(), desc.getter) });
                    drop(unsafe { Value::from_raw(self.ctx.clone(), desc.setter) });
                    let is_data = desc.flags as u32 & qjs::JS_PROP_GETSET == 0;
                    return Ok(Ok((is_data && value.is_string()).then_some(value)));
                }
                let next = unsafe {
                    Value::from_raw(self.ctx.clone(), qjs::JS_GetPrototype(ctx, o.as_raw()))
                };
                if next.is_exception() {
                    return Ok(Err(Thrown));
                }
                current = next.is_object().then_some(next);
            }
            Ok(Ok(None))
        })();
        unsafe { qjs::JS_FreeAtom(ctx, atom) };
        match result {
            Err(ProxyOnChain::Yes) => Ok(Err(ProxyOnChain::Yes)),
            Ok(Err(Thrown)) => Err(Thrown),
            Ok(Ok(v)) => Ok(Ok(v)),
        }
    }
}

/// Whether a JSON key literal names an array index (`"0"`, `"17"`).
fn is_array_index(key_json: &str) -> bool {
    let k = key_json.trim_matches('"');
    !k.is_empty()
        && k.len() <= 10
        && k.bytes().all(|b| b.is_ascii_digit())
        && (k == "0" || !k.starts_with('0'))
        && k.parse::<u64>().is_ok_and(|n| n < u32::MAX as u64)
}
