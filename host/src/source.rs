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
//! - `import.meta` is `Cannot use 'import.meta' outside a module` at the
//!   `meta` token (`1:8` for a source starting with it), the position V8
//!   reports;
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

/// The text of the cell function for a validated `source` whose wrapped
/// parse is `program`.
///
/// It is [`wrap_source`]'s text with one addition on the wrapper's own
/// first line: the function's one parameter (the prelude's) is called with
/// an arrow function that closes over the body's top-level bindings
/// ([`top_level_bindings`]), and the prelude keeps it. When the cell
/// returns, its frame is released, but the values of those bindings stay
/// referenced, so the guest does not spend the end of the cell freeing them
/// one object at a time: the instance is discarded as soon as the cell has
/// ended. While the cell runs nothing changes (the frame holds the same
/// values), and the arrow is never called, so bindings still in their
/// temporal dead zone are never read.
///
/// The user's lines and columns are unchanged: the addition sits on the
/// wrapper's line. The parameter's name is chosen so that it occurs nowhere
/// in the source. A body whose directive prologue makes it strict gets
/// `"use strict"` ahead of the hand-over, which would otherwise end the
/// prologue. A body with no top-level bindings gets the plain wrapper.
fn cell_function(source: &str, program: &Program<'_>) -> String {
    let Some(body) = wrapper_body(program) else {
        return wrap_source(source);
    };
    let names = top_level_bindings(body);
    if names.is_empty() {
        return wrap_source(source);
    }
    let strict = body.directives.iter().any(|d| d.directive == "use strict");
    let keep = unused_name(source, "__qcKeep");
    let names_len: usize = names.iter().map(|n| n.len() + 1).sum();
    let mut text = String::with_capacity(source.len() + names_len + 64);
    text.push_str("(async (");
    text.push_str(&keep);
    text.push_str(") => {");
    if strict {
        text.push_str("\"use strict\";");
    }
    text.push_str(&keep);
    text.push_str("(() => [");
    text.push_str(&names.join(","));
    text.push_str("]);\n");
    text.push_str(source);
    text.push_str(WRAPPER_SUFFIX);
    text
}

/// The body of the wrapper's arrow function, when the program is exactly
/// the wrapper.
fn wrapper_body<'p, 'a>(program: &'p Program<'a>) -> Option<&'p FunctionBody<'a>> {
    match &wrapper_arrow(program)?.1.body {
        ArrowFunctionBody::FunctionBody(body) => Some(&**body),
        _ => None,
    }
}

/// The parenthesized arrow function the program consists of, if it does.
fn wrapper_arrow<'p, 'a>(
    program: &'p Program<'a>,
) -> Option<(
    &'p ParenthesizedExpression<'a>,
    &'p ArrowFunctionExpression<'a>,
)> {
    let [Statement::ExpressionStatement(statement)] = program.body.as_slice() else {
        return None;
    };
    let Expression::ParenthesizedExpression(paren) = &statement.expression else {
        return None;
    };
    match &paren.expression {
        Expression::ArrowFunctionExpression(arrow) => Some((paren, arrow)),
        _ => None,
    }
}

/// The names bound by the body's top-level statements, in order, without
/// repeats: `var`, `let`, `const` and `using` declarations (destructuring
/// included) and function and class declarations. `arguments` is left out:
/// inside the kept function it would name that function's own arguments.
fn top_level_bindings<'a>(body: &FunctionBody<'a>) -> Vec<&'a str> {
    let mut names: Vec<&'a str> = Vec::new();
    let mut seen: HashSet<&'a str> = HashSet::new();
    let mut add = |name: &'a str| {
        if name != "arguments" && seen.insert(name) {
            names.push(name);
        }
    };
    for statement in &body.statements {
        match statement {
            Statement::VariableDeclaration(declaration) => {
                for declarator in &declaration.declarations {
                    for id in declarator.id.get_binding_identifiers() {
                        add(id.name.as_str());
                    }
                }
            }
            Statement::FunctionDeclaration(function) => {
                if let Some(id) = &function.id {
                    add(id.name.as_str());
                }
            }
            Statement::ClassDeclaration(class) => {
                if let Some(id) = &class.id {
                    add(id.name.as_str());
                }
            }
            _ => {}
        }
    }
    names
}

