//! [`CellService`] implemented for [`Runtime`]: what the MCP server asks
//! of quickcell, and where it keeps its task records.

use super::tasks;
use super::{CallControl, CatalogOperation, CatalogReply, CellService};
use crate::result::CellResult;
use crate::store::Owner;
use crate::Runtime;

/// One MCP session is both the agent run and the session of its cells.
fn session_owner(session: &str) -> Owner {
    Owner {
        agent_run: session.to_string(),
        session: session.to_string(),
    }
}

#[async_trait::async_trait]
impl CellService for Runtime {
    async fn exec(&self, session: &str, args: serde_json::Value, call: CallControl) -> CellResult {
        self.exec_json_controlled(session_owner(session), &args, |input| {
            input.with_controls(call.into())
        })
        .await
    }

    async fn wait(&self, session: &str, args: serde_json::Value, call: CallControl) -> CellResult {
        let answers = call.approval_answers.clone();
        self.wait_json_controlled(session_owner(session), &args, |input| {
            input
                .with_approval_answers(answers)
                .with_controls(call.into())
        })
        .await
    }

    fn request_state_key(&self) -> [u8; 32] {
        self.signing_key(b"quickcell mcp request state v1")
    }

    fn approval_timeout_ms(&self) -> u64 {
        Runtime::approval_timeout_ms(self)
    }

    async fn close_session(&self, session: &str) {
        match Runtime::close_session(self, &session_owner(session)).await {
            Ok(closed) => tracing::debug!(session, ?closed, "MCP session closed"),
            Err(e) => {
                tracing::warn!(session, error = %e.chain_message(), "cannot release a closed MCP session")
            }
        }
    }

    async fn task_record(
        &self,
        scope: &str,
        task_id: &str,
    ) -> Result<Option<tasks::TaskRecord>, String> {
        let value = self
            .session_value(&tasks::records_session(scope), task_id)
            .await
            .map_err(|e| e.chain_message())?;
        let record: Option<tasks::TaskRecord> = value
            .map(serde_json::from_value)
            .transpose()
            .map_err(|e| format!("a task record is unreadable: {e}"))?;
        let Some(mut record) = record else {
            return Ok(None);
        };
        // The result is kept apart, so that listing records stays small.
        if record.status == rmcp::model::TaskStatus::Completed {
            record.result = self
                .session_value(&tasks::results_session(scope), task_id)
                .await
                .map_err(|e| e.chain_message())?;
        }
        Ok(Some(record))
    }

    async fn set_task_record(
        &self,
        scope: &str,
        task_id: &str,
        record: Option<&tasks::TaskRecord>,
    ) -> Result<(), String> {
        // The result first: a completed record always finds it.
        let result = record.and_then(|r| r.result.clone());
        if result.is_some() || record.is_none() {
            self.set_session_values(
                &tasks::results_session(scope),
                vec![(task_id.to_string(), result)],
            )
            .await
            .map_err(|e| e.chain_message())?;
        }
        let value = record.and_then(|r| {
            let mut status = r.clone();
            status.result = None;
            serde_json::to_value(status).ok()
        });
        self.set_session_values(
            &tasks::records_session(scope),
            vec![(task_id.to_string(), value)],
        )
        .await
        .map_err(|e| e.chain_message())
    }

    async fn task_records(&self, scope: &str) -> Result<Vec<(String, tasks::TaskRecord)>, String> {
        let values = self
            .session_values(&tasks::records_session(scope))
            .await
            .map_err(|e| e.chain_message())?;
        Ok(values
            .into_iter()
            .filter_map(|(id, v)| Some((id, serde_json::from_value(v).ok()?)))
            .collect())
    }

    async fn refresh_gauges(&self) {
        if let Err(e) = self.parked_runs().await {
            tracing::warn!(error = %e.chain_message(), "cannot count the parked runs for /metrics");
        }
    }

    fn exec_description(&self) -> String {
        Runtime::exec_description(self)
    }

    fn directory(&self) -> String {
        self.catalog().directory()
    }

    async fn catalog_operation(
        &self,
        session: &str,
        operation: CatalogOperation,
        args: serde_json::Value,
        call: CallControl,
    ) -> CatalogReply {
        use CatalogOperation as Op;
        match operation {
            Op::Search => self.tool_search(&args),
            Op::Describe => self.tool_describe(&args),
            Op::Call => self.tool_call(&args, session, call).await,
        }
    }
}
