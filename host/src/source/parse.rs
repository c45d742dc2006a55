//! The oxc checks: parse the wrapped source, place syntax errors at the
//! user's `line:column`, find module access and the names a cell binds.

use super::*;

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
pub(super) fn cell_function(source: &str, program: &Program<'_>) -> String {
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
pub(super) fn wrapper_body<'p, 'a>(program: &'p Program<'a>) -> Option<&'p FunctionBody<'a>> {
    match &wrapper_arrow(program)?.1.body {
        ArrowFunctionBody::FunctionBody(body) => Some(&**body),
        _ => None,
    }
}

/// The parenthesized arrow function the program consists of, if it does.
pub(super) fn wrapper_arrow<'p, 'a>(
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
pub(super) fn top_level_bindings<'a>(body: &FunctionBody<'a>) -> Vec<&'a str> {
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
pub(super) fn unused_name(source: &str, base: &str) -> String {
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

pub(super) fn parse_options() -> ParseOptions {
    ParseOptions {
        parse_regular_expression: true,
        ..ParseOptions::default()
    }
}

pub(super) fn parse<'a>(allocator: &'a Allocator, wrapped: &'a str) -> ParserReturn<'a> {
    Parser::new(allocator, wrapped, SourceType::script())
        .with_options(parse_options())
        .parse()
}

// ---------------------------------------------------------------------------
// Step 2: syntax errors
// ---------------------------------------------------------------------------

/// A syntax error found in the wrapped text: byte offset and parser text.
pub(super) struct Found {
    offset: usize,
    message: String,
    /// The error points outside the user's source (into the wrapper).
    outside: bool,
}

pub(super) fn syntax_rejection(
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

pub(super) fn diagnostic_position(
    diagnostic: &OxcDiagnostic,
    prefix: usize,
    user_end: usize,
) -> Found {
    let label = diagnostic
        .labels
        .iter()
        .find(|label| label.primary())
        .or_else(|| diagnostic.labels.first());
    let start = label.map_or(user_end, |label| label.offset() as usize);
    let message = diagnostic.message.as_ref();
    if message.starts_with("Unexpected import.meta") {
        // At the start of `import.meta` (contract §7: `1:8` for
        // `return import.meta`), like a static `import` at its keyword.
        return Found {
            offset: start,
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
pub(super) fn wrapper_intact(program: &Program<'_>, wrapped_len: usize) -> bool {
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
pub(super) fn early_close(source: &str, wrapped: &str) -> Option<usize> {
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
pub(super) fn line_column(source: &str, offset: usize) -> (u32, u32) {
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
pub(super) fn clip_parser_message(message: &str) -> String {
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
pub(super) struct ModuleScan {
    /// Earliest `import`/`export` declaration: wrapped offset and message.
    pub(super) module_declaration: Option<(u32, &'static str)>,
    /// A dynamic `import(…)` or a call of `require`.
    pub(super) module_access: bool,
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
pub(super) fn is_require(callee: &Expression<'_>) -> bool {
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
pub(super) struct BindingFinder<'w> {
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
pub(super) fn source_declares(source: &str, ret: &ParserReturn<'_>, name: &str) -> bool {
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
