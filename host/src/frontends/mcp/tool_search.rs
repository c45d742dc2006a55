//! Structured Tool Search over MCP (`serve --mode tools`, tool-search.md
//! §9–10): `tool_search`, `tool_describe` and `tool_call` over a runtime's
//! catalog and tool implementations, without cells.

use crate::Runtime;

/// What a structured Tool Search operation returns to an MCP client.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CatalogReply {
    /// The structured value (`structuredContent`).
    pub value: serde_json::Value,
    /// Model-facing text; wrapped as untrusted when it carries MCP or client
    /// content.
    pub text: String,
    /// Whether the operation failed.
    pub is_error: bool,
}

impl CatalogReply {
    fn error(message: impl Into<String>) -> Self {
        let message = message.into();
        Self {
            value: serde_json::json!({ "error": message }),
            text: message,
            is_error: true,
        }
    }

    fn ok(value: serde_json::Value, untrusted: Option<&str>) -> Self {
        let text = value.to_string();
        Self {
            text: match untrusted {
                Some(source) => quickcell_catalog::wrap_untrusted(source, &text),
                None => text,
            },
            value,
            is_error: false,
        }
    }
}

impl Runtime {
    /// `tool_search` (tool-search.md §10) over this runtime's catalog.
    pub(crate) fn tool_search(&self, args: &serde_json::Value) -> CatalogReply {
        let catalog = &self.cell_tools().catalog;
        match catalog.tool_search(args) {
            Ok(hits) => {
                // Hits of MCP or client tools carry their untrusted descriptions.
                let untrusted = hits["results"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .flat_map(|g| g["hits"].as_array().into_iter().flatten())
                    .filter_map(|h| match h["source"].as_str() {
                        Some("host") | None => None,
                        Some(other) => Some(other.to_owned()),
                    })
                    .max_by_key(|source| source == "mcp");
                CatalogReply::ok(hits, untrusted.as_deref())
            }
            Err(e) => CatalogReply::error(e.to_string()),
        }
    }

    /// `tool_describe` (tool-search.md §9.1) over this runtime's catalog.
    pub(crate) fn tool_describe(&self, args: &serde_json::Value) -> CatalogReply {
        let catalog = &self.cell_tools().catalog;
        match catalog.tool_describe(args) {
            Ok(description) => {
                let source = description["source"]
                    .as_str()
                    .unwrap_or("mcp") // an MCP description has no `source`
                    .to_owned();
                let untrusted = (source != "host").then_some(source.as_str());
                CatalogReply::ok(description.clone(), untrusted)
            }
            Err(e) => CatalogReply::error(e.to_string()),
        }
    }

    /// `tool_call` (tool-search.md §9): resolves, repairs and validates the
    /// call, then runs the tool through the same implementations cells
    /// reach. Bounded by the tool's own caps (a command tool's or MCP
    /// server's `timeout_ms`), not by `timeoutMs`: there is no cell to park.
    /// A call the policy's `approve` list matches asks the request's
    /// approver (MCP elicitation), else the runtime's, else is denied; the
    /// request's cancellation withdraws the question and sends the tool its
    /// cancel signal.
    pub(crate) async fn tool_call(
        &self,
        args: &serde_json::Value,
        session: &str,
        control: super::CallControl,
    ) -> CatalogReply {
        let tools = &self.cell_tools();
        let prepared = match tools.catalog.tool_call_prepare(args) {
            Ok(p) => p,
            Err(e) => return CatalogReply::error(e.to_string()),
        };
        let Some(tool) = tools.implementation(&prepared) else {
            return CatalogReply::error(format!(
                "Unknown tool: {}. Use tool_search to find tools.",
                prepared.tool_name
            ));
        };
        if let Some(pattern) = tools.approval_pattern(&prepared.id) {
            let Some(approvals) = self.approvals_for(control.approver.clone(), session) else {
                return CatalogReply::error(crate::approval::approval_denied(
                    &prepared.display_name,
                    pattern,
                ));
            };
            let request = crate::approval::ApprovalRequest {
                tool: prepared.display_name.clone(),
                pattern: pattern.to_string(),
                arguments_preview: crate::approval::preview(&prepared.arguments),
                session: session.to_string(),
            };
            let decided = tokio::select! {
                decided = approvals.ask(request) => decided,
                () = control.cancel.cancelled() => Err("the call was cancelled while it waited for an approval".to_string()),
            };
            if let Err(declined) = decided {
                return CatalogReply::error(declined);
            }
        }
        let untrusted = match prepared.source {
            quickcell_catalog::SourceKind::Host => None,
            other => Some(other.as_str()),
        };
        // Its own task, so that a panicking tool fails this call alone.
        let arguments = prepared.arguments.clone();
        let cancel = control.cancel.child_token();
        let _cancel_on_drop = cancel.clone().drop_guard();
        let call = tokio::spawn(async move { tool.call(arguments, cancel).await });
        match call.await {
            Ok(Ok(value)) => {
                match tools
                    .catalog
                    .check_output(&prepared.id, &prepared.display_name, &value)
                {
                    Ok(()) => CatalogReply::ok(value, untrusted),
                    Err(e) => CatalogReply::error(e.to_string()),
                }
            }
            Ok(Err(e)) => {
                let text = match untrusted {
                    Some(source) => quickcell_catalog::wrap_untrusted(source, &e.message),
                    None => e.message.clone(),
                };
                CatalogReply {
                    value: serde_json::json!({"error": e.message, "code": e.code.as_str()}),
                    text,
                    is_error: true,
                }
            }
            Err(_) => CatalogReply::error("the tool failed unexpectedly (it panicked)"),
        }
    }
}