/// `base`, or `base` with the smallest numeric suffix, that does not occur
/// in `source`.
///
/// One pass: the suffixes that occur (`base` followed by digits) are
/// collected, and the smallest missing one is taken, so a source full of
/// `__qcKeep1 __qcKeep2 …` costs linear time, not one scan per name.
fn unused_name(source: &str, base: &str) -> String {
    let mut taken_plain = false;
    let mut taken: HashSet<u64> = HashSet::new();
    for (at, _) in source.match_indices(base) {
        let rest = &source[at + base.len()..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        // `base` followed by digits also contains `base1`…`base<prefix>`
        // for each prefix of the digits.
        taken_plain = true;
        let mut n = 0u64;
        for b in rest.as_bytes()[..digits.min(19)].iter() {
            n = n * 10 + u64::from(b - b'0');
            taken.insert(n);
        }
    }
    if !taken_plain {
        return base.to_string();
    }
    let n = (1..).find(|n| !taken.contains(n)).unwrap_or(0);
    format!("{base}{n}")
}

fn parse_options() -> ParseOptions {
    ParseOptions {
        parse_regular_expression: true,
        ..ParseOptions::default()
    }
}

fn parse<'a>(allocator: &'a Allocator, wrapped: &'a str) -> ParserReturn<'a> {
    Parser::new(allocator, wrapped, SourceType::script())
        .with_options(parse_options())
        .parse()
}

// ---------------------------------------------------------------------------
// Step 2: syntax errors
// ---------------------------------------------------------------------------

/// A syntax error found in the wrapped text: byte offset and parser text.
struct Found {
    offset: usize,
    message: String,
    /// The error points outside the user's source (into the wrapper).
    outside: bool,
}

fn syntax_rejection(
    source: &str,
    wrapped: &str,
    ret: &ParserReturn<'_>,
    scan: &ModuleScan,
) -> Option<SourceRejection> {
    let prefix = WRAPPER_PREFIX.len();
    let user_end = prefix + source.len();
    let mut candidates: Vec<Found> = ret
        .diagnostics
        .errors()
        .map(|diagnostic| diagnostic_position(diagnostic, prefix, user_end))
        .collect();
    if let Some((offset, message)) = scan.module_declaration {
        candidates.push(Found {
            offset: offset as usize,
            message: message.to_owned(),
            outside: false,
        });
    }
    if candidates.is_empty() && !ret.panicked && !wrapper_intact(&ret.program, wrapped.len()) {
        // The source closed the wrapper function and opened another one.
        candidates.push(Found {
            offset: user_end,
            message: String::new(),
            outside: true,
        });
    }
    // The earliest error wins; the first reported one on ties.
    let mut found = candidates.into_iter().reduce(|best, next| {
        if next.offset < best.offset {
            next
        } else {
            best
        }
    })?;
    if found.outside {
        if let Some(offset) = early_close(source, wrapped) {
            found = Found {
                offset,
                message: "Unexpected token '}'; it closes the cell's function body".to_owned(),
                outside: false,
            };
        } else if found.message.is_empty() {
            found.message = "Unexpected token".to_owned();
        }
    }
    let user_offset = found.offset.clamp(prefix, user_end) - prefix;
    let (line, column) = line_column(source, user_offset);
    Some(SourceRejection::Syntax {
        line,
        column,
        message: clip_parser_message(&found.message),
    })
}

fn diagnostic_position(diagnostic: &OxcDiagnostic, prefix: usize, user_end: usize) -> Found {
    let label = diagnostic
        .labels
        .iter()
        .find(|label| label.primary())
        .or_else(|| diagnostic.labels.first());
    let (start, end) = label.map_or((user_end, user_end), |label| {
        let start = label.offset() as usize;
        (start, start + label.len() as usize)
    });
    let message = diagnostic.message.as_ref();
    if message.starts_with("Unexpected import.meta") && end >= 4 {
        // Point at the `meta` token, as V8 does.
        return Found {
            offset: end - 4,
            message: "Cannot use 'import.meta' outside a module".to_owned(),
            outside: false,
        };
    }
    // A secondary label inside the wrapper prefix ("Opened here") means the
    // source closed the wrapper's function early.
    let wrapper_label = diagnostic
        .labels
        .iter()
        .any(|label| (label.offset() as usize) < prefix);
    Found {
        offset: start,
        message: message.to_owned(),
        outside: start < prefix || start >= user_end || wrapper_label,
    }
}

/// `true` when the program is exactly the wrapper's parenthesized arrow.
fn wrapper_intact(program: &Program<'_>, wrapped_len: usize) -> bool {
    wrapper_arrow(program)
        .is_some_and(|(paren, _)| paren.span.start == 0 && paren.span.end as usize == wrapped_len)
}

/// Finds a `}` in the user's source that closes the wrapper's function body
/// early; returns its offset in the wrapped text. Only used on the error path.
///
/// When the wrapped parse recovered, its tokens are replayed and the first
/// `}` at depth zero is the culprit. When it gave up (no tokens), the source
/// is parsed alone with the module goal (top-level `await` and `return`
/// allowed), where such a `}` is reported at its own position.
fn early_close(source: &str, wrapped: &str) -> Option<usize> {
    let prefix = WRAPPER_PREFIX.len();
    let user_end = prefix + source.len();
    let allocator = Allocator::default();
    let ret = Parser::new(&allocator, wrapped, SourceType::script())
        .with_options(parse_options())
        .with_config(TokensParserConfig)
        .parse();
    if !ret.tokens.is_empty() {
        let mut depth: usize = 0;
        for token in &ret.tokens {
            let start = token.start() as usize;
            if start < prefix {
                continue;
            }
            if start >= user_end {
                break;
            }
            match token.kind() {
                Kind::LCurly | Kind::TemplateHead => depth += 1,
                Kind::RCurly | Kind::TemplateTail => {
                    if depth == 0 {
                        return (token.kind() == Kind::RCurly).then_some(start);
                    }
                    depth -= 1;
                }
                _ => {}
            }
        }
        return None;
    }
    let allocator = Allocator::default();
    let options = ParseOptions {
        allow_return_outside_function: true,
        ..parse_options()
    };
    let ret = Parser::new(&allocator, source, SourceType::mjs())
        .with_options(options)
        .parse();
    ret.diagnostics
        .errors()
        .filter_map(|diagnostic| {
            let label = diagnostic
                .labels
                .iter()
                .find(|label| label.primary())
                .or_else(|| diagnostic.labels.first())?;
            let offset = label.offset() as usize;
            (source.as_bytes().get(offset) == Some(&b'}')).then_some(offset + prefix)
        })
        .min()
}

/// 1-based line and UTF-16 column of a byte offset in `source`.
fn line_column(source: &str, offset: usize) -> (u32, u32) {
    let mut offset = offset.min(source.len());
    while !source.is_char_boundary(offset) {
        offset -= 1;
    }
    let mut line: u32 = 1;
    let mut column: u32 = 1;
    let mut previous_cr = false;
    for c in source[..offset].chars() {
        match c {
            '\n' if previous_cr => {}
            '\n' | '\r' | '\u{2028}' | '\u{2029}' => {
                line = line.saturating_add(1);
                column = 1;
            }
            _ => column = column.saturating_add(c.len_utf16() as u32),
        }
        previous_cr = c == '\r';
    }
    (line, column)
}

/// Sanitizes and clips parser text to [`MAX_PARSER_MESSAGE_CHARS`].
fn clip_parser_message(message: &str) -> String {
    let cleaned: String = message
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let cleaned = cleaned.trim().trim_end_matches('.').trim_end();
    let cleaned = if cleaned.is_empty() {
        "Invalid or unexpected token"
    } else {
        cleaned
    };
    if cleaned.chars().count() <= MAX_PARSER_MESSAGE_CHARS {
        return cleaned.to_owned();
    }
    let mut clipped: String = cleaned.chars().take(MAX_PARSER_MESSAGE_CHARS - 1).collect();
    clipped.push('…');
    clipped
}

// ---------------------------------------------------------------------------
// Syntax-tree scan: module declarations, module access, bindings
// ---------------------------------------------------------------------------

#[derive(Default)]
struct ModuleScan {
    /// Earliest `import`/`export` declaration: wrapped offset and message.
    module_declaration: Option<(u32, &'static str)>,
    /// A dynamic `import(…)` or a call of `require`.
    module_access: bool,
}

impl<'a> Visit<'a> for ModuleScan {
    fn visit_module_declaration(&mut self, it: &ModuleDeclaration<'a>) {
        let message = match it {
            ModuleDeclaration::ImportDeclaration(_) => {
                "Cannot use import statement outside a module"
            }
            _ => "Unexpected token 'export'",
        };
        let offset = it.span().start;
        if self.module_declaration.is_none_or(|(o, _)| offset < o) {
            self.module_declaration = Some((offset, message));
        }
        walk::walk_module_declaration(self, it);
    }

    fn visit_import_expression(&mut self, it: &ImportExpression<'a>) {
        self.module_access = true;
        walk::walk_import_expression(self, it);
    }

    fn visit_call_expression(&mut self, it: &CallExpression<'a>) {
        if is_require(&it.callee) {
            self.module_access = true;
        }
        walk::walk_call_expression(self, it);
    }

    fn visit_new_expression(&mut self, it: &NewExpression<'a>) {
        if is_require(&it.callee) {
            self.module_access = true;
        }
        walk::walk_new_expression(self, it);
    }

    fn visit_tagged_template_expression(&mut self, it: &TaggedTemplateExpression<'a>) {
        if is_require(&it.tag) {
            self.module_access = true;
        }
        walk::walk_tagged_template_expression(self, it);
    }
}

/// `true` if `callee` is the identifier `require` after unwrapping
/// parentheses and comma sequences (last element).
fn is_require(callee: &Expression<'_>) -> bool {
    let mut expression = callee;
    loop {
        match expression {
            Expression::ParenthesizedExpression(paren) => expression = &paren.expression,
            Expression::SequenceExpression(sequence) => match sequence.expressions.last() {
                Some(last) => expression = last,
                None => return false,
            },
            Expression::Identifier(identifier) => return identifier.name == "require",
            _ => return false,
        }
    }
}

/// Collects whether a binding with a given name exists anywhere.
struct BindingFinder<'w> {
    name: &'w str,
    found: bool,
}

impl<'a> Visit<'a> for BindingFinder<'_> {
    fn visit_binding_identifier(&mut self, it: &BindingIdentifier<'a>) {
        if it.name == self.name {
            self.found = true;
        }
    }
}

