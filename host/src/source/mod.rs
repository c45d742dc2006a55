//! Source validation for Code Mode cells (contract.md §7).
//!
//! [`prepare_source`] runs the contract's checks in order — shell-shaped
//! source, parse, module access (TypeScript fails as an ordinary syntax
//! error) — and returns the first failure as a [`SourceRejection`], or the
//! text the guest compiles for a source that passes ([`cell_function`]). Every
//! rejection is `invalid_input` with `failurePhase: "input"`; the caller maps
//! it, this module only decides *whether* and *why*. Nothing here runs guest
//! code or dispatches anything.
//!
//! # Decisions on the contract's open points
//!
//! **Shell-shaped source (step 1).** The check looks at the source as text,
//! before the parse result is consulted, but uses the parse to exempt names
//! the source declares. It inspects the first *significant* line: leading
//! whitespace, a BOM, `//` and `/* */` comments and `#` comment lines are
//! skipped. A source is shell-shaped when:
//!
//! - it starts with `#!` (after leading whitespace);
//! - the line starts with a shell control form: `if …` without `(` and with a
//!   `then` word in the source; `while`/`until …` without `(` and with a `do`
//!   word; `for x in …`/`for ((…)); do` with a `do` word; `case WORD in`;
//!   `function name {` (no parameter list);
//! - the line starts with one or more `NAME=VALUE` assignments followed by a
//!   command word (`FOO=1 npm test`). `VALUE` must be non-empty, must not be a
//!   JavaScript prefix keyword (`await`, `new`, `typeof`, …) and must not end
//!   in an operator or opening bracket, and the following word must not be an
//!   operator keyword (`in`, `instanceof`, …) or a regular-expression literal,
//!   so `x=await f()`, `x=a+ b` and `x=y in z` stay JavaScript;
//! - the line starts with a path to an executable: `./x`, `../x`, `~/x`, or
//!   an absolute path `/a/b…` that cannot be read as a regular-expression
//!   literal with valid flags (`/usr/bin/env` can not, `/a/g.test(s)` can);
//! - the line starts with a word from [`SHELL_COMMANDS`] (about 165 common commands)
//!   that is followed by a flag (`-x`, `--x`, `+x`), an argument word (not
//!   `in`/`instanceof`/`of`/`as`/`satisfies`), a quoted string, a `$`
//!   expansion, a path (`/x`, `./`, `../`, `~`, a lone `.`), a redirection
//!   (`>`, `>>`, `<`), or a `;`, `|`, `||`, `&`, `&&` operator (compound
//!   assignments such as `|=`, `>=`, `&=` do not count). Calls, member
//!   access, assignment, indexing and tagged templates (`ls(…)`, `cat.x`,
//!   `cat = 1`, `cat[0]`, ``sh`…` ``) never match.
//! - **Bare command word:** a source that consists of nothing but one listed
//!   command word (optionally followed by `;`), such as `pwd` or `ls`, is
//!   rejected: as JavaScript it could only evaluate a global and discard it.
//!   A command word alone on the first line of a longer source is not.
//!
//! The command rule (and only that rule; the others never match valid
//! JavaScript) is skipped when the word is a JavaScript keyword or a known
//! global ([`KNOWN_GLOBALS`]), a caller-supplied global (tool callable names,
//! the argument of [`prepare_source`]), or a name the source itself binds
//! anywhere (`var`/`let`/`const`/`function`/`class`, parameters, catch
//! parameters, destructuring). Bindings come from the parsed syntax tree; when
//! the parser could not recover, a textual scan for `var|let|const|function|
//! class <name>` is used instead.
//!
//! **Parse (step 2).** The source is parsed with `oxc_parser` as
//! `"(async () => {\n" + source + "\n})"` ([`wrap_source`]): JavaScript (no
//! TypeScript, no JSX), script goal, latest ECMAScript, regular-expression
//! bodies validated. The earliest error (by source position) is reported.
//! Positions are 1-based; the line excludes the wrapper line and the
//! **column counts UTF-16 code units** (what JavaScript engines and editors
//! report); `\r\n`, `\n`, `\r`, U+2028 and U+2029 end lines. Errors found past
//! the end of the user's source (inside the wrapper suffix, e.g. an unclosed
//! `(`) are reported at the end of the user's source. Additions to the
//! parser's own checks:
//!
//! - a static `import` declaration is `Cannot use import statement outside a
//!   module` at the `import` keyword (`1:1`); `export` declarations are
//!   `Unexpected token 'export'` at their keyword;
//! - `import.meta` is `Cannot use 'import.meta' outside a module` at its
//!   start, the `import` keyword (`1:8` for `return import.meta`; V8 points
//!   at `meta` instead, but the contract's positions are where the
//!   construct starts);
//! - a `}` that closes the wrapper function early (`}); (async () => {`) is
//!   reported at that `}` as `Unexpected token '}'; it closes the cell's
//!   function body`.
//!
//! Parser text has control characters replaced by spaces, trailing periods
//! removed and is clipped to 240 characters (Unicode scalar values, ending in
//! `…` when clipped), so the whole diagnostic stays under 500 bytes whatever
//! the source contains. Early errors that `oxc_parser` leaves to semantic
//! analysis (duplicate `let`, `break` outside a loop, …) are not reported
//! here; QuickJS rejects them when it compiles the cell, still before any
//! guest code or tool runs.
//!
//! **Module access (step 3).** Checked only when the source text contains
//! `import`, `require` or `\u`. Rejected: every dynamic `import(…)` (including
//! phase forms like `import.source(…)`), and every call — ordinary, optional
//! (`require?.()`), `new require(…)` and tagged templates (``require`x` ``) —
//! whose callee, after removing parentheses and taking the last element of
//! comma sequences, is the identifier `require`, however it is spelled
//! (`r\u0065quire` is cooked to `require` by the parser). A locally declared
//! `require` is rejected too. Strings, template text, regular expressions,
//! comments, member calls (`x.require()`, `x["require"]()`) and property
//! paths (`api.import.meta`) are not module access. A bare reference such as
//! `const r = require` passes here and fails at run time with the same
//! message (contract §7, last paragraph).

