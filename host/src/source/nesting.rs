//! How deeply a cell's source nests brackets, measured before it is parsed.
//!
//! oxc's parser (like every recursive-descent parser) spends native stack on
//! each level of nesting, and a program such as `return [[[[…]]]]` nested
//! 200,000 deep would overflow any thread's stack and abort the process. Two
//! things stop that:
//!
//! 1. This scan rejects a source whose brackets nest deeper than
//!    [`MAX_SOURCE_NESTING`], with a clear error, before anything recursive
//!    runs. It is one linear pass over the bytes that knows JavaScript's
//!    lexical contexts well enough for honest code (strings, template
//!    literals and their substitutions, comments, regular expressions after
//!    an operator), so brackets inside strings or comments do not count.
//! 2. The scan is a heuristic: a regular expression whose `/` is ambiguous,
//!    or nesting without brackets (`!!!!x`, `a ? b ? …`, `else if` chains),
//!    can hide depth from it. So the parse itself runs on a stack sized for
//!    the source's length (see `source::check_stack_bytes`), which is enough
//!    for any source within [`super::MAX_SOURCE_BYTES`]: the scan gives the
//!    friendly error, the stack gives the guarantee. (A scan cannot be
//!    exact: after `)` or `}` a `/` may divide or open a regular
//!    expression, and only the parser knows which.)

/// Deepest bracket nesting a cell's source may have: `(`, `[`, `{` and
/// template substitutions `${`, counted outside strings and comments.
/// Unit: levels. Deeper sources are rejected with `invalid_input` before
/// they are parsed. Hand-written and model-written code stays far below
/// (QuickJS itself refuses a few thousand levels).
pub const MAX_SOURCE_NESTING: usize = 1_000;

/// Keywords after which an expression starts (so a `/` there opens a
/// regular expression).
const REGEX_KEYWORDS: &[&[u8]] = &[
    b"return",
    b"typeof",
    b"case",
    b"do",
    b"else",
    b"in",
    b"instanceof",
    b"new",
    b"delete",
    b"void",
    b"throw",
    b"yield",
    b"await",
    b"of",
];

/// What precedes a `/`: whether a regular expression may start there.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Prev {
    /// Start of source, an operator or an opening punctuator: `/` starts a
    /// regular expression.
    Operator,
    /// An identifier, keyword, number, string or closing bracket: `/`
    /// divides (ambiguous cases such as `) /re/` count as division, which
    /// only makes the scan count more brackets, never fewer).
    Operand,
}

/// The deepest bracket nesting in `source`, counting `(`, `[`, `{` and `${`
/// outside strings, comments, template text and regular expressions. Stops
/// counting as soon as `limit` is exceeded and returns a value above it.
pub(crate) fn max_nesting(source: &str, limit: usize) -> usize {
    let bytes = source.as_bytes();
    let mut depth = 0usize;
    let mut max = 0usize;
    // One entry per open `{` or `${`: `true` for a template substitution,
    // whose `}` resumes the template text.
    let mut braces: Vec<bool> = Vec::new();
    let mut prev = Prev::Operator;
    let mut i = 0;
    let open = |depth: &mut usize, max: &mut usize| {
        *depth += 1;
        *max = (*max).max(*depth);
    };
    while i < bytes.len() {
        let b = bytes[i];
        match b {
            b'(' | b'[' => {
                open(&mut depth, &mut max);
                prev = Prev::Operator;
                i += 1;
            }
            b'{' => {
                open(&mut depth, &mut max);
                braces.push(false);
                prev = Prev::Operator;
                i += 1;
            }
            b')' | b']' => {
                depth = depth.saturating_sub(1);
                prev = Prev::Operand;
                i += 1;
            }
            b'}' => {
                depth = depth.saturating_sub(1);
                i += 1;
                if braces.pop() == Some(true) {
                    i = skip_template(bytes, i, &mut braces, &mut depth, &mut max);
                }
                prev = Prev::Operand;
            }
            b'\'' | b'"' => {
                i = skip_string(bytes, i);
                prev = Prev::Operand;
            }
            b'`' => {
                i = skip_template(bytes, i + 1, &mut braces, &mut depth, &mut max);
                prev = Prev::Operand;
            }
            b'/' if bytes.get(i + 1) == Some(&b'/') => i = skip_line(bytes, i),
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                i = match find(bytes, i + 2, b"*/") {
                    Some(end) => end + 2,
                    None => bytes.len(),
                };
            }
            b'/' if prev == Prev::Operator => {
                i = skip_regex(bytes, i + 1);
                prev = Prev::Operand;
            }
            b'<' if bytes[i..].starts_with(b"<!--") => i = skip_line(bytes, i),
            b'+' | b'-' if bytes.get(i + 1) == Some(&b) => {
                // `++` / `--`: postfix after an operand, where `/` divides.
                i += 2;
            }
            b if b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80 => {
                let start = i;
                while i < bytes.len()
                    && (bytes[i].is_ascii_alphanumeric()
                        || matches!(bytes[i], b'_' | b'$')
                        || bytes[i] >= 0x80)
                {
                    i += 1;
                }
                // After these keywords an expression starts, so `/` opens a
                // regular expression (`return /\(/.test(s)`); after a
                // property name (`a.return / 2`) it divides.
                let after_dot = start > 0 && bytes[start - 1] == b'.';
                prev = if !after_dot && REGEX_KEYWORDS.contains(&&bytes[start..i]) {
                    Prev::Operator
                } else {
                    Prev::Operand
                };
            }
            b'.' => {
                // A member access (or a number's point): what follows is a name.
                prev = Prev::Operand;
                i += 1;
            }
            b if b.is_ascii_whitespace() => i += 1,
            _ => {
                prev = Prev::Operator;
                i += 1;
            }
        }
        if max > limit {
            return max;
        }
    }
    max
}