/// `true` when the source binds `name` (declaration, parameter, …).
fn source_declares(source: &str, ret: &ParserReturn<'_>, name: &str) -> bool {
    if !source.contains(name) {
        return false;
    }
    if !ret.panicked {
        let mut finder = BindingFinder { name, found: false };
        finder.visit_program(&ret.program);
        return finder.found;
    }
    // The parser gave up: fall back to a textual scan for declarations.
    let mut search = 0;
    while let Some(found) = source[search..].find(name) {
        let start = search + found;
        let end = start + name.len();
        search = end;
        if !word_boundary(source, start, end) {
            continue;
        }
        let before = source[..start].trim_end_matches([' ', '\t', '\n', '\r', '*']);
        let keyword = before
            .rsplit(|c: char| !is_ident_char(c))
            .next()
            .unwrap_or_default();
        if matches!(keyword, "var" | "let" | "const" | "function" | "class") {
            return true;
        }
    }
    false
}

// ---------------------------------------------------------------------------
// Step 1: shell-shaped source
// ---------------------------------------------------------------------------

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

fn is_never_command(word: &str) -> bool {
    KNOWN_GLOBALS.contains(&word)
}

/// What the shell rule matched.
#[derive(Debug, PartialEq, Eq)]
enum ShellHit<'s> {
    /// A form that is never valid JavaScript: reject.
    Always,
    /// A known command word used like a command: reject unless the word is
    /// a declared name or known global.
    Command(&'s str),
}