mod nesting;
mod parse;
mod shell;

use parse::*;
use shell::*;

pub use nesting::MAX_SOURCE_NESTING;

use std::collections::HashSet;

use oxc_allocator::Allocator;
use oxc_ast::ast::{
    ArrowFunctionBody, ArrowFunctionExpression, BindingIdentifier, CallExpression, Expression,
    FunctionBody, ImportExpression, ModuleDeclaration, NewExpression, ParenthesizedExpression,
    Program, Statement, TaggedTemplateExpression,
};
use oxc_ast_visit::{walk, Visit};
use oxc_diagnostics::OxcDiagnostic;
use oxc_parser::{config::TokensParserConfig, Kind, ParseOptions, Parser, ParserReturn};
use oxc_span::{GetSpan, SourceType};

/// The exact message for rejected module access (contract §5).
pub const MODULE_ACCESS_MESSAGE: &str = "code mode module access is disabled. Call an enabled async tool global from guest JavaScript; use catalog.search(query) when the bounded quick index omits it. Do not retry the same source with require() or an import.";

/// The message for shell-shaped source (contract §5; the middle text is ours).
pub const SHELL_SOURCE_MESSAGE: &str = "code mode exec runs JavaScript, not shell commands. Call an enabled async tool global from guest JavaScript instead (for example `const r = await some_tool({ ... }); return r;`); use catalog.search(query) to find the tool when the quick index omits it. Do not retry the same shell command as code.";

/// Text placed before the user's source when it is parsed and run.
pub const WRAPPER_PREFIX: &str = "(async () => {\n";

/// Text placed after the user's source when it is parsed and run.
pub const WRAPPER_SUFFIX: &str = "\n})";

/// Maximum length of the parser's text inside a syntax-error message, in
/// Unicode scalar values.
pub const MAX_PARSER_MESSAGE_CHARS: usize = 240;

/// Largest cell source, in bytes of UTF-8. Unit: bytes; scope: one cell
/// (`code`); 256 KiB. A longer source is rejected with `invalid_input`
/// before it is parsed. Model-written cells are a few kilobytes (256 KiB is
/// some 64,000 tokens of code); data belongs in tool results, not in
/// source. The cap also bounds the source check's stack (below).
pub const MAX_SOURCE_BYTES: usize = 256 << 10;

/// Sources longer than this, in bytes, are checked at most
/// [`MAX_LARGE_SOURCE_CHECKS`] at a time in the process: a hostile one can
/// make the check touch up to ~1.6 KiB of stack per byte while it runs.
pub(crate) const LARGE_SOURCE_BYTES: usize = 16 << 10;

/// Large sources ([`LARGE_SOURCE_BYTES`]) checked at once, process-wide.
pub(crate) const MAX_LARGE_SOURCE_CHECKS: usize = 2;

/// Native stack the source check may use per byte of source, on top of
/// [`CHECK_STACK_BASE_BYTES`]. The parser and the syntax-tree visitors
/// recurse once per nesting level, and a level takes at least one byte, so
/// a stack of `base + len × this` holds any source however it nests. The
/// heaviest shapes measured (nested parentheses and arrays, one byte per
/// level) touch about 1.6 KiB per level, stack and syntax tree together
/// (`measure: cargo test --lib` with a throwaway probe, see
/// `docs/hardening.md`). The stack is reserved, not committed: honest
/// sources touch a few pages of it.
const CHECK_STACK_BYTES_PER_SOURCE_BYTE: usize = 4096;

