//! Tool calls (`callValue {callable, input}`): resolved, repaired and
//! validated by the catalog, refused in a `restartSafe` cell when the tool
//! is not replay-safe, then run by the tool's implementation.

use super::catalog::CellTools;
use super::settlement::{catalog_err, err, malformed, ok};
use super::{Start, Work};
use crate::approval::{approval_denied, ApprovalRequest, Approvals};
use crate::tools::ToolErrorCode;
use quickcell_catalog::SourceKind;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

/// Message of a restart-safe cell calling a tool that is not replay-safe.
pub(crate) const RESTART_SAFE_UNSAFE_TOOL: &str = "restart-safe code mode cannot call tool surfaces that are not proven replay-safe; use audited read, grep, or find tools.";

/// Message of a restart-safe cell calling an MCP (namespace) tool.
pub(crate) const RESTART_SAFE_NAMESPACE_CALL: &str =
    "restart-safe code mode cannot call namespace tools.";

/// The error of a call, in a cell resumed under another policy, to a tool
/// that policy no longer lets it see (operations.md §3.3). Uncaught, it
/// fails the cell with code `aborted`.
pub(crate) const PERMISSION_CHANGED: &str = "Permission change interrupted this Code Mode program";

/// The settlement of a call cancelled while it waited for its approval
/// (nobody sees it: its cell has ended).
const CANCELLED_WHILE_AWAITING_APPROVAL: &str =
    "the call was cancelled while it waited for an approval";

/// How the cell making a call runs.
#[derive(Clone, Copy)]
pub(crate) struct CallContext<'a> {
    /// The cell is `restartSafe`.
    pub restart_safe: bool,
    /// Who decides approvals, if anyone can.
    pub approvals: Option<&'a Approvals>,
    /// The cell resumed under other tools than it parked with.
    pub catalog_changed: bool,
    /// The caller approved this call already (a deferred approval).
    pub approved: bool,
}

/// Arguments of a `callValue` request.
#[derive(serde::Deserialize)]
struct CallValueArgs {
    callable: String,
    #[serde(default)]
    input: Option<Value>,
}

/// The `callable` of a `callValue` request's arguments (what the cell
/// called), for progress reports; `None` when they do not parse.
pub(crate) fn callable(args_json: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Callable {
        callable: String,
    }
    serde_json::from_str::<Callable>(args_json)
        .ok()
        .map(|c| c.callable)
}

/// Starts a tool call. A tool that answers without waiting (a lookup, a
/// no-op, anything done in its first poll) settles with this batch.
pub(crate) fn start(
    tools: &CellTools,
    context: CallContext<'_>,
    id: u64,
    args_json: &str,
) -> Start {
    let CallContext {
        restart_safe,
        approvals,
        catalog_changed,
        approved,
    } = context;
    let CallValueArgs { callable, input } = match serde_json::from_str(args_json) {
        Ok(args) => args,
        Err(e) => return Start::Settled(malformed(id, e)),
    };
    let callable = callable.as_str();
    let prepared = match tools
        .catalog
        .guest_prepare_call(&tools.projection, callable, input)
    {
        Ok(p) => p,
        Err(e) if catalog_changed && e.kind == quickcell_catalog::ErrorKind::UnknownCallable => {
            return Start::Settled(err(id, PERMISSION_CHANGED, "aborted"))
        }
        Err(e) => return Start::Settled(catalog_err(id, e)),
    };
    if prepared.source == SourceKind::Mcp && restart_safe {
        return Start::Settled(err(id, RESTART_SAFE_NAMESPACE_CALL, "invalid_input"));
    }
    let Some(tool) = tools.implementation(&prepared) else {
        return Start::Settled(err(
            id,
            format!("Unknown catalog function: {callable}."),
            "invalid_input",
        ));
    };
    // The catalog's mark: only trusted host tools carry it.
    let replay_safe = prepared.replay_safe;
    if restart_safe && !replay_safe {
        return Start::Settled(err(id, RESTART_SAFE_UNSAFE_TOOL, "invalid_input"));
    }
    // The caller runs a declared client tool: approving it is the caller's
    // business.
    if tools.is_declared_client_tool(&prepared) {
        return Start::Client {
            tool: prepared.tool_name,
            input: prepared.arguments,
        };
    }
    let pattern = tools.approval_pattern(&prepared.id).filter(|_| !approved);
    let approval = match (pattern, approvals) {
        (None, _) => None,
        (Some(pattern), None) => {
            return Start::Settled(err(
                id,
                approval_denied(&prepared.display_name, pattern),
                "tool_error",
            ))
        }
        (Some(pattern), Some(approvals))
            if matches!(approvals.decider, crate::approval::Decider::Caller) =>
        {
            return Start::Deferred(super::DeferredApproval {
                tool: prepared.display_name.clone(),
                pattern: pattern.to_string(),
                arguments: crate::approval::preview(&prepared.arguments),
                call: None,
            });
        }
        (Some(pattern), Some(approvals)) => Some((
            approvals.clone(),
            ApprovalRequest {
                tool: prepared.display_name.clone(),
                pattern: pattern.to_string(),
                arguments_preview: crate::approval::preview(&prepared.arguments),
                session: approvals.session.clone(),
            },
        )),
    };
    let (tool_name, tool_source) = (prepared.display_name.clone(), prepared.source.as_str());
    let token = CancellationToken::new();
    let catalog = tools.catalog.clone();
    let call_token = token.clone();
    let call = async move {
        if let Some((approvals, request)) = approval {
            // A cell that ends (cancelled, aborted, failed) while its call
            // waits for a decision withdraws the question, and a late
            // approval never runs the tool.
            let decided = tokio::select! {
                decided = approvals.ask(request) => decided,
                () = call_token.cancelled() => Err(CANCELLED_WHILE_AWAITING_APPROVAL.to_string()),
            };
            if let Err(declined) = decided {
                return err(id, declined, "tool_error");
            }
            if call_token.is_cancelled() {
                return err(id, CANCELLED_WHILE_AWAITING_APPROVAL, "tool_error");
            }
        }
        let name = prepared.display_name.clone();
        match tool.call(prepared.arguments, call_token).await {
            Ok(value) => match catalog.check_output(&prepared.id, &name, &value) {
                Ok(()) => ok(id, value),
                Err(e) => catalog_err(id, e),
            },
            Err(e) => {
                let code = match e.code {
                    ToolErrorCode::InvalidInput => "invalid_input",
                    _ => "tool_error",
                };
                err(id, e.message, code)
            }
        }
    };
    let span = tracing::info_span!(
        "tool_call",
        tool = %tool_name,
        source = tool_source,
        outcome = tracing::field::Empty,
        ms = tracing::field::Empty,
    );
    let call = async move {
        let started = std::time::Instant::now();
        let settlement = call.await;
        let took = started.elapsed();
        let span = tracing::Span::current();
        span.record("ms", took.as_millis() as u64);
        span.record("outcome", if settlement.ok { "ok" } else { "error" });
        crate::instruments::tool_call_finished(tool_source, settlement.ok, took);
        settlement
    }
    .instrument(span);
    Start::Work(Work {
        future: Box::pin(call),
        token: Some(token),
        replay_safe,
        poll_first: true,
        due_unix_ms: None,
    })
}