const LINE_ENDS: [char; 4] = ['\n', '\r', '\u{2028}', '\u{2029}'];

fn shell_shape(source: &str) -> Option<ShellHit<'_>> {
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
fn skip_comments(mut s: &str) -> Option<&str> {
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

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '$'
}

fn word_boundary(text: &str, start: usize, end: usize) -> bool {
    let before_ok = text[..start]
        .chars()
        .next_back()
        .is_none_or(|c| !is_ident_char(c));
    let after_ok = text[end..].chars().next().is_none_or(|c| !is_ident_char(c));
    before_ok && after_ok
}

/// `true` if `word` occurs in `text` as a whole word.
fn has_word(text: &str, word: &str) -> bool {
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
fn leading_word(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

fn trim_blank(s: &str) -> &str {
    s.trim_start_matches([' ', '\t'])
}

fn control_prefix(line: &str, rest: &str) -> bool {
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
const JS_PREFIX_WORDS: &[&str] = &[
    "await", "typeof", "void", "delete", "new", "yield", "async", "function", "class", "this",
    "super", "import",
];

/// JavaScript words that continue an expression after a space.
const JS_INFIX_WORDS: &[&str] = &["in", "instanceof", "of", "as", "satisfies"];

/// Length of a shell assignment value (a word with optional quoted parts).
/// `None` when a quote is unterminated or the value contains a backtick.
fn shell_value_len(s: &str) -> Option<usize> {
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

fn env_then_command(line: &str) -> bool {
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
fn could_be_regex(text: &str) -> bool {
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

fn is_path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "_.+@-".contains(c)
}

/// `/seg/seg…` with non-empty segments of path characters (trailing `/` ok).
fn absolute_path_shape(token: &str) -> bool {
    let Some(body) = token.strip_prefix('/') else {
        return false;
    };
    let body = body.strip_suffix('/').unwrap_or(body);
    !body.is_empty()
        && body
            .split('/')
            .all(|seg| !seg.is_empty() && seg.chars().all(is_path_char))
}

fn executable_path(line: &str) -> bool {
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

fn command_word<'s>(line: &'s str, rest: &'s str) -> Option<ShellHit<'s>> {
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
fn starts_shell_operator(s: &str) -> bool {
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
fn starts_argument(s: &str) -> bool {
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
    fn import_meta_is_a_syntax_error_at_meta() {
        let (line, column, message) = syntax("import.meta");
        assert_eq!((line, column), (1, 8));
        assert!(message.contains("import.meta"), "{message}");
        let (line, column, _) = syntax("return import.meta.url");
        assert_eq!((line, column), (1, 15));
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
