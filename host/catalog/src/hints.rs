//! Signature hints: JSON Schema → TypeScript-style text (tool-search.md §8).

use crate::text::{utf16_len, CollationKey};
use serde_json::{Map, Value};

/// Rendering limits for one kind of hint (tool-search.md §8.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HintBudget {
    /// Maximum length of the final text, in UTF-16 code units.
    pub max_chars: usize,
    /// Maximum properties rendered per object.
    pub max_props: usize,
    /// Maximum depth (root = 0; each property value or array item is +1).
    pub max_depth: usize,
    /// Maximum structural `anyOf`/`oneOf` variants.
    pub max_variants: usize,
    /// Emit numeric annotations such as `number /* integer, >= 0 */`.
    pub numeric_annotations: bool,
}

/// Budget for input hints: 300 characters, 16 properties, depth 4, 5 variants,
/// numeric annotations on.
pub const INPUT_HINT_BUDGET: HintBudget = HintBudget {
    max_chars: 300,
    max_props: 16,
    max_depth: 4,
    max_variants: 5,
    numeric_annotations: true,
};

/// Budget for output hints: 800 characters, 20 properties, depth 6, 5
/// variants, no numeric annotations.
pub const OUTPUT_HINT_BUDGET: HintBudget = HintBudget {
    max_chars: 800,
    max_props: 20,
    max_depth: 6,
    max_variants: 5,
    numeric_annotations: false,
};

/// A rendered schema: the text and whether every subschema was rendered
/// completely.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderedHint {
    /// The TypeScript-style text (may exceed the budget; callers decide).
    pub text: String,
    /// `false` when any part was replaced by `unknown`, `...` or omitted.
    pub complete: bool,
}

/// Render `schema` under `budget` without applying the final over-budget rule.
pub fn render_schema(schema: &Value, budget: HintBudget) -> RenderedHint {
    let mut r = Renderer {
        budget,
        complete: true,
    };
    let text = r.render(schema, 0, 0);
    RenderedHint {
        text,
        complete: r.complete,
    }
}

/// The input hint of a trusted host schema: incomplete parts render as
/// `unknown` in place; a final text over 300 characters becomes `"unknown"`.
///
/// ```
/// use quickcell_catalog::input_hint;
/// use serde_json::json;
/// let s = json!({"type":"object","required":["q"],"properties":{
///     "q":{"type":"string"},"limit":{"type":"integer","minimum":1}}});
/// assert_eq!(input_hint(&s), "{ q: string; limit?: number /* integer, >= 1 */ }");
/// ```
pub fn input_hint(schema: &Value) -> String {
    let r = render_schema(schema, INPUT_HINT_BUDGET);
    if utf16_len(&r.text) > INPUT_HINT_BUDGET.max_chars {
        "unknown".to_string()
    } else {
        r.text
    }
}

/// The output hint of a trusted host `outputSchema`: `None` when any part is
/// incomplete or the text exceeds 800 characters.
pub fn output_hint(schema: &Value) -> Option<String> {
    let r = render_schema(schema, OUTPUT_HINT_BUDGET);
    (r.complete && utf16_len(&r.text) <= OUTPUT_HINT_BUDGET.max_chars).then_some(r.text)
}

const TYPE_BEARING: [&str; 19] = [
    "type",
    "enum",
    "const",
    "properties",
    "additionalProperties",
    "patternProperties",
    "items",
    "prefixItems",
    "anyOf",
    "oneOf",
    "allOf",
    "$ref",
    "not",
    "if",
    "then",
    "else",
    "dependentSchemas",
    "dependencies",
    "required",
];

const UNSUPPORTED: [&str; 9] = [
    "$ref",
    "allOf",
    "not",
    "if",
    "then",
    "else",
    "dependentSchemas",
    "dependencies",
    "prefixItems",
];

/// Whether `key` can be written bare (`^[A-Za-z_$][A-Za-z0-9_$]*$`).
pub fn is_bare_key(key: &str) -> bool {
    let mut chars = key.chars();
    match chars.next() {
        Some(c) if c.is_ascii_alphabetic() || c == '_' || c == '$' => {}
        _ => return false,
    }
    chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
}

