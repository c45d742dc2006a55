//! What is wrong with a configuration file, and where: every message names
//! the key, and every problem found in a file carries its line and column.
//!
//! Type and key errors come from serde (`toml`'s deserializer), as a
//! message and the byte span of the offending key or value. The span gives
//! the line and, looked up in the parsed document, the key path; serde's
//! wording becomes the configuration's (`unknown field` → `unknown key`,
//! `invalid type: …, expected X` → `must be X`). Inside an entry of an
//! array of tables the entry leads: ``tools[1]: `replay_safe`: must be a
//! boolean``; elsewhere the key is dotted from the top:
//! ``unknown key `limits.timeout`; known keys: …``.

use crate::error::Error;
use std::fmt;
use std::ops::Range;
use toml::de::{DeTable, DeValue};

/// A configuration problem: its message and, when it comes from a file,
/// the line and column (1-based) it is at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Problem {
    at: Option<(usize, usize)>,
    message: String,
}

impl Problem {
    /// A problem with the value at `span` of `text` (a check serde does not
    /// make, such as a duplicate tool name); `message` names the key.
    pub(super) fn at(text: &str, span: Range<usize>, message: String) -> Self {
        Self {
            at: Some(position(text, span.start)),
            message,
        }
    }

    /// `text` is not TOML.
    pub(super) fn malformed(text: &str, error: &toml::de::Error) -> Self {
        Self {
            at: error.span().map(|span| position(text, span.start)),
            message: format!("malformed TOML: {}", error.message().trim_end()),
        }
    }

    /// A serde error: a key that is unknown or missing, or a value of the
    /// wrong type. With the file's `text` the key path and line are found
    /// from the error's span; without it (a value deserialized on its own)
    /// the message names only what serde's message names.
    pub(super) fn from_serde(text: Option<&str>, error: &toml::de::Error) -> Self {
        let located = text.zip(error.span().map(|span| span.start));
        let path = located.map_or_else(Vec::new, |(text, offset)| path_at(text, offset));
        Self {
            at: located.map(|(text, offset)| position(text, offset)),
            message: describe(&path, Fault::of(error.message())),
        }
    }

    /// The message without the line.
    pub(super) fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.at {
            Some((line, column)) => write!(f, "line {line}, column {column}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl From<Problem> for Error {
    fn from(problem: Problem) -> Self {
        Error::Config(problem.to_string())
    }
}

/// The 1-based line and column (in characters) of byte `offset` of `text`.
fn position(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset).unwrap_or(text);
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (
        before.matches('\n').count() + 1,
        before[line_start..].chars().count() + 1,
    )
}

/// One step of a key path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Key(String),
    Index(usize),
}

/// The path of the innermost key or value of `text` whose span holds byte
/// `offset` (empty when there is none).
fn path_at(text: &str, offset: usize) -> Vec<Segment> {
    let mut path = Vec::new();
    if let Ok(root) = DeTable::parse(text) {
        find(&DeValue::Table(root.into_inner()), offset, &mut path);
    }
    path
}

/// Descends into every child: a table opened by a `[header]` spans only
/// its header, so its keys may lie outside its span.
fn find(value: &DeValue<'_>, offset: usize, path: &mut Vec<Segment>) -> bool {
    let children: Vec<_> = match value {
        DeValue::Table(table) => table
            .iter()
            .map(|(key, child)| {
                (
                    Segment::Key(key.get_ref().to_string()),
                    Some(key.span()),
                    child,
                )
            })
            .collect(),
        DeValue::Array(array) => array
            .iter()
            .enumerate()
            .map(|(i, child)| (Segment::Index(i), None, child))
            .collect(),
        _ => return false,
    };
    for (segment, key_span, child) in children {
        path.push(segment);
        let here =
            key_span.is_some_and(|span| span.contains(&offset)) || child.span().contains(&offset);
        if find(child.get_ref(), offset, path) || here {
            return true;
        }
        path.pop();
    }
    false
}