/// Native stack every source check gets, whatever its length (the
/// parser's and visitors' own frames for code that hardly nests).
const CHECK_STACK_BASE_BYTES: usize = 256 << 10;

/// Why a cell's source was refused before any guest code ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceRejection {
    /// The source is longer than [`MAX_SOURCE_BYTES`].
    TooLarge {
        /// The source's length in bytes.
        bytes: usize,
    },
    /// The source's brackets nest deeper than [`MAX_SOURCE_NESTING`].
    TooDeep,
    /// The source looks like a shell command line, not JavaScript.
    ShellShaped,
    /// The wrapped source does not parse as JavaScript.
    Syntax {
        /// 1-based line in the user's source (the wrapper line excluded).
        line: u32,
        /// 1-based column in UTF-16 code units.
        column: u32,
        /// The parser's text, already sanitized and clipped to
        /// [`MAX_PARSER_MESSAGE_CHARS`].
        message: String,
    },
    /// The source calls `require(…)` or a dynamic `import(…)`.
    ModuleAccess,
}

impl SourceRejection {
    /// The exact model-facing text of the contract's message catalogue.
    pub fn message(&self) -> String {
        match self {
            Self::TooLarge { bytes } => format!(
                "code mode source is {bytes} bytes; at most {MAX_SOURCE_BYTES} bytes are accepted. Keep the program short and get data from tools instead of writing it into the source."
            ),
            Self::TooDeep => format!(
                "code mode source nests brackets more than {MAX_SOURCE_NESTING} levels deep. No tools were dispatched; flatten the nesting (build deep data in a loop) and submit it again."
            ),
            Self::ShellShaped => SHELL_SOURCE_MESSAGE.to_owned(),
            Self::Syntax {
                line,
                column,
                message,
            } => format!(
                "SyntaxError at quickcell:user.js:{line}:{column}: {message}. No tools were dispatched; correct the JavaScript source and submit it again."
            ),
            Self::ModuleAccess => MODULE_ACCESS_MESSAGE.to_owned(),
        }
    }
}

impl std::fmt::Display for SourceRejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message())
    }
}

impl std::error::Error for SourceRejection {}

/// The text that is parsed (and later compiled by QuickJS) for `source`.
pub fn wrap_source(source: &str) -> String {
    let mut wrapped =
        String::with_capacity(WRAPPER_PREFIX.len() + source.len() + WRAPPER_SUFFIX.len());
    wrapped.push_str(WRAPPER_PREFIX);
    wrapped.push_str(source);
    wrapped.push_str(WRAPPER_SUFFIX);
    wrapped
}

/// Validates a cell's source (contract §7): shell shape, syntax, module
/// access; returns the text of the cell function the guest compiles
/// ([`cell_function`]).
///
/// `is_global` names extra globals (the cell's tool callable names) that
/// the shell-command rule must never treat as a shell command.
///
/// # Errors
///
/// The first failing check, as a [`SourceRejection`]; its
/// [`message`](SourceRejection::message) is the model-facing `error` text.
pub fn prepare_source(
    source: &str,
    is_global: &dyn Fn(&str) -> bool,
) -> Result<String, SourceRejection> {
    bounded(source, || {
        let allocator = Allocator::default();
        let ret = check(&allocator, source, is_global)?;
        Ok(cell_function(source, &ret.program))
    })
}

/// Runs `f` (which parses `source` and walks its syntax tree) if the source
/// is within [`MAX_SOURCE_BYTES`] and [`MAX_SOURCE_NESTING`], on a stack
/// large enough for any such source (see [`check_stack_bytes`]).
fn bounded<T>(
    source: &str,
    f: impl FnOnce() -> Result<T, SourceRejection>,
) -> Result<T, SourceRejection> {
    if source.len() > MAX_SOURCE_BYTES {
        return Err(SourceRejection::TooLarge {
            bytes: source.len(),
        });
    }
    if nesting::max_nesting(source, MAX_SOURCE_NESTING) > MAX_SOURCE_NESTING {
        return Err(SourceRejection::TooDeep);
    }
    // Runs on the caller's stack when enough of it is left (short sources),
    // else on a fresh stack of that size.
    let needed = check_stack_bytes(source.len());
    stacker::maybe_grow(needed, needed, f)
}

/// The native stack the check of a `len`-byte source runs on.
fn check_stack_bytes(len: usize) -> usize {
    CHECK_STACK_BASE_BYTES + len.saturating_mul(CHECK_STACK_BYTES_PER_SOURCE_BYTE)
}

