//! The allow/deny policy (glob lists) applied before indexing.

/// Allow/deny policy, resolved before indexing (fail closed).
///
/// Patterns are globs where `*` matches any run of characters; each pattern is
/// matched against the tool name and the catalog id. Deny wins; when `allow`
/// is `Some`, a tool must match one of its patterns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    /// When present, only matching tools are visible.
    pub allow: Option<Vec<String>>,
    /// Matching tools are never visible.
    pub deny: Vec<String>,
}

impl Policy {
    /// Allow everything.
    pub fn allow_all() -> Self {
        Policy::default()
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
