//! Search limits: the configured default and maximum, the per-search
//! resolution, the hard cap [`MAX_SEARCH_LIMIT`] and the options of
//! [`Catalog::search`](super::Catalog::search).

use serde_json::Value;
use std::collections::HashSet;

/// Largest number of results one search returns (results), whatever the
/// configuration: [`SearchLimits::from_config`] clamps `maxLimit` to it and
/// [`SearchLimits::resolve`] clamps every requested limit to it, so a guest's
/// `limit` never sizes host work beyond it (a larger limit is clamped, not
/// rejected).
pub const MAX_SEARCH_LIMIT: usize = 50;

/// Search limit configuration: default and maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SearchLimits {
    /// Limit used when none is given (capped by `max_limit`).
    pub default_limit: usize,
    /// Cap for any limit.
    pub max_limit: usize,
}

impl SearchLimits {
    /// Tool Search defaults: default 8, max 20.
    pub const TOOL_SEARCH: SearchLimits = SearchLimits {
        default_limit: 8,
        max_limit: 20,
    };
    /// Lean profile for local-inference models: default 5, max 10.
    pub const LEAN: SearchLimits = SearchLimits {
        default_limit: 5,
        max_limit: 10,
    };

    /// Resolve configuration values (`searchDefaultLimit`, `maxSearchLimit`):
    /// non-integer or non-positive values fall back to `defaults`; integers
    /// are clamped (`maxSearchLimit` to `1..=50`, the default to
    /// `1..=maxSearchLimit`).
    pub fn from_config(
        default: Option<&Value>,
        max: Option<&Value>,
        defaults: SearchLimits,
    ) -> Self {
        let max_limit =
            positive_int(max).map_or(defaults.max_limit, |v| v.clamp(1, MAX_SEARCH_LIMIT));
        let default_limit = positive_int(default).unwrap_or(defaults.default_limit);
        SearchLimits {
            default_limit: default_limit.clamp(1, max_limit),
            max_limit,
        }
    }

    /// Resolve a per-search limit: absent → default (capped by the max); an
    /// integer → clamped to `[1, max]`; anything else (non-integer number,
    /// string, ...) → default. The max itself is clamped to
    /// `[1, MAX_SEARCH_LIMIT]`.
    pub fn resolve(&self, limit: Option<&Value>) -> usize {
        let max = self.max_limit.clamp(1, MAX_SEARCH_LIMIT);
        let default = self.default_limit.clamp(1, max);
        match limit.and_then(int_value) {
            Some(n) => n.clamp(1, max as i64) as usize,
            None => default,
        }
    }

    /// [`SearchLimits::resolve`] for an integer.
    pub fn resolve_int(&self, limit: Option<i64>) -> usize {
        self.resolve(limit.map(Value::from).as_ref())
    }
}

fn int_value(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n
            .as_i64()
            .or_else(|| n.as_u64().map(|u| u.min(i64::MAX as u64) as i64))
            .or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && f.is_finite())
                    .map(|f| f as i64)
            }),
        _ => None,
    }
}

fn positive_int(v: Option<&Value>) -> Option<usize> {
    v.and_then(int_value).filter(|&n| n > 0).map(|n| n as usize)
}

/// Options of [`Catalog::search`](super::Catalog::search).
#[derive(Debug, Clone, Copy)]
pub struct SearchOptions<'a> {
    /// Requested limit (clamped to `[1, max]`; `None` → default).
    pub limit: Option<i64>,
    /// Include MCP entries (default `true`).
    pub include_mcp: bool,
    /// Restrict to these catalog ids.
    pub allowed_ids: Option<&'a HashSet<String>>,
}

impl Default for SearchOptions<'_> {
    fn default() -> Self {
        SearchOptions {
            limit: None,
            include_mcp: true,
            allowed_ids: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn limits_from_config_clamp_and_fall_back() {
        let c = |default: Value, max: Value| {
            SearchLimits::from_config(Some(&default), Some(&max), SearchLimits::TOOL_SEARCH)
        };
        let l = c(json!(30), json!(99));
        assert_eq!(l.max_limit, 50);
        assert_eq!(l.default_limit, 30);
        assert_eq!(c(json!(2.5), json!(-3)), SearchLimits::TOOL_SEARCH);
        let l = SearchLimits::from_config(None, Some(&json!(3)), SearchLimits::TOOL_SEARCH);
        assert_eq!(l.default_limit, 3, "default is capped by the max");
        assert_eq!(
            SearchLimits::from_config(None, None, SearchLimits::LEAN),
            SearchLimits::LEAN
        );
    }

    #[test]
    fn per_search_limit_resolution() {
        let l = SearchLimits::TOOL_SEARCH;
        assert_eq!(l.resolve(None), 8);
        assert_eq!(l.resolve(Some(&json!(0))), 1);
        assert_eq!(l.resolve(Some(&json!(-4))), 1);
        assert_eq!(l.resolve(Some(&json!(100))), 20);
        assert_eq!(l.resolve(Some(&json!(3))), 3);
        assert_eq!(l.resolve(Some(&json!(3.0))), 3);
        assert_eq!(l.resolve(Some(&json!(2.5))), 8);
        assert_eq!(l.resolve(Some(&json!("5"))), 8);
        let odd = SearchLimits {
            default_limit: 9,
            max_limit: 4,
        };
        assert_eq!(odd.resolve(None), 4);
    }
}