struct Renderer {
    budget: HintBudget,
    complete: bool,
}

impl Renderer {
    fn unknown(&mut self) -> String {
        self.complete = false;
        "unknown".to_string()
    }

    fn render(&mut self, schema: &Value, depth: usize, base: usize) -> String {
        if depth > self.budget.max_depth {
            return self.unknown();
        }
        let m = match schema {
            Value::Bool(true) => return "unknown".to_string(),
            Value::Object(m) => m,
            _ => return self.unknown(),
        };
        if !TYPE_BEARING.iter().any(|k| m.contains_key(*k)) {
            return "unknown".to_string();
        }
        if UNSUPPORTED.iter().any(|k| m.contains_key(*k))
            || m.get("items").is_some_and(Value::is_array)
        {
            return self.unknown();
        }
        let enum_values = m.get("enum");
        let mut text = if let Some(values) = enum_values {
            self.literals(values.as_array().map(Vec::as_slice))
        } else if let Some(c) = m.get("const") {
            self.literals(Some(std::slice::from_ref(c)))
        } else if let Some(variants) = m.get("anyOf").or_else(|| m.get("oneOf")) {
            self.variants(variants, depth, base)
        } else {
            match m.get("type") {
                Some(Value::String(t)) => self.typed(t, m, depth, base),
                Some(Value::Array(types)) => {
                    let mut parts: Vec<String> = Vec::new();
                    for t in types {
                        let Some(t) = t.as_str() else {
                            parts.push(self.unknown());
                            continue;
                        };
                        let used = parts.iter().map(|p| utf16_len(p) + 3).sum::<usize>();
                        let p = self.typed(t, m, depth, base + used);
                        if !parts.contains(&p) {
                            parts.push(p);
                        }
                    }
                    if parts.is_empty() {
                        self.unknown()
                    } else {
                        parts.join(" | ")
                    }
                }
                Some(_) => self.unknown(),
                None => {
                    if m.contains_key("items") {
                        self.typed("array", m, depth, base)
                    } else if m.contains_key("properties")
                        || m.contains_key("additionalProperties")
                        || m.contains_key("patternProperties")
                        || m.contains_key("required")
                    {
                        self.typed("object", m, depth, base)
                    } else {
                        "unknown".to_string()
                    }
                }
            }
        };
        if m.get("nullable") == Some(&Value::Bool(true)) {
            let enum_blocks = enum_values
                .is_some_and(|e| !e.as_array().is_some_and(|a| a.contains(&Value::Null)));
            let already = text.split(" | ").any(|p| p == "null");
            if !enum_blocks && !already {
                text.push_str(" | null");
            }
        }
        text
    }

    fn literals(&mut self, values: Option<&[Value]>) -> String {
        let Some(values) = values else {
            return self.unknown();
        };
        if values.is_empty()
            || values.len() > 8
            || !values.iter().all(|v| {
                matches!(
                    v,
                    Value::String(_) | Value::Number(_) | Value::Bool(_) | Value::Null
                )
            })
        {
            return self.unknown();
        }
        let text = values
            .iter()
            .map(|v| serde_json::to_string(v).unwrap_or_default())
            .collect::<Vec<_>>()
            .join(" | ");
        if utf16_len(&text) > 96 {
            return self.unknown();
        }
        text
    }

    fn variants(&mut self, variants: &Value, depth: usize, base: usize) -> String {
        let Some(list) = variants.as_array() else {
            return self.unknown();
        };
        if list.is_empty() || list.len() > self.budget.max_variants {
            return self.unknown();
        }
        let mut text = String::new();
        for (i, v) in list.iter().enumerate() {
            if i > 0 {
                text.push_str(" | ");
            }
            let part = self.render(v, depth, base + utf16_len(&text));
            text.push_str(&part);
        }
        text
    }

