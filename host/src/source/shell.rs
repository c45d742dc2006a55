//! The shell-shape heuristics: input that looks like a shell command
//! rather than JavaScript is refused before anything is parsed.

use super::*;

/// Common shell commands recognised by the shell-source rule. Disjoint from
/// JavaScript keywords, [`KNOWN_GLOBALS`] and likely tool names (`read`,
/// `exec`, `open`, `file`, …).
#[rustfmt::skip]
pub const SHELL_COMMANDS: &[&str] = &[
    // files and text
    "ls", "cd", "pwd", "cat", "less", "more", "head", "tail", "grep", "egrep", "fgrep", "rg", "ag",
    "find", "fd", "sed", "awk", "gawk", "cut", "sort", "uniq", "wc", "tr", "xargs", "tee", "diff",
    "cp", "mv", "rm", "mkdir", "rmdir", "touch", "ln", "chmod", "chown", "chgrp", "stat", "du",
    "df", "tar", "zip", "unzip", "gzip", "gunzip", "xz", "tree", "basename", "dirname", "realpath",
    "readlink", "jq", "yq", "xxd", "hexdump", "base64", "md5sum", "sha256sum", "shasum",
    // shell builtins and system
    "echo", "printf", "env", "printenv", "unset", "source", "alias", "sudo", "su", "kill",
    "killall", "pkill", "pgrep", "ps", "top", "htop", "which", "whereis", "whoami", "uname",
    "hostname", "date", "sleep", "man", "time", "nohup", "set", "exit", "test", "lsof", "systemctl",
    "journalctl", "service", "crontab", "apt", "apt-get", "brew", "yum", "dnf", "pacman", "apk",
    // shells and editors
    "bash", "sh", "zsh", "fish", "vim", "vi", "nano", "emacs", "tmux",
    // network
    "curl", "wget", "ssh", "scp", "rsync", "ping", "nc", "dig", "nslookup", "netstat",
    // development tools
    "git", "gh", "svn", "hg", "node", "npm", "npx", "pnpm", "yarn", "bun", "deno", "tsc", "python",
    "python3", "pip", "pip3", "pipx", "uv", "poetry", "pytest", "ruby", "gem", "perl", "php",
    "java", "javac", "mvn", "gradle", "go", "cargo", "rustc", "rustup", "gcc", "clang", "make",
    "cmake", "docker", "docker-compose", "podman", "kubectl", "helm", "terraform", "aws", "gcloud",
    "openssl", "sqlite3", "psql", "mysql",
];

/// Names the shell-command rule never treats as commands: JavaScript
/// keywords and literals, quickcell guest globals and reserved names, and the
/// ECMAScript/QuickJS intrinsics on the global object.
#[rustfmt::skip]
pub const KNOWN_GLOBALS: &[&str] = &[
    // keywords, literals, contextual keywords
    "await", "break", "case", "catch", "class", "const", "continue", "debugger", "default",
    "delete", "do", "else", "enum", "export", "extends", "false", "finally", "for", "function",
    "if", "import", "in", "instanceof", "new", "null", "return", "super", "switch", "this", "throw",
    "true", "try", "typeof", "var", "void", "while", "with", "yield", "let", "static", "implements",
    "interface", "package", "private", "protected", "public", "async", "of", "using",
    // quickcell globals and reserved names (contract §8, §8.1)
    "API", "MCP", "catalog", "namespaces", "results", "store", "load", "text", "json", "console",
    "setTimeout", "clearTimeout", "yield_control", "TextEncoder", "TextDecoder", "globalThis",
    "ALL_TOOLS", "tools", "agents", "nodes", "skills", "log", "phase",
    // intrinsics
    "undefined", "NaN", "Infinity", "eval", "isFinite", "isNaN", "parseFloat", "parseInt",
    "decodeURI", "decodeURIComponent", "encodeURI", "encodeURIComponent", "escape", "unescape",
    "Object", "Function", "Array", "Number", "Boolean", "String", "Symbol", "BigInt", "Date",
    "RegExp", "Error", "AggregateError", "EvalError", "RangeError", "ReferenceError", "SyntaxError",
    "TypeError", "URIError", "InternalError", "Math", "JSON", "Reflect", "Proxy", "Promise", "Map",
    "Set", "WeakMap", "WeakSet", "WeakRef", "FinalizationRegistry", "ArrayBuffer",
    "SharedArrayBuffer", "DataView", "Atomics", "Int8Array", "Uint8Array", "Uint8ClampedArray",
    "Int16Array", "Uint16Array", "Int32Array", "Uint32Array", "BigInt64Array", "BigUint64Array",
    "Float16Array", "Float32Array", "Float64Array", "Iterator", "queueMicrotask",
];

