//! Tool Search configuration (tool-search.md §2.1).

use crate::catalog::{positive_int, SearchLimits};
use serde_json::Value;

/// Which Tool Search surface the model sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolSearchMode {
    /// One code tool with `search`/`describe`/`call` bridges (default).
    Code,
    /// Structured `tool_search`, `tool_describe`, `tool_call`.
    Tools,
    /// `tools` plus the bounded directory in the prompt.
    Directory,
}

/// Resolved Tool Search settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolSearchConfig {
    /// Whether Tool Search is on.
    pub enabled: bool,
    /// The mode.
    pub mode: ToolSearchMode,
    /// Code tool wall-clock limit (1,000–60,000 ms; default 10,000).
    pub code_timeout_ms: u64,
    /// Search limits (default 8, max 20).
    pub limits: SearchLimits,
}

impl ToolSearchConfig {
    /// Resolve the setting. `setting` is the configured value (`true`,
    /// `false` or an object); `local_route` marks a local-inference model.
    ///
    /// Decisions: an unset setting is off, except that a local route gets the
    /// lean profile `{mode: "tools", searchDefaultLimit: 5, maxSearchLimit: 10}`
    /// enabled; in an object, `enabled` defaults to `true` when any other key
    /// is set; explicit values always win over the lean profile; an unknown
    /// `mode` falls back to `code`.
    pub fn resolve(setting: Option<&Value>, local_route: bool) -> Self {
        let base = ToolSearchConfig {
            enabled: false,
            mode: ToolSearchMode::Code,
            code_timeout_ms: 10_000,
            limits: SearchLimits::TOOL_SEARCH,
        };
        match setting {
            None | Some(Value::Null) => {
                if local_route {
                    ToolSearchConfig {
                        enabled: true,
                        mode: ToolSearchMode::Tools,
                        limits: SearchLimits::LEAN,
                        ..base
                    }
                } else {
                    base
                }
            }
            Some(Value::Bool(b)) => ToolSearchConfig {
                enabled: *b,
                ..base
            },
            Some(Value::Object(m)) => {
                let others = m.keys().any(|k| k != "enabled");
                let enabled = match m.get("enabled") {
                    Some(Value::Bool(b)) => *b,
                    _ => others,
                };
                let mode = match m.get("mode").and_then(Value::as_str) {
                    Some("tools") => ToolSearchMode::Tools,
                    Some("directory") => ToolSearchMode::Directory,
                    _ => ToolSearchMode::Code,
                };
                let code_timeout_ms = positive_int(m.get("codeTimeoutMs"))
                    .map_or(10_000, |v| v.clamp(1_000, 60_000) as u64);
                let limits = SearchLimits::from_config(
                    m.get("searchDefaultLimit"),
                    m.get("maxSearchLimit"),
                    SearchLimits::TOOL_SEARCH,
                );
                ToolSearchConfig {
                    enabled,
                    mode,
                    code_timeout_ms,
                    limits,
                }
            }
            Some(_) => base,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn resolves_defaults_clamps_and_lean_profile() {
        let c = ToolSearchConfig::resolve(Some(&json!(true)), false);
        assert!(c.enabled);
        assert_eq!(c.mode, ToolSearchMode::Code);
        assert_eq!(c.limits, SearchLimits::TOOL_SEARCH);
        assert!(!ToolSearchConfig::resolve(None, false).enabled);
        let lean = ToolSearchConfig::resolve(None, true);
        assert!(lean.enabled);
        assert_eq!(lean.mode, ToolSearchMode::Tools);
        assert_eq!(lean.limits, SearchLimits::LEAN);
        // Explicit wins over lean.
        let c = ToolSearchConfig::resolve(Some(&json!({"mode":"directory"})), true);
        assert!(c.enabled);
        assert_eq!(c.mode, ToolSearchMode::Directory);
        assert_eq!(c.limits, SearchLimits::TOOL_SEARCH);
        let c = ToolSearchConfig::resolve(
            Some(&json!({"codeTimeoutMs": 100, "searchDefaultLimit": 30, "maxSearchLimit": 99})),
            false,
        );
        assert_eq!(c.code_timeout_ms, 1_000);
        assert_eq!(c.limits.max_limit, 50);
        assert_eq!(c.limits.default_limit, 30);
        let c = ToolSearchConfig::resolve(
            Some(&json!({"searchDefaultLimit": 2.5, "maxSearchLimit": -3, "codeTimeoutMs": "x"})),
            false,
        );
        assert_eq!(c.limits, SearchLimits::TOOL_SEARCH);
        assert_eq!(c.code_timeout_ms, 10_000);
        let c = ToolSearchConfig::resolve(Some(&json!({"maxSearchLimit": 3})), false);
        assert_eq!(c.limits.default_limit, 3, "default is capped by the max");
        assert!(
            !ToolSearchConfig::resolve(Some(&json!({"enabled": false, "mode": "tools"})), false)
                .enabled
        );
        assert!(!ToolSearchConfig::resolve(Some(&json!({})), false).enabled);
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