    fn typed(&mut self, t: &str, m: &Map<String, Value>, depth: usize, base: usize) -> String {
        match t {
            "string" => "string".to_string(),
            "boolean" => "boolean".to_string(),
            "null" => "null".to_string(),
            "number" | "integer" => self.number(t == "integer", m),
            "array" => match m.get("items") {
                None => "Array<unknown>".to_string(),
                Some(items) => {
                    let inner = self.render(items, depth + 1, base + 6);
                    format!("Array<{inner}>")
                }
            },
            "object" => self.object(m, depth, base),
            _ => self.unknown(),
        }
    }

    fn number(&mut self, integer: bool, m: &Map<String, Value>) -> String {
        if !self.budget.numeric_annotations {
            return "number".to_string();
        }
        let mut notes: Vec<String> = Vec::new();
        if integer {
            notes.push("integer".to_string());
        }
        for (key, op) in [
            ("minimum", ">="),
            ("maximum", "<="),
            ("exclusiveMinimum", ">"),
            ("exclusiveMaximum", "<"),
        ] {
            if let Some(n @ Value::Number(_)) = m.get(key) {
                notes.push(format!("{op} {n}"));
            }
        }
        if notes.is_empty() {
            "number".to_string()
        } else {
            format!("number /* {} */", notes.join(", "))
        }
    }