/// [`prepare_source`]'s checks alone, with no extra globals.
#[cfg(test)]
fn validate_source(source: &str) -> Result<(), SourceRejection> {
    validate_source_with_globals(source, &[])
}

/// [`prepare_source`]'s checks alone, with `known_globals` as the extra
/// globals.
#[cfg(test)]
fn validate_source_with_globals(
    source: &str,
    known_globals: &[&str],
) -> Result<(), SourceRejection> {
    bounded(source, || {
        let allocator = Allocator::default();
        check(&allocator, source, &|word| known_globals.contains(&word)).map(|_| ())
    })
}

/// Runs the three checks; returns the parse of the wrapped source.
fn check<'a>(
    allocator: &'a Allocator,
    source: &str,
    is_global: &dyn Fn(&str) -> bool,
) -> Result<ParserReturn<'a>, SourceRejection> {
    let wrapped = allocator.alloc_str(&wrap_source(source));
    let ret = parse(allocator, wrapped);

    // Step 1: shell-shaped source.
    if let Some(hit) = shell_shape(source) {
        let reject = match hit {
            ShellHit::Always => true,
            ShellHit::Command(word) => {
                !is_never_command(word) && !is_global(word) && !source_declares(source, &ret, word)
            }
        };
        if reject {
            return Err(SourceRejection::ShellShaped);
        }
    }

    // Step 2: syntax.
    let needs_module_scan = ["import", "export", "require", "\\u"]
        .iter()
        .any(|needle| source.contains(needle));
    let mut scan = ModuleScan::default();
    if needs_module_scan && !ret.panicked {
        scan.visit_program(&ret.program);
    }
    if let Some(rejection) = syntax_rejection(source, wrapped, &ret, &scan) {
        return Err(rejection);
    }

    // Step 3: module access.
    if scan.module_access {
        return Err(SourceRejection::ModuleAccess);
    }
    Ok(ret)
}