pub(super) fn is_never_command(word: &str) -> bool {
    KNOWN_GLOBALS.contains(&word)
}

/// What the shell rule matched.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum ShellHit<'s> {
    /// A form that is never valid JavaScript: reject.
    Always,
    /// A known command word used like a command: reject unless the word is
    /// a declared name or known global.
    Command(&'s str),
}

pub(super) const LINE_ENDS: [char; 4] = ['\n', '\r', '\u{2028}', '\u{2029}'];

pub(super) fn shell_shape(source: &str) -> Option<ShellHit<'_>> {
    let trimmed = source.trim_start_matches('\u{feff}').trim_start();
    if trimmed.starts_with("#!") {
        return Some(ShellHit::Always);
    }
    let rest = skip_comments(trimmed)?;
    let line = rest.split(LINE_ENDS).next().unwrap_or_default().trim_end();
    if line.is_empty() {
        return None;
    }
    if control_prefix(line, rest) || env_then_command(line) || executable_path(line) {
        return Some(ShellHit::Always);
    }
    command_word(line, rest)
}

/// Skips leading whitespace, `//` and `/* */` comments and `#` comment lines.
pub(super) fn skip_comments(mut s: &str) -> Option<&str> {
    loop {
        s = s.trim_start();
        if s.starts_with("//") || s.starts_with('#') {
            let end = s.find(LINE_ENDS)?;
            s = &s[end..];
        } else if let Some(body) = s.strip_prefix("/*") {
            let end = body.find("*/")?;
            s = &body[end + 2..];
        } else {
            return (!s.is_empty()).then_some(s);
        }
    }
}

pub(super) fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '$'
}

pub(super) fn word_boundary(text: &str, start: usize, end: usize) -> bool {
    let before_ok = text[..start]
        .chars()
        .next_back()
        .is_none_or(|c| !is_ident_char(c));
    let after_ok = text[end..].chars().next().is_none_or(|c| !is_ident_char(c));
    before_ok && after_ok
}

/// `true` if `word` occurs in `text` as a whole word.
pub(super) fn has_word(text: &str, word: &str) -> bool {
    let mut search = 0;
    while let Some(found) = text[search..].find(word) {
        let start = search + found;
        let end = start + word.len();
        if word_boundary(text, start, end) {
            return true;
        }
        search = end;
    }
    false
}

