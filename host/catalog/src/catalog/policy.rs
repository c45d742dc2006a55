//! The allow/deny policy (glob lists) applied before indexing.

use super::Source;

/// Most patterns one list of a [`Policy`] may hold. Every tool is matched
/// against every pattern when a catalog is built.
pub const MAX_POLICY_PATTERNS: usize = 256;

/// Most bytes one [`Policy`] pattern may have.
pub const MAX_POLICY_PATTERN_BYTES: usize = 256;

/// Allow/deny policy, resolved before indexing (fail closed), and the
/// tools whose calls need an approval.
///
/// Patterns are globs where `*` matches any run of characters; each pattern is
/// matched against the tool's name (for an MCP tool, `<server>.<tool>` with
/// the configured server name and the original tool name) and its catalog
/// id. Deny wins; when `allow` is `Some`, a tool must match one of its
/// patterns. A pattern that names no tool is not an error.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    /// When present, only matching tools are visible.
    pub allow: Option<Vec<String>>,
    /// Matching tools are never visible.
    pub deny: Vec<String>,
    /// Matching tools stay visible, but each call needs an approval (the
    /// catalog only answers [`Policy::needs_approval`]; the runtime asks).
    pub approve: Vec<String>,
}

impl Policy {
    /// Allow everything.
    pub fn allow_all() -> Self {
        Policy::default()
    }

    /// Whether every list is within [`MAX_POLICY_PATTERNS`] and every
    /// pattern within [`MAX_POLICY_PATTERN_BYTES`]; else what is over.
    pub fn check(&self) -> Result<(), String> {
        let lists = [
            ("allow", self.allow.as_deref().unwrap_or_default()),
            ("deny", self.deny.as_slice()),
            ("approve", self.approve.as_slice()),
        ];
        for (name, list) in lists {
            if list.len() > MAX_POLICY_PATTERNS {
                return Err(format!(
                    "policy.{name} has {} patterns; at most {MAX_POLICY_PATTERNS} are allowed",
                    list.len()
                ));
            }
            if let Some(long) = list.iter().find(|p| p.len() > MAX_POLICY_PATTERN_BYTES) {
                return Err(format!(
                    "a policy.{name} pattern is {} bytes long; at most {MAX_POLICY_PATTERN_BYTES} are allowed",
                    long.len()
                ));
            }
        }
        Ok(())
    }

    /// Whether the tool `name` of `source` (catalog id `id`) is inside the
    /// policy.
    pub fn allows_tool(&self, source: &Source, name: &str, id: &str) -> bool {
        let names = PolicyNames::new(source, name, id);
        if self.deny.iter().any(|p| names.matched_by(p)) {
            return false;
        }
        match &self.allow {
            Some(list) => list.iter().any(|p| names.matched_by(p)),
            None => true,
        }
    }

    /// The `approve` pattern the tool `name` of `source` (catalog id `id`)
    /// matches, if any: each of its calls needs an approval.
    pub fn needs_approval(&self, source: &Source, name: &str, id: &str) -> Option<&str> {
        let names = PolicyNames::new(source, name, id);
        self.approve
            .iter()
            .find(|p| names.matched_by(p))
            .map(String::as_str)
    }

    /// Whether a tool with `name` and catalog id `id` is inside the policy.
    pub fn allows(&self, name: &str, id: &str) -> bool {
        let hit = |p: &String| glob_match(p, name) || glob_match(p, id);
        if self.deny.iter().any(hit) {
            return false;
        }
        match &self.allow {
            Some(list) => list.iter().any(hit),
            None => true,
        }
    }
}

/// The names a policy pattern is matched against.
struct PolicyNames<'a> {
    /// The tool name, or `<server>.<tool>` for an MCP tool.
    name: std::borrow::Cow<'a, str>,
    id: &'a str,
}

impl<'a> PolicyNames<'a> {
    fn new(source: &Source, name: &'a str, id: &'a str) -> Self {
        let name = match source {
            Source::Mcp { server } => format!("{server}.{name}").into(),
            _ => name.into(),
        };
        Self { name, id }
    }

    fn matched_by(&self, pattern: &str) -> bool {
        glob_match(pattern, &self.name) || glob_match(pattern, self.id)
    }
}

/// Glob match with `*` as the only wildcard.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let mut rest = text;
    let first = parts[0];
    let last = parts[parts.len() - 1];
    if !rest.starts_with(first) {
        return false;
    }
    rest = &rest[first.len()..];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}