/// Skips a quoted string starting at `start` (its quote); returns the index
/// after its closing quote, or after the line end / source end where an
/// unterminated string stops.
fn skip_string(bytes: &[u8], start: usize) -> usize {
    let quote = bytes[start];
    let mut i = start + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'\n' | b'\r' => return i,
            b if b == quote => return i + 1,
            _ => i += 1,
        }
    }
    bytes.len()
}

/// Skips template text from `i` (just after a backtick or a substitution's
/// `}`) to the closing backtick, or to a `${`, which opens a substitution:
/// the scan then goes on in code with the substitution on the brace stack.
fn skip_template(
    bytes: &[u8],
    mut i: usize,
    braces: &mut Vec<bool>,
    depth: &mut usize,
    max: &mut usize,
) -> usize {
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'`' => return i + 1,
            b'$' if bytes.get(i + 1) == Some(&b'{') => {
                braces.push(true);
                *depth += 1;
                *max = (*max).max(*depth);
                return i + 2;
            }
            _ => i += 1,
        }
    }
    bytes.len()
}

/// Skips a regular expression body from `i` (after its opening `/`) to
/// after its closing `/` and flags; a line end ends it too (regular
/// expressions cannot span lines).
fn skip_regex(bytes: &[u8], mut i: usize) -> usize {
    let mut in_class = false;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'\n' | b'\r' => return i,
            b'[' => {
                in_class = true;
                i += 1;
            }
            b']' => {
                in_class = false;
                i += 1;
            }
            b'/' if !in_class => {
                i += 1;
                while i < bytes.len() && bytes[i].is_ascii_alphabetic() {
                    i += 1;
                }
                return i;
            }
            _ => i += 1,
        }
    }
    bytes.len()
}

/// The index of the line end at or after `i` (or the source's end).
fn skip_line(bytes: &[u8], i: usize) -> usize {
    bytes[i..]
        .iter()
        .position(|&b| b == b'\n' || b == b'\r')
        .map_or(bytes.len(), |p| i + p)
}

/// The index of the first `needle` at or after `from`.
fn find(bytes: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    bytes
        .get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| from + p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn depth(source: &str) -> usize {
        max_nesting(source, usize::MAX)
    }

    #[test]
    fn brackets_count_in_code() {
        assert_eq!(depth("return 1"), 0);
        assert_eq!(depth("f(a[b({})])"), 4);
        assert_eq!(depth(&format!("{}1{}", "(".repeat(50), ")".repeat(50))), 50);
        assert_eq!(depth("if (a) { b } else { c }"), 1);
    }

    #[test]
    fn brackets_in_strings_comments_and_regexes_do_not_count() {
        assert_eq!(depth(r#"const s = "(((((" + '[[[[' ; // (((("#), 0);
        assert_eq!(depth("/* {{{{ */ x = 1"), 0);
        assert_eq!(depth(r"x = /[(]+\(/g.test(y)"), 1);
        assert_eq!(depth("x = a / b / c"), 0);
        assert_eq!(depth("<!-- (((( \nx"), 0);
        assert_eq!(depth(r"return /\((\(/.test(s)"), 1);
        assert_eq!(depth("x = a.return / (b)"), 1);
        assert_eq!(depth("return /`/, 1"), 0);
    }

    #[test]
    fn template_substitutions_nest() {
        assert_eq!(depth("`a ${ b } c`"), 1);
        assert_eq!(depth("`((( ${ `${ [1] }` } )))`"), 3);
        assert_eq!(depth("`${ {a: 1} }`"), 2);
    }

    #[test]
    fn the_scan_stops_past_the_limit() {
        let deep = "[".repeat(1_000_000);
        assert_eq!(max_nesting(&deep, 10), 11);
    }
}
