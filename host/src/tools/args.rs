//! Strict parsing of a tool's JSON arguments object.

use super::ToolError;
use serde_json::{Map, Value};

/// A tool's arguments: a JSON object whose keys are checked against the
/// tool's declared properties. `null` (no arguments) reads as `{}`; a
/// property whose value is `null` reads as absent.
pub(crate) struct Args {
    tool: &'static str,
    map: Map<String, Value>,
}

impl Args {
    /// Parses `value` for `tool`, rejecting any key not in `allowed`.
    pub(crate) fn parse(
        tool: &'static str,
        value: Value,
        allowed: &[&str],
    ) -> Result<Self, ToolError> {
        let map = match value {
            Value::Null => Map::new(),
            Value::Object(map) => map,
            other => {
                return Err(ToolError::invalid_input(format!(
                    "{tool}: arguments must be an object, got {}",
                    type_name(&other)
                )))
            }
        };
        if let Some(key) = map.keys().find(|k| !allowed.contains(&k.as_str())) {
            return Err(ToolError::invalid_input(format!(
                "{tool}: unknown argument `{key}` (expected {})",
                allowed.join(", ")
            )));
        }
        Ok(Self { tool, map })
    }

    fn get(&self, key: &str) -> Option<&Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    /// An optional string argument.
    pub(crate) fn opt_str(&self, key: &str) -> Result<Option<&str>, ToolError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(self.bad(key, "a string", other)),
        }
    }

    /// A required string argument.
    pub(crate) fn str(&self, key: &str) -> Result<&str, ToolError> {
        self.opt_str(key)?.ok_or_else(|| {
            ToolError::invalid_input(format!("{}: missing required argument `{key}`", self.tool))
        })
    }

    /// An optional boolean argument.
    pub(crate) fn opt_bool(&self, key: &str) -> Result<Option<bool>, ToolError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(self.bad(key, "a boolean", other)),
        }
    }

    /// An optional integer argument within `min..=max` (a float with no
    /// fractional part counts as an integer).
    pub(crate) fn opt_int(&self, key: &str, min: u64, max: u64) -> Result<Option<u64>, ToolError> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        let n = match v {
            Value::Number(n) => n.as_u64().or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f <= u64::MAX as f64)
                    .map(|f| f as u64)
            }),
            _ => None,
        };
        match n {
            Some(n) if (min..=max).contains(&n) => Ok(Some(n)),
            _ => Err(self.bad(key, &format!("an integer from {min} to {max}"), v)),
        }
    }

    fn bad(&self, key: &str, expected: &str, got: &Value) -> ToolError {
        let shown = match got {
            Value::Number(n) => n.to_string(),
            other => type_name(other).to_owned(),
        };
        ToolError::invalid_input(format!(
            "{}: argument `{key}` must be {expected}, got {shown}",
            self.tool
        ))
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_and_rejects() {
        let a = Args::parse(
            "t",
            json!({"p": "x", "n": 3.0, "b": true, "z": null}),
            &["p", "n", "b", "z"],
        )
        .unwrap();
        assert_eq!(a.str("p").unwrap(), "x");
        assert_eq!(a.opt_int("n", 1, 5).unwrap(), Some(3));
        assert_eq!(a.opt_bool("b").unwrap(), Some(true));
        assert_eq!(a.opt_str("z").unwrap(), None);
        assert!(a
            .opt_int("n", 4, 5)
            .unwrap_err()
            .message
            .contains("from 4 to 5, got 3"));
        assert!(a.opt_bool("p").is_err());
        assert!(a
            .str("z")
            .unwrap_err()
            .message
            .contains("missing required argument `z`"));
        let e = Args::parse("t", json!({"q": 1}), &["p"]).err().unwrap();
        assert!(e.message.contains("unknown argument `q`"));
        assert!(Args::parse("t", json!([1]), &[]).is_err());
        assert!(Args::parse("t", Value::Null, &[]).is_ok());
        let a = Args::parse("t", json!({"n": -1}), &["n"]).unwrap();
        assert!(a.opt_int("n", 0, 5).is_err());
        let a = Args::parse("t", json!({"n": 1.5}), &["n"]).unwrap();
        assert!(a.opt_int("n", 0, 5).is_err());
    }
}