/// Leading run of ASCII identifier characters (`[A-Za-z0-9_]`).
pub(super) fn leading_word(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

pub(super) fn trim_blank(s: &str) -> &str {
    s.trim_start_matches([' ', '\t'])
}

pub(super) fn control_prefix(line: &str, rest: &str) -> bool {
    let word = leading_word(line);
    let after = &line[word.len()..];
    if !after.starts_with([' ', '\t']) {
        return false;
    }
    let after = trim_blank(after);
    match word {
        "if" | "elif" => !after.starts_with('(') && has_word(rest, "then"),
        "while" | "until" => !after.starts_with('(') && has_word(rest, "do"),
        "for" => {
            if after.starts_with("((") {
                after.find("))").is_some_and(|i| {
                    let tail = trim_blank(&after[i + 2..]);
                    let tail = trim_blank(tail.strip_prefix(';').unwrap_or(tail));
                    leading_word(tail) == "do"
                })
            } else {
                let variable = leading_word(after);
                !variable.is_empty()
                    && variable != "await"
                    && leading_word(trim_blank(&after[variable.len()..])) == "in"
                    && has_word(rest, "do")
            }
        }
        "case" => {
            let subject_end = after.find([' ', '\t']).unwrap_or(after.len());
            subject_end > 0 && {
                let tail = trim_blank(&after[subject_end..]);
                leading_word(tail) == "in" && tail[2..].trim().is_empty()
            }
        }
        "function" => {
            let name_end = after
                .find(|c: char| !(is_ident_char(c) || c == '-'))
                .unwrap_or(after.len());
            name_end > 0 && trim_blank(&after[name_end..]).starts_with('{')
        }
        _ => false,
    }
}

/// JavaScript words after which `x=WORD next` is still an expression.
pub(super) const JS_PREFIX_WORDS: &[&str] = &[
    "await", "typeof", "void", "delete", "new", "yield", "async", "function", "class", "this",
    "super", "import",
];

/// JavaScript words that continue an expression after a space.
pub(super) const JS_INFIX_WORDS: &[&str] = &["in", "instanceof", "of", "as", "satisfies"];

/// Length of a shell assignment value (a word with optional quoted parts).
/// `None` when a quote is unterminated or the value contains a backtick.
pub(super) fn shell_value_len(s: &str) -> Option<usize> {
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            ' ' | '\t' => return Some(i),
            '`' => return None,
            '\'' | '"' => {
                let mut closed = false;
                let mut escaped = false;
                for (_, q) in chars.by_ref() {
                    if escaped {
                        escaped = false;
                    } else if q == '\\' && c == '"' {
                        escaped = true;
                    } else if q == c {
                        closed = true;
                        break;
                    }
                }
                if !closed {
                    return None;
                }
            }
            _ => {}
        }
    }
    Some(s.len())
}

pub(super) fn env_then_command(line: &str) -> bool {
    let mut rest = line;
    let mut assignments = 0;
    loop {
        let name = leading_word(rest);
        if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
            break;
        }
        let after = &rest[name.len()..];
        let Some(value_text) = after.strip_prefix('=') else {
            break;
        };
        if value_text.starts_with(['=', '>']) {
            return false;
        }
        let Some(value_len) = shell_value_len(value_text) else {
            return false;
        };
        let value = &value_text[..value_len];
        if value.is_empty()
            || JS_PREFIX_WORDS.contains(&value)
            || value.ends_with(|c: char| "+-*/%,.=&|^<>?:!~([{;".contains(c))
        {
            return false;
        }
        let tail = &value_text[value_len..];
        let next = trim_blank(tail);
        if next.len() == tail.len() {
            return false;
        }
        rest = next;
        assignments += 1;
    }
    if assignments == 0 || rest.is_empty() {
        return false;
    }
    if rest.starts_with('/') || rest.starts_with("~/") {
        return executable_path(rest);
    }
    if rest.starts_with("./") || rest.starts_with("../") {
        return true;
    }
    let word = leading_word(rest);
    !word.is_empty()
        && rest.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && !JS_INFIX_WORDS.contains(&word)
}

/// `true` if `text` starts with something a JavaScript lexer could read as a
/// regular-expression literal with valid flags (`/a/g`, `/x y/`).
pub(super) fn could_be_regex(text: &str) -> bool {
    let Some(body) = text.strip_prefix('/') else {
        return false;
    };
    if body.starts_with(['/', '*']) {
        return false;
    }
    let mut in_class = false;
    let mut escaped = false;
    let mut close = None;
    for (i, c) in body.char_indices() {
        if LINE_ENDS.contains(&c) {
            return false;
        }
        if escaped {
            escaped = false;
            continue;
        }
        match c {
            '\\' => escaped = true,
            '[' => in_class = true,
            ']' => in_class = false,
            '/' if !in_class => {
                close = Some(i);
                break;
            }
            _ => {}
        }
    }
    let Some(close) = close else {
        return false;
    };
    let flags_text = &body[close + 1..];
    let flags_end = flags_text
        .find(|c: char| !is_ident_char(c))
        .unwrap_or(flags_text.len());
    let flags = &flags_text[..flags_end];
    let mut seen = HashSet::new();
    flags
        .chars()
        .all(|f| "dgimsuyv".contains(f) && seen.insert(f))
}