// ---------------------------------------------------------------------------
// The cell function
// ---------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;

    fn rejected(source: &str) -> SourceRejection {
        match validate_source(source) {
            Err(rejection) => rejection,
            Ok(()) => panic!("expected a rejection for {source:?}"),
        }
    }

    fn syntax(source: &str) -> (u32, u32, String) {
        match rejected(source) {
            SourceRejection::Syntax {
                line,
                column,
                message,
            } => (line, column, message),
            other => panic!("expected a syntax error for {source:?}, got {other:?}"),
        }
    }

    fn assert_ok(source: &str) {
        if let Err(rejection) = validate_source(source) {
            panic!("expected {source:?} to pass, got {}", rejection.message());
        }
    }

    // ---- shell-shaped source --------------------------------------------

    #[test]
    fn shell_sources_are_rejected() {
        let cases = [
            "#!/bin/bash\necho hi",
            "  #!/usr/bin/env node\nconsole.log(1)",
            "ls -la",
            "ls -1",
            "ls",
            "pwd",
            "pwd;",
            "ls;",
            "ls; pwd",
            "ls | wc -l",
            "ls|wc",
            "ls > out.txt",
            "ls >> out.txt",
            "cat < in.txt",
            "ls && pwd",
            "ls || true",
            "sleep 5 &",
            "git status",
            "git log --oneline -5",
            "git commit -m \"fix\"",
            "npm install",
            "npm run build",
            "npx tsc --noEmit",
            "cat README.md",
            "cat /etc/hosts",
            "cat ~/notes.txt",
            "cd /work && cargo test",
            "cd ..",
            "cd ../x",
            "cd .",
            "find . -name '*.rs'",
            "grep -rn TODO src",
            "grep 'x' file",
            "curl https://example.com",
            "echo $HOME",
            "echo \"hello\"",
            "echo 'hello'",
            "ls *.rs",
            "chmod +x run.sh",
            "apt-get install -y jq",
            "docker-compose up -d",
            "python3 script.py",
            "sudo apt install jq",
            "ls 2>&1",
            "  \n\n  ls -la",
            "// list files\nls -la",
            "/* list */ ls -la",
            "# comment\nls -la",
            "if [ -f x ]; then echo yes; fi",
            "if test -f x\nthen echo yes\nfi",
            "while true; do echo hi; done",
            "while read line; do echo $line; done < f",
            "until false; do sleep 1; done",
            "for f in *.rs; do cat $f; done",
            "for ((i=0; i<3; i++)); do echo $i; done",
            "case \"$1\" in\n  a) echo a;;\nesac",
            "case $x in",
            "function deploy {\n  echo hi\n}",
            "function deploy{ echo hi; }",
            "FOO=1 npm test",
            "NODE_ENV=production node server.js",
            "A=1 B=2 make",
            "PATH=$PATH:/x/bin mytool --help",
            "FOO=\"a b\" cmd",
            "FOO=1 ./run.sh",
            "FOO=1 /usr/bin/env node",
            "./build.sh",
            "./x.sh --flag",
            "../scripts/run arg",
            "/usr/bin/env python3 x.py",
            "/bin/sh -c 'ls'",
            "/tmp/tool",
            "~/bin/tool --x",
        ];
        for source in cases {
            assert_eq!(rejected(source), SourceRejection::ShellShaped, "{source:?}");
        }
    }

    #[test]
    fn shell_message_matches_contract() {
        let message = SourceRejection::ShellShaped.message();
        assert!(message.contains("runs JavaScript, not shell commands"));
        assert!(message.contains("async tool global"));
        assert!(message.ends_with("Do not retry the same shell command as code."));
    }

    #[test]
    fn javascript_is_not_shell() {
        let cases = [
            "const r = await read({path:\"x\"}); return r;",
            "find({pattern:\"*.rs\"})",
            "await find({pattern:\"*.rs\"})",
            "await grep({pattern: \"TODO\", path: \"src\"})",
            "return await ls({ path: \".\" })",
            "ls({ path: '.' })",
            "ls ({ path: '.' })",
            "ls?.({})",
            "git.status()",
            "cat.x",
            "cat . x",
            "cat = 5",
            "cat == 5",
            "cat[0]",
            "cat\n.map(x => x)",
            "cat in obj",
            "cat instanceof Foo",
            "cat ? 1 : 2",
            "cat, 1",
            "echo`hi`",
            "echo `hi`",
            "date = new Date()",
            "time + 1",
            "ls - 1",
            "ls -= 1",
            "ls |= 1",
            "ls >= 1",
            "ls <= 1",
            "ls << 1",
            "ls &= 1",
            "const cat = [1]; cat -1",
            "let ls = 3;\nls -la",
            "var ls; ls -la",
            "function ls() { return 1 }\nls -1",
            "class git {}\ngit -1",
            "const { ls } = obj;\nls -1",
            "const [ls] = arr;\nls > 0",
            "const f = (ls) => ls -1; return f(2)",
            "try { x() } catch (ls) { ls -1 }",
            "ls -1; const ls = 2",
            "text(\"ls -la\")",
            "return `\nls -la\n`",
            "const script = `\nls -la\n`; return script",
            "// ls -la\nreturn 1",
            "/* ls -la */ return 1",
            "return ls",
            "x=await f()",
            "x=typeof y",
            "x=new Foo()",
            "x=a+ b",
            "x=a, b",
            "x=y in z",
            "x={a: b}",
            "x=[1, 2]",
            "x=f(a, b)",
            "x=a /b/ c",
            "x=1\ny()",
            "x= foo",
            "x=y // comment",
            "x=y /* c */ + 1",
            "if (x) { ls() }",
            "while (x) { x-- }",
            "for (const f of files) {}",
            "for await (const f of files) {}",
            "for (let i = 0; i < 3; i++) { do { } while (0) }",
            "function deploy() {\n  return 1\n}\nreturn deploy()",
            "/a/g.test(s)",
            "/usr/.test(s)",
            "~/x/.test(s)",
            ".5 + 1",
            "const x = 1; ls -la",
            "console.log(\"ls\")",
            "await text(\"hi\")",
            "json({ a: 1 })",
            "return catalog.search(\"git\")",
            "set.add(1)",
            "test(\"x\")",
            "exit()",
        ];
        for source in cases {
            assert_ne!(
                validate_source(source),
                Err(SourceRejection::ShellShaped),
                "{source:?}"
            );
        }
    }

    #[test]
    fn known_globals_are_exempt() {
        assert_eq!(validate_source("git -1"), Err(SourceRejection::ShellShaped));
        assert_eq!(validate_source_with_globals("git -1", &["git"]), Ok(()));
        assert_eq!(validate_source_with_globals("grep > 1", &["grep"]), Ok(()));
    }

    #[test]
    fn command_list_never_contains_keywords_or_globals() {
        for word in SHELL_COMMANDS {
            assert!(!KNOWN_GLOBALS.contains(word), "{word}");
        }
        assert!(SHELL_COMMANDS.len() >= 120, "{}", SHELL_COMMANDS.len());
    }

    #[test]
    fn declared_names_are_exempt_even_when_parse_fails() {
        // Parse fails (unclosed call), declaration found textually: syntax error.
        let (line, _, _) = syntax("ls -la; const ls = 1; foo(");
        assert_eq!(line, 1);
        // Undeclared command with a later parse failure is still shell.
        assert_eq!(
            validate_source("ls -la; foo("),
            Err(SourceRejection::ShellShaped)
        );
    }

    #[test]
    fn shell_wins_over_syntax_and_module_access() {
        assert_eq!(
            validate_source("git status; require('x')"),
            Err(SourceRejection::ShellShaped)
        );
        assert_eq!(
            validate_source("#!/bin/sh\nimport x from 'y'"),
            Err(SourceRejection::ShellShaped)
        );
    }

    // ---- syntax errors --------------------------------------------------

    #[test]
    fn valid_programs_pass() {
        let cases = [
            "",
            "return 1 + 1",
            "await 1",
            "const r = await Promise.resolve(3); return r * 2;",
            "text(\"hi\"); json({ a: 1 }); return null",
            "\"use strict\"; return 1",
            "with (Math) { return max(1, 2) }",
            "const re = /[\\p{L}--[a-z]]/v; return re.test('x')",
            "return /{/.test('{')",
            "class A { #x = 1; has(o) { return #x in o } }",
            "for await (const x of []) {}",
            "label: for (;;) { break label }",
            "return 1 // trailing comment",
            "let x = 1\r\nreturn x",
            "return '😀'.length",
        ];
        for source in cases {
            assert_ok(source);
        }
    }

    #[test]
    fn syntax_error_format_and_position() {
        let error = rejected("let x = ;");
        assert_eq!(
            error.message(),
            match &error {
                SourceRejection::Syntax { message, .. } => format!(
                    "SyntaxError at quickcell:user.js:1:9: {message}. No tools were dispatched; correct the JavaScript source and submit it again."
                ),
                _ => unreachable!(),
            }
        );
        assert_eq!(syntax("let x = ;").0, 1);
        assert_eq!(syntax("let x = ;").1, 9);
    }

    #[test]
    fn multi_line_positions() {
        assert_eq!(syntax("const a = 1;\nconst b = 2;\nlet c = ;").1, 9);
        assert_eq!(syntax("const a = 1;\nconst b = 2;\nlet c = ;").0, 3);
    }

    #[test]
    fn crlf_and_separators_count_as_one_line() {
        let (line, column, _) = syntax("a = 1\r\nb = 2\r\nlet c = ;");
        assert_eq!((line, column), (3, 9));
        let (line, column, _) = syntax("a = 1\u{2028}let c = ;");
        assert_eq!((line, column), (2, 9));
        let (line, column, _) = syntax("a = 1\rlet c = ;");
        assert_eq!((line, column), (2, 9));
    }

    #[test]
    fn columns_count_utf16_code_units() {
        // U+1F600 is two UTF-16 code units; é is one.
        let (line, column, _) = syntax("'😀'; let x = ;");
        assert_eq!((line, column), (1, 15));
        let (line, column, _) = syntax("'é'; let x = ;");
        assert_eq!((line, column), (1, 14));
    }

    #[test]
    fn static_import_is_a_syntax_error_at_its_position() {
        let (line, column, message) = syntax("import x from \"y\"");
        assert_eq!((line, column), (1, 1));
        assert!(message.contains("import statement"), "{message}");
        let (line, column, _) = syntax("const a = 1;\n  import { b } from 'c'");
        assert_eq!((line, column), (2, 3));
        let (line, column, _) = syntax("import 'side-effect'");
        assert_eq!((line, column), (1, 1));
        let (line, column, message) = syntax("export const x = 1");
        assert_eq!((line, column), (1, 1));
        assert!(message.contains("export"), "{message}");
    }

    #[test]
    fn import_meta_is_a_syntax_error_at_its_start() {
        let (line, column, message) = syntax("import.meta");
        assert_eq!((line, column), (1, 1));
        assert!(message.contains("import.meta"), "{message}");
        let (line, column, _) = syntax("return import.meta.url");
        assert_eq!((line, column), (1, 8));
        let (line, column, _) = syntax("const x = 1;\n  f(import . meta)");
        assert_eq!((line, column), (2, 5));
    }

    #[test]
    fn typescript_is_a_syntax_error() {
        for source in [
            "let x: number = 1",
            "interface A { a: string }",
            "type A = { a: string }",
            "enum E { A }",
            "function f<T>(x: T): T { return x }",
            "const y = x as any",
            "let z!: number",
            "abstract class A {}",
            "declare const q: number",
            "const v = <T,>(x) => x",
        ] {
            assert!(
                matches!(rejected(source), SourceRejection::Syntax { .. }),
                "{source:?}"
            );
        }
        let (line, column, _) = syntax("let x: number = 1");
        assert_eq!((line, column), (1, 6));
    }

    #[test]
    fn long_identifier_diagnostic_is_short() {
        let ident = "a".repeat(10_000);
        for source in [
            format!("let {ident} = ;"),
            format!("{ident} {ident}"),
            format!("#{ident}"),
            format!("let x = 1 {ident}"),
            format!("'{ident}"),
            format!("class A {{ m() {{ this.#{ident} = }} }}"),
            format!("{ident}(⊕)"),
        ] {
            let rejection = rejected(&source);
            let message = rejection.message();
            assert!(message.len() < 500, "{} bytes: {message}", message.len());
            assert!(message.starts_with("SyntaxError at quickcell:user.js:"));
        }
    }

    #[test]
    fn parser_message_is_clipped_safely() {
        let long = format!("{}😀{}", "x".repeat(238), "y".repeat(50));
        let clipped = clip_parser_message(&long);
        assert_eq!(clipped.chars().count(), MAX_PARSER_MESSAGE_CHARS);
        assert!(clipped.ends_with('…'));
        assert_eq!(clip_parser_message("Bad thing.\nmore"), "Bad thing. more");
        assert_eq!(clip_parser_message("Ends with period."), "Ends with period");
    }

    #[test]
    fn errors_in_the_wrapper_suffix_point_at_the_end_of_source() {
        let (line, column, _) = syntax("foo(");
        assert_eq!((line, column), (1, 5));
        let (line, column, _) = syntax("const a = [1,\n2");
        assert_eq!((line, column), (2, 2));
    }

    #[test]
    fn closing_the_wrapper_early_is_a_syntax_error() {
        let (line, column, message) = syntax("}); (async () => {");
        assert_eq!((line, column), (1, 1));
        assert!(message.contains('}'), "{message}");
        let (line, column, _) = syntax("x = 1; }");
        assert_eq!((line, column), (1, 8));
        let (line, column, _) = syntax("return 1\n}), (async () => {");
        assert_eq!((line, column), (2, 1));
        let (line, column, _) = syntax("const t = `${ {a: 1}.a }`;\n}) || (() => {");
        assert_eq!((line, column), (2, 1));
    }

    #[test]
    fn other_syntax_errors() {
        let (line, column, _) = syntax("return 1 +");
        assert_eq!(line, 1);
        assert_eq!(column, 11);
        assert!(matches!(
            rejected("'unterminated"),
            SourceRejection::Syntax { .. }
        ));
        assert!(matches!(
            rejected("const re = /a{2,1}/"),
            SourceRejection::Syntax { .. }
        ));
        assert!(matches!(rejected("<div/>"), SourceRejection::Syntax { .. }));
        assert!(matches!(
            rejected("\\u0069mport('x')"),
            SourceRejection::Syntax { .. }
        ));
        assert!(matches!(
            rejected("return 1 /* open"),
            SourceRejection::Syntax { .. }
        ));
    }

    #[test]
    fn syntax_error_wins_over_module_access() {
        assert!(matches!(
            rejected("require('fs');\nlet x = ;"),
            SourceRejection::Syntax { line: 2, .. }
        ));
    }

    // ---- module access --------------------------------------------------

    #[test]
    fn module_access_is_rejected() {
        let cases = [
            "require('fs')",
            "const fs = require(\"fs\")",
            "r\\u0065quire('fs')",
            "\\u0072equire('fs')",
            "r\\u{65}quire('fs')",
            "require?.('fs')",
            "(require)('fs')",
            "((require))('fs')",
            "(0, require)('fs')",
            "(0, (1, require))('fs')",
            "(0, require)?.('fs')",
            "require /* c */ ('fs')",
            "require // c\n('fs')",
            "new require('fs')",
            "require`fs`",
            "import('fs')",
            "await import('fs')",
            "import(/* c */ 'fs')",
            "const m = await import('x', { with: { type: 'json' } })",
            "`${`${`${require('fs')}`}`}`",
            "`a ${ `b ${ import('x') }` }`",
            "class A { #p = require('x'); m() { return this.#p } }",
            "class A { static #q() { return import('x') } }",
            "'😀'; require('fs')",
            "const s = '𝒳𝒴'; r\\u0065quire('x')",
            "function* g() { yield /re/; require('x') }",
            "for (const x of /re/g[Symbol.iterator] ? [] : []) require('x')",
            "const of = 1; const y = of / 2 / require('x')",
            "async function f() { await (0, require)('x') }",
            "x = () => require('x')",
            "if (a) { b(); } else { c(require('d')) }",
            "obj.fn(require('x'))",
            "function require(x) {} require('x')",
        ];
        for source in cases {
            assert_eq!(
                validate_source(source),
                Err(SourceRejection::ModuleAccess),
                "{source:?}"
            );
        }
        assert_eq!(
            SourceRejection::ModuleAccess.message(),
            MODULE_ACCESS_MESSAGE
        );
    }

    #[test]
    fn non_module_access_passes() {
        let cases = [
            "return 'require(\"fs\")'",
            "return \"import('x')\"",
            "return `require('fs') import('x')`",
            "return `${'require'}('fs')`",
            "return /require\\('fs'\\)/",
            "return /import\\(x\\)/.source",
            "// require('fs')\nreturn 1",
            "/* import('x') */ return 1",
            "x.import()",
            "x?.import?.()",
            "x.require('fs')",
            "x?.require?.('fs')",
            "x[\"require\"]('fs')",
            "x['import']('fs')",
            "return api.import.meta",
            "const o = { import: 1, require: 2 }; return o.import + o.require",
            "const { require: r } = x",
            "class A { require() {} import() {} }",
            "const requireX = 1; requireX",
            "requires('x')",
            "const \\u0061 = 1; return a",
            "return '\\u0041'",
            "text(`\\u0041`)",
            "return typeof require",
            "const r = require; return r",
        ];
        for source in cases {
            assert_eq!(validate_source(source), Ok(()), "{source:?}");
        }
    }

    #[test]
    fn helper_line_column() {
        assert_eq!(line_column("abc", 0), (1, 1));
        assert_eq!(line_column("abc", 3), (1, 4));
        assert_eq!(line_column("a\nb", 2), (2, 1));
        assert_eq!(line_column("a\r\nb", 3), (2, 1));
        assert_eq!(line_column("😀x", 4), (1, 3));
    }

    // ---- the cell function ----------------------------------------------

    fn prepared(source: &str) -> String {
        prepare_source(source, &|_| false).expect("valid source")
    }

    fn parses(text: &str) -> bool {
        let allocator = Allocator::default();
        let ret = parse(&allocator, text);
        !ret.panicked && ret.diagnostics.errors().next().is_none()
    }

    #[test]
    fn a_body_without_top_level_bindings_gets_the_plain_wrapper() {
        for source in [
            "return 1",
            "",
            "if (x) { let y = 1 }",
            "for (const a of b) text(a)",
        ] {
            assert_eq!(prepared(source), wrap_source(source), "{source:?}");
        }
    }

    #[test]
    fn the_kept_function_closes_over_every_top_level_binding() {
        let source = "const a = 1, {b, c: [d, ...e], ...f} = x;\nlet g; var h = 2;\n\
                      function i() {}\nclass J {}\nvar h;\nvar arguments;\n\
                      if (a) { let inner = 1; var hoisted = 2 }\nreturn a";
        let text = prepared(source);
        assert!(
            text.starts_with(
                "(async (__qcKeep) => {__qcKeep(() => [a,b,d,e,f,g,h,i,J]);\nconst a = 1"
            ),
            "{text}"
        );
        assert!(text.ends_with("return a\n})"), "{text}");
        assert!(parses(&text), "{text}");
    }

    #[test]
    fn the_user_source_keeps_its_lines_and_columns() {
        let source = "const a = 1;\n  return a";
        let text = prepared(source);
        let first_newline = text.find('\n').unwrap();
        assert_eq!(
            &text[first_newline + 1..first_newline + 1 + source.len()],
            source
        );
        assert!(!text[..first_newline].contains(source));
    }

    #[test]
    fn a_strict_body_stays_strict() {
        let text = prepared("'use strict'; const a = 1; return a");
        assert!(
            text.starts_with("(async (__qcKeep) => {\"use strict\";__qcKeep(() => [a]);\n"),
            "{text}"
        );
        // A directive that is not the prologue's, or is escaped, is not one.
        let text = prepared("const a = 1; 'use strict'; return a");
        assert!(
            !text[..text.find('\n').unwrap()].contains("use strict"),
            "{text}"
        );
        let text = prepared("'use\\x20strict'; const a = 1; return a");
        assert!(
            !text[..text.find('\n').unwrap()].contains("use strict"),
            "{text}"
        );
    }

    #[test]
    fn the_added_name_never_occurs_in_the_source() {
        let source = "const __qcKeep = 1, __qcKeep1 = 2; return __qcKeep";
        let text = prepared(source);
        assert!(
            text.starts_with("(async (__qcKeep2) => {__qcKeep2(() => [__qcKeep,__qcKeep1]);\n"),
            "{text}"
        );
        assert!(parses(&text), "{text}");
    }

    #[test]
    fn tool_globals_are_never_shell_commands() {
        assert_eq!(
            prepare_source("git -1", &|_| false),
            Err(SourceRejection::ShellShaped)
        );
        assert_eq!(
            prepare_source("git -1", &|name| name == "git"),
            Ok(wrap_source("git -1"))
        );
    }
}