    fn object(&mut self, m: &Map<String, Value>, depth: usize, base: usize) -> String {
        let empty = Map::new();
        let props = m
            .get("properties")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        let open = matches!(m.get("additionalProperties"), Some(Value::Bool(true)))
            || m.get("additionalProperties").is_some_and(Value::is_object)
            || m.contains_key("patternProperties");
        let closed = m.get("additionalProperties") == Some(&Value::Bool(false));
        if props.is_empty() {
            if closed && !open {
                return "{}".to_string();
            }
            self.complete = false;
            return "{ ... }".to_string();
        }
        let required: Vec<&str> = m
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut req: Vec<(&String, &Value)> = Vec::new();
        let mut opt: Vec<(&String, &Value)> = Vec::new();
        for (k, v) in props {
            if required.contains(&k.as_str()) {
                req.push((k, v));
            } else {
                opt.push((k, v));
            }
        }
        req.sort_by_cached_key(|(k, _)| CollationKey::new(k));
        opt.sort_by_cached_key(|(k, _)| CollationKey::new(k));
        let mut text = String::from("{ ");
        let mut count = 0usize;
        let mut omitted = false;
        let ordered = req
            .into_iter()
            .map(|p| (p, true))
            .chain(opt.into_iter().map(|p| (p, false)));
        for ((key, value), is_req) in ordered {
            if count >= self.budget.max_props {
                omitted = true;
                break;
            }
            let key_text = if is_bare_key(key) {
                key.clone()
            } else {
                serde_json::to_string(key).unwrap_or_default()
            };
            let mut prefix = String::new();
            if count > 0 {
                prefix.push_str("; ");
            }
            prefix.push_str(&key_text);
            prefix.push_str(if is_req { ": " } else { "?: " });
            let start = base + utf16_len(&text) + utf16_len(&prefix);
            if start > self.budget.max_chars {
                omitted = true;
                break;
            }
            let saved = self.complete;
            let rendered = self.render(value, depth + 1, start);
            let candidate_len = start + utf16_len(&rendered) + 2;
            if candidate_len > self.budget.max_chars {
                self.complete = saved;
                omitted = true;
                break;
            }
            text.push_str(&prefix);
            text.push_str(&rendered);
            count += 1;
        }
        if omitted || open {
            self.complete = false;
            if count == 0 {
                text.push_str("...");
            } else {
                text.push_str("; ...");
            }
        }
        text.push_str(" }");
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn spec_example_input_hint() {
        let nested = json!({"type":"array","items":{"type":"array","items":{"type":"array",
            "items":{"type":"array","items":{"type":"array","items":{"type":"string"}}}}}});
        let schema = json!({
            "type": "object",
            "required": ["id"],
            "properties": {
                "zones": {"type":"array","items":{"enum":["north","south"]}},
                "policy": {"enum": ["a", {"x": 1}]},
                "nested": nested,
                "mode": {"type":"string","enum":["drip","flood"]},
                "id": {"type":"string"}
            }
        });
        assert_eq!(
            input_hint(&schema),
            "{ id: string; mode?: \"drip\" | \"flood\"; nested?: Array<Array<Array<Array<unknown>>>>; policy?: unknown; zones?: Array<\"north\" | \"south\"> }"
        );
        assert!(!render_schema(&schema, INPUT_HINT_BUDGET).complete);
        assert_eq!(
            output_hint(&schema),
            None,
            "incomplete output hints are omitted"
        );
    }

    #[test]
    fn spec_example_output_hint() {
        let schema = json!({"type":"array","items":{"type":"object","additionalProperties":false,
            "required":["tons","id","paid"],
            "properties":{"id":{"type":"string"},"paid":{"type":"boolean"},"tons":{"type":"number"}}}});
        assert_eq!(
            output_hint(&schema).as_deref(),
            Some("Array<{ id: string; paid: boolean; tons: number }>")
        );
        assert_eq!(
            input_hint(&json!({"type":"string","nullable":true})),
            "string | null"
        );
    }

    #[test]
    fn primitive_and_union_rules() {
        assert_eq!(input_hint(&json!(true)), "unknown");
        assert_eq!(input_hint(&json!({})), "unknown");
        assert!(render_schema(&json!({}), INPUT_HINT_BUDGET).complete);
        assert!(render_schema(&json!({"description":"x"}), INPUT_HINT_BUDGET).complete);
        assert_eq!(
            input_hint(&json!({"type":"integer"})),
            "number /* integer */"
        );
        assert_eq!(
            input_hint(
                &json!({"type":"number","minimum":0,"maximum":10,"exclusiveMinimum":1,"exclusiveMaximum":9})
            ),
            "number /* >= 0, <= 10, > 1, < 9 */"
        );
        assert_eq!(
            output_hint(&json!({"type":"integer","minimum":0})).as_deref(),
            Some("number")
        );
        assert_eq!(
            input_hint(&json!({"type":["string","null"]})),
            "string | null"
        );
        assert_eq!(
            input_hint(&json!({"type":["string","null"],"nullable":true})),
            "string | null"
        );
        assert_eq!(input_hint(&json!({"const":"x"})), "\"x\"");
        assert_eq!(
            input_hint(&json!({"enum":[1, true, null, "a"]})),
            "1 | true | null | \"a\""
        );
        // nullable is not appended when an enum lacks null.
        assert_eq!(input_hint(&json!({"enum":["a"],"nullable":true})), "\"a\"");
        assert_eq!(
            input_hint(&json!({"enum":["a", null],"nullable":true})),
            "\"a\" | null"
        );
        assert_eq!(
            input_hint(&json!({"anyOf":[{"type":"string"},{"type":"number"}]})),
            "string | number"
        );
        assert_eq!(input_hint(&json!({"type":"array"})), "Array<unknown>");
        assert_eq!(
            output_hint(&json!({"type":"object","properties":{"a b":{"type":"string"}},"additionalProperties":false})).as_deref(),
            Some("{ \"a b\"?: string }")
        );
        assert_eq!(
            output_hint(&json!({"type":"object","additionalProperties":false})).as_deref(),
            Some("{}")
        );
    }

    #[test]
    fn incomplete_cases() {
        let incomplete = |s: Value| {
            let r = render_schema(&s, INPUT_HINT_BUDGET);
            assert!(!r.complete, "{s} should be incomplete, got {}", r.text);
            assert_eq!(output_hint(&s), None, "{s}");
            r.text
        };
        // 9 literals, an object literal, overlong literal text.
        assert_eq!(incomplete(json!({"enum":[1,2,3,4,5,6,7,8,9]})), "unknown");
        assert_eq!(incomplete(json!({"enum":[{"a":1}]})), "unknown");
        assert_eq!(incomplete(json!({"enum":["x".repeat(100)]})), "unknown");
        assert_eq!(incomplete(json!({"$ref":"#/x"})), "unknown");
        assert_eq!(incomplete(json!({"allOf":[{"type":"string"}]})), "unknown");
        assert_eq!(incomplete(json!({"not":{"type":"string"}})), "unknown");
        assert_eq!(incomplete(json!({"if":{},"then":{}})), "unknown");
        assert_eq!(
            incomplete(json!({"type":"array","prefixItems":[{}]})),
            "unknown"
        );
        assert_eq!(
            incomplete(json!({"type":"array","items":[{"type":"string"}]})),
            "unknown"
        );
        assert_eq!(incomplete(json!({"type":"date"})), "unknown");
        assert_eq!(incomplete(json!({"anyOf":[]})), "unknown");
        let six: Vec<Value> = (0..6).map(|i| json!({"const": i})).collect();
        assert_eq!(incomplete(json!({"anyOf": six})), "unknown");
        let five: Vec<Value> = (0..5).map(|i| json!({"const": i})).collect();
        assert_eq!(input_hint(&json!({"oneOf": five})), "0 | 1 | 2 | 3 | 4");
        assert_eq!(incomplete(json!({"type":"object"})), "{ ... }");
        assert_eq!(
            incomplete(
                json!({"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":true})
            ),
            "{ a?: string; ... }"
        );
        assert_eq!(
            incomplete(
                json!({"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":{"type":"string"}})
            ),
            "{ a?: string; ... }"
        );
        assert_eq!(
            incomplete(
                json!({"type":"object","properties":{"a":{"type":"string"}},"patternProperties":{"^x":{}}})
            ),
            "{ a?: string; ... }"
        );
        // An unspecified additionalProperties does not make it incomplete.
        assert!(
            render_schema(
                &json!({"type":"object","properties":{"a":{"type":"string"}}}),
                INPUT_HINT_BUDGET
            )
            .complete
        );
        // A 10,000-character key never fits.
        let mut props = serde_json::Map::new();
        props.insert("k".repeat(10_000), json!({"type":"string"}));
        let s = json!({"type":"object","properties": props});
        assert_eq!(incomplete(s), "{ ... }");
        // Property cap: 17 properties → 16 rendered plus `; ...`.
        let mut props = serde_json::Map::new();
        for i in 0..17 {
            props.insert(format!("p{i:02}"), json!({"type":"string"}));
        }
        let s17 = json!({"type":"object","properties": props});
        let r = render_schema(&s17, INPUT_HINT_BUDGET);
        assert!(!r.complete);
        assert!(r.text.ends_with("p15?: string; ... }"), "{}", r.text);
        assert!(!r.text.contains("p16"));
        // The output cap is 20 properties: 17 is complete, 21 is not.
        assert!(output_hint(&s17).is_some());
        for i in 17..21 {
            props.insert(format!("p{i:02}"), json!({"type":"string"}));
        }
        assert_eq!(
            output_hint(&json!({"type":"object","properties": props})),
            None
        );
    }

    #[test]
    fn budgets() {
        // Many long-named properties: rendered within 300 characters plus `; ...`.
        let mut props = serde_json::Map::new();
        for i in 0..15 {
            props.insert(
                format!("property_name_{i:02}_xxxxxxxx"),
                json!({"type":"string"}),
            );
        }
        let s = json!({"type":"object","properties": props});
        let h = input_hint(&s);
        assert!(utf16_len(&h) <= 300, "{h}");
        assert!(h.ends_with("; ... }"), "{h}");
        // A union too long for the budget as a whole becomes "unknown".
        let long: Vec<Value> = (0..5)
            .map(|i| json!({"enum":[format!("{}{i}", "v".repeat(80))]}))
            .collect();
        assert_eq!(input_hint(&json!({"anyOf": long})), "unknown");
        // Output depth 6: seven nested arrays → incomplete → omitted.
        let mut s = json!({"type":"string"});
        for _ in 0..6 {
            s = json!({"type":"array","items": s});
        }
        assert!(output_hint(&s).is_some());
        s = json!({"type":"array","items": s});
        assert_eq!(output_hint(&s), None);
    }
}