/// A serde error message, read.
#[derive(Debug, PartialEq, Eq)]
enum Fault<'m> {
    /// `unknown field `key`, expected one of `a`, `b``.
    UnknownKey { key: &'m str, known: Vec<&'m str> },
    /// `missing field `key``.
    MissingKey(&'m str),
    /// `invalid type: …, expected X` (or `invalid value`).
    MustBe(&'m str),
    /// Anything else, as it is.
    Other(&'m str),
}

impl<'m> Fault<'m> {
    fn of(message: &'m str) -> Self {
        let message = message.trim_end();
        if let Some(rest) = message.strip_prefix("unknown field `") {
            let (key, rest) = rest.split_once('`').unwrap_or((rest, ""));
            let known = rest.split('`').skip(1).step_by(2).collect();
            return Fault::UnknownKey { key, known };
        }
        if let Some(rest) = message.strip_prefix("missing field `") {
            return Fault::MissingKey(rest.trim_end_matches('`'));
        }
        if message.starts_with("invalid type: ") || message.starts_with("invalid value: ") {
            if let Some((_, expected)) = message.rsplit_once(", expected ") {
                return Fault::MustBe(match expected {
                    "a map" => "a table",
                    "a sequence" => "an array",
                    other => other,
                });
            }
        }
        Fault::Other(message)
    }
}

/// The message of `fault` at `path`: an entry of an array of tables
/// (`tools[1]`) leads, the key within it is dotted after it.
fn describe(path: &[Segment], fault: Fault<'_>) -> String {
    let (entry, rest) = match path {
        [Segment::Key(table), Segment::Index(i), rest @ ..] => {
            (Some(format!("{table}[{i}]")), rest)
        }
        _ => (None, path),
    };
    let dotted = |rest: &[Segment], last: Option<&str>| {
        let mut out = String::new();
        for segment in rest {
            match segment {
                Segment::Key(key) if out.is_empty() => out.push_str(key),
                Segment::Key(key) => {
                    out.push('.');
                    out.push_str(key);
                }
                Segment::Index(i) => out.push_str(&format!("[{i}]")),
            }
        }
        if let Some(last) = last {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(last);
        }
        out
    };
    let about = |what: &str| {
        let key = dotted(rest, None);
        if key.is_empty() {
            what.to_owned()
        } else {
            format!("`{key}`: {what}")
        }
    };
    let body = match fault {
        Fault::UnknownKey { key, known } => {
            // The span is the key's own: the path ends with it.
            let rest = match rest {
                [init @ .., Segment::Key(last)] if last == key => init,
                _ => rest,
            };
            let known = if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            };
            format!(
                "unknown key `{}`; known keys: {known}",
                dotted(rest, Some(key))
            )
        }
        Fault::MissingKey(key) => format!("missing key `{}`", dotted(rest, Some(key))),
        Fault::MustBe(what) => about(&format!("must be {what}")),
        Fault::Other(message) => about(message),
    };
    match entry {
        Some(entry) => format!("{entry}: {body}"),
        None => body,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_are_one_based_characters() {
        assert_eq!(position("a = 1\n", 0), (1, 1));
        assert_eq!(position("a = 1\nb = 2\n", 6), (2, 1));
        assert_eq!(position("é = 1\nbé = 2\n", 11), (2, 4));
        assert_eq!(position("x", 99), (1, 2));
    }

    #[test]
    fn reads_serde_messages() {
        assert_eq!(
            Fault::of("unknown field `cmd`, expected one of `name`, `command`"),
            Fault::UnknownKey {
                key: "cmd",
                known: vec!["name", "command"]
            }
        );
        assert_eq!(
            Fault::of("unknown field `x`, expected `root`"),
            Fault::UnknownKey {
                key: "x",
                known: vec!["root"]
            }
        );
        assert_eq!(
            Fault::of("unknown field `x`, there are no fields"),
            Fault::UnknownKey {
                key: "x",
                known: vec![]
            }
        );
        assert_eq!(Fault::of("missing field `name`"), Fault::MissingKey("name"));
        assert_eq!(
            Fault::of("invalid type: string \"yes\", expected a boolean"),
            Fault::MustBe("a boolean")
        );
        assert_eq!(
            Fault::of("invalid type: integer `3`, expected a map"),
            Fault::MustBe("a table")
        );
        assert_eq!(
            Fault::of("something else\n"),
            Fault::Other("something else")
        );
    }

    #[test]
    fn finds_the_key_path_of_a_span() {
        let text = "[limits]\ntimeout_ms = 5\n[[tools]]\nname = \"a\"\n[[tools]]\nx = { y = [1, 2] }\n[mcp.servers.s]\nurl = \"u\"\n";
        let at = |needle: &str| path_at(text, text.find(needle).unwrap());
        let key = |k: &str| Segment::Key(k.into());
        assert_eq!(at("timeout_ms"), [key("limits"), key("timeout_ms")]);
        assert_eq!(at("5\n"), [key("limits"), key("timeout_ms")]);
        assert_eq!(at("[[tools]]\nname"), [key("tools"), Segment::Index(0)]);
        assert_eq!(at("\"a\""), [key("tools"), Segment::Index(0), key("name")]);
        assert_eq!(
            at("2]"),
            [
                key("tools"),
                Segment::Index(1),
                key("x"),
                key("y"),
                Segment::Index(1)
            ]
        );
        assert_eq!(
            at("[mcp.servers.s]"),
            [key("mcp"), key("servers"), key("s")]
        );
        assert_eq!(
            at("\"u\""),
            [key("mcp"), key("servers"), key("s"), key("url")]
        );
    }
}