pub(super) fn is_path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "_.+@-".contains(c)
}

/// `/seg/seg…` with non-empty segments of path characters (trailing `/` ok).
pub(super) fn absolute_path_shape(token: &str) -> bool {
    let Some(body) = token.strip_prefix('/') else {
        return false;
    };
    let body = body.strip_suffix('/').unwrap_or(body);
    !body.is_empty()
        && body
            .split('/')
            .all(|seg| !seg.is_empty() && seg.chars().all(is_path_char))
}

pub(super) fn executable_path(line: &str) -> bool {
    let token = line.split([' ', '\t']).next().unwrap_or_default();
    if let Some(rest) = token
        .strip_prefix("./")
        .or_else(|| token.strip_prefix("../"))
    {
        return !rest.is_empty();
    }
    if let Some(after_tilde) = line.strip_prefix('~') {
        return after_tilde.starts_with('/')
            && !could_be_regex(after_tilde)
            && absolute_path_shape(&token[1..]);
    }
    token.starts_with('/') && !could_be_regex(line) && absolute_path_shape(token)
}

pub(super) fn command_word<'s>(line: &'s str, rest: &'s str) -> Option<ShellHit<'s>> {
    let end = line
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
        .unwrap_or(line.len());
    let word = &line[..end];
    if !SHELL_COMMANDS.contains(&word) || is_never_command(word) {
        return None;
    }
    let hit = Some(ShellHit::Command(word));
    // Bare command word: the whole source is the word (optionally `;`).
    if rest[end..].trim().trim_end_matches(';').trim().is_empty() {
        return hit;
    }
    let after = &line[end..];
    if starts_shell_operator(after) {
        return hit;
    }
    let next = trim_blank(after);
    if next.len() == after.len() || next.is_empty() {
        return None;
    }
    if starts_shell_operator(next) || starts_argument(next) {
        return hit;
    }
    None
}

/// `;`, `|`, `||`, `&`, `&&`, `>`, `>>`, `<` (not compound assignments or
/// comparisons such as `|=`, `>=`, `<=`, `<<`).
pub(super) fn starts_shell_operator(s: &str) -> bool {
    let mut chars = s.chars();
    let first = chars.next();
    let second = chars.next();
    let third = chars.next();
    match first {
        Some(';') => true,
        Some('|' | '&') => match second {
            Some('=') => false,
            Some(c) if Some(c) == first => third != Some('='),
            _ => true,
        },
        Some('>') => match second {
            Some('=') => false,
            Some('>') => !matches!(third, Some('=' | '>')),
            _ => true,
        },
        Some('<') => !matches!(second, Some('=' | '<')),
        _ => false,
    }
}

/// A flag, argument word, quoted string, expansion or path.
pub(super) fn starts_argument(s: &str) -> bool {
    let mut chars = s.chars();
    let first = chars.next().unwrap_or(' ');
    let second = chars.next();
    match first {
        '-' => match second {
            Some('-') => chars.next().is_some_and(|c| c.is_ascii_alphabetic()),
            Some(c) => c.is_ascii_alphanumeric(),
            None => false,
        },
        '+' => second.is_some_and(|c| c.is_ascii_alphabetic()),
        '"' | '\'' | '$' | '~' => true,
        // `.` or `..` as a directory (`cd ..`, `find . -name x`), but not
        // member access written with spaces (`cat . x`).
        '.' => {
            let dots = if second == Some('.') { 2 } else { 1 };
            let tail = &s[dots..];
            if tail.starts_with('/') {
                return true;
            }
            let next = trim_blank(tail);
            (tail.is_empty() || next.len() < tail.len())
                && !next.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_' || c == '$')
        }
        '/' => second.is_some_and(|c| c.is_ascii_alphanumeric() || "_.~-".contains(c)),
        '*' => second.is_some_and(|c| c == '.' || is_ident_char(c)),
        c if c.is_ascii_alphanumeric() || c == '_' || c == '@' => {
            let word = leading_word(s);
            !JS_INFIX_WORDS.contains(&word)
        }
        _ => false,
    }
}
