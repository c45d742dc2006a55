//! Source validation end to end: nothing runs when the source is refused.

use crate::{failed, run, value};
use quickcell::{ErrorCode, FailurePhase};
use serde_json::json;

async fn rejected(code: &str) -> String {
    let r = run(code).await;
    let f = failed(&r);
    assert_eq!(f.code, ErrorCode::InvalidInput, "{code}: {}", f.error);
    assert_eq!(f.failure_phase, FailurePhase::Input, "{code}");
    assert!(!f.bridge_dispatch_started);
    assert_eq!(r.telemetry().fuel_used, 0, "{code}: no guest code ran");
    assert!(r.output().is_empty());
    f.error.clone()
}

#[tokio::test]
async fn syntax_errors_report_user_positions() {
    let e = rejected("const a = 1;\nconst = 2;").await;
    assert!(e.starts_with("SyntaxError at quickcell:user.js:2:"), "{e}");
    assert!(
        e.ends_with("No tools were dispatched; correct the JavaScript source and submit it again."),
        "{e}"
    );
    let e = rejected("import fs from 'fs';").await;
    assert!(
        e.starts_with("SyntaxError at quickcell:user.js:1:1: "),
        "{e}"
    );
    let e = rejected("import.meta.url").await;
    assert!(
        e.starts_with("SyntaxError at quickcell:user.js:1:1: "),
        "{e}"
    );
    let e = rejected("return import.meta").await;
    assert!(
        e.starts_with("SyntaxError at quickcell:user.js:1:8: "),
        "{e}"
    );
    let e = rejected("let x: number = 1;").await;
    assert!(
        e.starts_with("SyntaxError at quickcell:user.js:1:"),
        "TypeScript is a syntax error: {e}"
    );
    let long = format!("let {} = ;", "a".repeat(10_000));
    let e = rejected(&long).await;
    assert!(e.len() < 500, "{}", e.len());
}

#[tokio::test]
async fn module_access_forms_are_rejected() {
    for code in [
        "require('fs')",
        "const m = await import('fs')",
        "r\\u0065quire('fs')",
        "(require)('fs')",
        "require?.('fs')",
        "(0, require)('fs')",
        "`${`${require('x')}`}`",
        "class A { #p = 1; m() { return require('x'); } }",
        "require /* c */ ('fs')",
    ] {
        let e = rejected(code).await;
        assert!(
            e.starts_with("code mode module access is disabled."),
            "{code}: {e}"
        );
    }
}

#[tokio::test]
async fn lookalikes_are_allowed() {
    let r = run(r#"
        const x = { import() { return 1; }, require() { return 2; } };
        const api = { import: { meta: 3 } };
        const s = "require('fs')"; const t = `import('x')`; const re = /require\(/;
        // require('fs')
        return [x.import(), x?.import?.(), x["require"](), api.import.meta, s.length, t.length, re.test("require(")];
    "#)
    .await;
    assert_eq!(value(&r), json!([1, 1, 2, 3, 13, 11, true]));
}

#[tokio::test]
async fn shell_shaped_source_is_rejected() {
    for code in [
        "ls -la",
        "#!/bin/sh\necho hi",
        "git status && git diff",
        "FOO=1 npm test",
        "./build.sh --fast",
        "cat README.md | head",
    ] {
        let e = rejected(code).await;
        assert!(
            e.ends_with("Do not retry the same shell command as code."),
            "{code}: {e}"
        );
    }
}

#[tokio::test]
async fn javascript_that_looks_like_shell_passes() {
    let r = run("const ls = [1, 2]; const cat = 3; return ls.length - cat;").await;
    assert_eq!(value(&r), json!(-1));
}
