//! The Tasks extension of MCP 2026-07-28 (`io.modelcontextprotocol/tasks`)
//! for `exec`: a cell that parks becomes a task the server drives to its
//! end, whose state any host sharing the store answers for.
//!
//! - **When.** A 2026-07-28 `tools/call exec` of a principal (see
//!   [`super::McpServer::scope`]) whose request declares the extension in
//!   its client capabilities, and whose cell parks on tools (or yields),
//!   answers `CreateTaskResult` instead of `{status: "waiting"}`. A cell
//!   that ends within the call answers its result as usual, and one that
//!   waits on the client's own tools answers `waiting` (its calls are
//!   answered with `wait`, as always).
//! - **Identity.** The task id is the run id. Its record — status, times,
//!   TTL, final result — is kept in the state store (session
//!   `tasks:<scope>`, one key per task), written before `CreateTaskResult`
//!   goes out, so `tasks/get` resolves on every host at once.
//! - **Driving.** A task is driven by `wait` calls in the background of the
//!   host that created it until the cell ends; its record then holds the
//!   `exec` result (`completed`, also for a failed cell: `failed` is for
//!   protocol errors only). A host that stops leaves the run parked: the
//!   next `tasks/get` for it, on any host, takes it over (a run is resumed
//!   by one host at a time).
//! - **Approvals.** A task's cell defers its approvals to the client when
//!   the creating request declared form elicitation ([`super::approvals`]):
//!   a call that needs one parks the cell and the task goes
//!   `input_required`, its `inputRequests` in the record, and nothing
//!   drives it. `tasks/update` with `inputResponses` (on any host) sets it
//!   `working` again, records the answers beside it and resumes the run
//!   with them (a host whose `tasks/get` takes the run over meanwhile
//!   resumes it with the same answers; the run applies them once); responses to
//!   keys the task does not ask about are ignored, and a task that asks
//!   nothing acknowledges and stays as it is.
//! - **Cancel.** `tasks/cancel` cancels the run (`aborted`) on whichever
//!   host holds it and marks the task `cancelled`; acknowledged at once,
//!   also for a task that has ended.
//! - **Expiry.** A task lives [`crate::McpOptions::task_ttl_ms`] from its
//!   creation; then `tasks/get` answers `-32602` and the record goes. At
//!   most [`MAX_TASKS_PER_SCOPE`] are kept per principal; past that, a cell
//!   that parks answers `waiting` as without the extension.

use rmcp::model::{
    CreateTaskResult, DetailedTask, ErrorCode, InputRequests, InputResponses, JsonObject, Task,
    TaskPayload, TaskStatus,
};
use rmcp::ErrorData;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use super::{CallControl, CellService};
use crate::result::CellResult;

/// Most task records kept per principal (working and ended, until they
/// expire).
pub const MAX_TASKS_PER_SCOPE: usize = 256;

/// The poll interval a task suggests, in milliseconds.
pub(crate) const TASK_POLL_INTERVAL_MS: u64 = 1_000;

/// A task as the state store keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct TaskRecord {
    pub(crate) status: TaskStatus,
    pub(crate) created_ms: u64,
    pub(crate) updated_ms: u64,
    pub(crate) ttl_ms: u64,
    /// The `exec` result (a `CallToolResult`), once completed.
    #[serde(default)]
    pub(crate) result: Option<Value>,
    /// The JSON-RPC error, once failed.
    #[serde(default)]
    pub(crate) error: Option<Value>,
    /// The `inputRequests`, while `input_required`.
    #[serde(default)]
    pub(crate) input_requests: Option<InputRequests>,
    /// The client answers approvals (it declared form elicitation).
    #[serde(default)]
    pub(crate) elicits: bool,
    /// Answers `tasks/update` recorded, for whichever driver resumes the
    /// run next (one that finds them applied already drops them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) answers: Vec<StoredAnswer>,
}

/// An approval answer as a task record keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct StoredAnswer {
    id: String,
    approve: bool,
    #[serde(default)]
    reason: Option<String>,
}

impl StoredAnswer {
    fn of(answer: &crate::ApprovalAnswer) -> Self {
        let (approve, reason) = match &answer.decision {
            crate::Approval::Approve => (true, None),
            crate::Approval::Decline { reason } => (false, reason.clone()),
        };
        Self {
            id: answer.id.clone(),
            approve,
            reason,
        }
    }

    fn answer(&self) -> crate::ApprovalAnswer {
        if self.approve {
            crate::ApprovalAnswer::approve(self.id.clone())
        } else {
            crate::ApprovalAnswer::decline(self.id.clone(), self.reason.clone())
        }
    }
}

impl TaskRecord {
    fn expired(&self, now_ms: u64) -> bool {
        now_ms >= self.created_ms.saturating_add(self.ttl_ms)
    }

    /// The task as `tasks/get` reports it.
    pub(crate) fn detailed(&self, task_id: &str) -> DetailedTask {
        let object = |v: &Option<Value>| match v {
            Some(Value::Object(map)) => map.clone(),
            _ => JsonObject::new(),
        };
        let payload = match self.status {
            TaskStatus::Completed => TaskPayload::Completed {
                result: object(&self.result),
            },
            TaskStatus::Failed => TaskPayload::Failed {
                error: object(&self.error),
            },
            TaskStatus::Cancelled => TaskPayload::Cancelled,
            TaskStatus::InputRequired => TaskPayload::InputRequired {
                input_requests: self.input_requests.clone().unwrap_or_default(),
            },
            _ => TaskPayload::Working,
        };
        DetailedTask::new(self.task(task_id), payload)
    }

    fn task(&self, task_id: &str) -> Task {
        Task::new(
            task_id,
            self.status,
            iso_time(self.created_ms),
            iso_time(self.updated_ms),
        )
        .with_ttl_ms(self.ttl_ms)
        .with_poll_interval_ms(TASK_POLL_INTERVAL_MS)
    }
}

/// Unix milliseconds as ISO 8601 (`2026-12-05T00:14:11.123Z`).
fn iso_time(ms: u64) -> String {
    chrono::DateTime::from_timestamp_millis(i64::try_from(ms).unwrap_or(i64::MAX))
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn now_ms() -> u64 {
    crate::clock::unix_ms()
}

/// The session of the state store that keeps a scope's task records.
pub(crate) fn records_session(scope: &str) -> String {
    format!("tasks:{scope}")
}

/// The session of the state store that keeps the results of a scope's
/// completed tasks (apart from the records, which stay small).
pub(crate) fn results_session(scope: &str) -> String {
    format!("task-results:{scope}")
}

/// The runs this process drives as tasks (one driver per run).
#[derive(Default)]
pub(crate) struct TaskDrivers {
    driving: Mutex<HashSet<String>>,
}

/// The error of a task id that names no live task of the caller.
pub(crate) fn unknown_task(task_id: &str) -> ErrorData {
    ErrorData::invalid_params(format!("unknown or expired task: {task_id}"), None)
}

/// The error of a `tasks/*` request from a client that did not declare
/// the extension.
pub(crate) fn tasks_not_declared() -> ErrorData {
    ErrorData::new(
        ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY,
        "the request does not declare the io.modelcontextprotocol/tasks extension",
        Some(
            json!({"requiredCapabilities": {"extensions": {rmcp::model::TASKS_EXTENSION_ID: {}}}}),
        ),
    )
}

/// How a task begins.
pub(crate) struct NewTask<'a> {
    /// The parked run, whose id the task takes.
    pub(crate) run_id: &'a str,
    /// Its time to live, in milliseconds.
    pub(crate) ttl_ms: u64,
    /// The client answers approvals.
    pub(crate) elicits: bool,
    /// The approvals the run waits for (`input_required`), if it does.
    pub(crate) asking: Option<InputRequests>,
}

/// Makes the parked run `task.run_id` of `scope` a task, or `None` when it
/// cannot be kept (the scope's task cap, a store that fails): the caller
/// then answers as without the extension. The record is written before
/// this returns; the driver starts, unless the task waits for input.
pub(crate) async fn create<S: CellService>(
    service: &Arc<S>,
    drivers: &Arc<TaskDrivers>,
    scope: &str,
    task: NewTask<'_>,
) -> Option<CreateTaskResult> {
    let NewTask {
        run_id,
        ttl_ms,
        elicits,
        asking,
    } = task;
    let now = now_ms();
    // Expired records go first.
    let records = service.task_records(scope).await.ok()?;
    let mut live = 0;
    for (id, record) in records {
        if record.expired(now) {
            if !record.status.is_terminal() {
                cancel_run(&**service, scope, &id).await;
            }
            let _ = service.set_task_record(scope, &id, None).await;
        } else {
            live += 1;
        }
    }
    if live >= MAX_TASKS_PER_SCOPE {
        return None;
    }
    let record = TaskRecord {
        status: if asking.is_some() {
            TaskStatus::InputRequired
        } else {
            TaskStatus::Working
        },
        created_ms: now,
        updated_ms: now,
        ttl_ms,
        result: None,
        error: None,
        input_requests: asking,
        elicits,
        answers: Vec::new(),
    };
    service
        .set_task_record(scope, run_id, Some(&record))
        .await
        .ok()?;
    if record.status == TaskStatus::Working {
        drive(
            service.clone(),
            drivers.clone(),
            scope.into(),
            run_id.into(),
        );
    }
    Some(CreateTaskResult::new(record.task(run_id)))
}

/// Drives the task `run_id` of `scope` to its end (or its next question)
/// in the background, resuming it first with the answers its record holds,
/// unless this process drives it already.
pub(crate) fn drive<S: CellService>(
    service: Arc<S>,
    drivers: Arc<TaskDrivers>,
    scope: String,
    run_id: String,
) {
    if !super::lock(&drivers.driving).insert(run_id.clone()) {
        return;
    }
    tokio::spawn(async move {
        // Forgotten however the driver ends (a panic too).
        let _driving = Driving(drivers, run_id.clone());
        run_to_end(&*service, &scope, &run_id).await;
    });
}

/// A run this process drives; forgotten when dropped.
struct Driving(Arc<TaskDrivers>, String);

impl Drop for Driving {
    fn drop(&mut self) {
        super::lock(&self.0.driving).remove(&self.1);
    }
}

/// Pause before resuming a task whose cell yielded, in milliseconds: a
/// cell that yields forever costs its host at most a few resumes a
/// second, until its TTL.
const YIELD_RESUME_PAUSE_MS: u64 = 250;

/// How long a driver that finds its run gone waits for the host that
/// finished it to record the end, before it records the task as failed,
/// in milliseconds.
const GONE_GRACE_MS: u64 = 2_000;

/// Cancels the run `run_id` of `scope`; whether it is gone now (aborted,
/// or there was none).
async fn cancel_run<S: CellService>(service: &S, scope: &str, run_id: &str) -> bool {
    let control = CallControl {
        conceal_owners: true,
        ..CallControl::default()
    };
    let result = service
        .wait(scope, json!({"runId": run_id, "cancel": true}), control)
        .await;
    match &result {
        CellResult::Failed(failed) => {
            failed.code == crate::ErrorCode::Aborted || failed.error.starts_with(RUN_GONE)
        }
        _ => false,
    }
}

/// How a `wait` for a run that is not there (any more) begins.
const RUN_GONE: &str = "code mode run is unavailable or expired";

async fn run_to_end<S: CellService>(service: &S, scope: &str, run_id: &str) {
    let Ok(Some(record)) = service.task_record(scope, run_id).await else {
        return;
    };
    let mut answers: Vec<crate::ApprovalAnswer> =
        record.answers.iter().map(StoredAnswer::answer).collect();
    let expires_ms = record.created_ms.saturating_add(record.ttl_ms);
    let pause = |ms| tokio::time::sleep(std::time::Duration::from_millis(ms));
    let result = loop {
        // A task does not run past its TTL (a cell that yields forever
        // would): its run is cancelled and its record goes.
        if now_ms() >= expires_ms {
            cancel_run(service, scope, run_id).await;
            let _ = service.set_task_record(scope, run_id, None).await;
            return;
        }
        let answering = !answers.is_empty();
        let control = CallControl {
            conceal_owners: true,
            defer_approvals: record.elicits,
            approval_answers: std::mem::take(&mut answers),
            ..CallControl::default()
        };
        let result = service.wait(scope, json!({"runId": run_id}), control).await;
        match &result {
            // Calls wait for the client's approval: the task asks.
            CellResult::Waiting(waiting) if waiting.reason == crate::WaitReason::Approval => {
                let Ok(Some(mut record)) = service.task_record(scope, run_id).await else {
                    return;
                };
                if record.status.is_terminal() {
                    return;
                }
                record.status = TaskStatus::InputRequired;
                record.input_requests = Some(super::approvals::input_requests(
                    &waiting.pending_tool_calls,
                ));
                record.answers.clear();
                record.updated_ms = now_ms();
                if let Err(e) = service.set_task_record(scope, run_id, Some(&record)).await {
                    tracing::warn!(run_id, error = %e, "cannot record a task's question");
                }
                return;
            }
            // Answers an earlier resume applied already (the run stays as
            // it was): dropped, and the run resumed without them.
            CellResult::Failed(failed)
                if answering
                    && failed.code == crate::ErrorCode::InvalidInput
                    && failed
                        .error
                        .contains("waits for an approval (answered already") =>
            {
                if let Ok(Some(mut record)) = service.task_record(scope, run_id).await {
                    if !record.answers.is_empty() {
                        record.answers.clear();
                        let _ = service.set_task_record(scope, run_id, Some(&record)).await;
                    }
                }
            }
            CellResult::Waiting(waiting) if waiting.reason == crate::WaitReason::Yield => {
                pause(YIELD_RESUME_PAUSE_MS).await;
            }
            // Parked again on tools: resume it again.
            CellResult::Waiting(waiting) if waiting.reason != crate::WaitReason::ClientTools => {}
            CellResult::Failed(failed)
                if matches!(
                    failed.code,
                    crate::ErrorCode::RuntimeUnavailable
                        | crate::ErrorCode::InternalError
                        | crate::ErrorCode::SnapshotIncompatible
                ) || failed.error.contains("already being resumed") =>
            {
                // This host stops, the store failed, another host drives
                // the run, or only a host of another guest build can
                // resume it: the record stays working, for whoever resumes
                // it next (a `tasks/get` does).
                return;
            }
            // The principal runs its share of cells at once: later.
            CellResult::Failed(failed)
                if failed.error.starts_with("too many running code mode cells") =>
            {
                pause(TASK_POLL_INTERVAL_MS).await;
            }
            CellResult::Failed(failed) if failed.code == crate::ErrorCode::QuotaExceeded => {
                // Refused before it ran: the run goes, the task ends with
                // the refusal.
                cancel_run(service, scope, run_id).await;
                break result;
            }
            _ => break result,
        }
    };
    let gone = matches!(&result, CellResult::Failed(f) if f.error.starts_with(RUN_GONE));
    if gone {
        // Another host may have just finished the run: its record wins.
        pause(GONE_GRACE_MS).await;
    }
    let Ok(Some(mut record)) = service.task_record(scope, run_id).await else {
        return;
    };
    // A cancel stands; an end another host recorded stands against a
    // run found gone; the run's own result replaces a `failed` written by
    // a host that found it gone.
    let keep = match record.status {
        TaskStatus::Cancelled | TaskStatus::Completed => true,
        TaskStatus::Failed => gone,
        _ => false,
    };
    if keep {
        return;
    }
    record.updated_ms = now_ms();
    if gone {
        record.status = TaskStatus::Failed;
        record.error = Some(
            json!({"code": ErrorCode::INTERNAL_ERROR.0, "message": "the task's run is gone (expired, or cancelled outside the task)"}),
        );
    } else {
        record.status = TaskStatus::Completed;
        record.error = None;
        record.result = serde_json::to_value(super::tool_result(result)).ok();
    }
    if let Err(e) = service.set_task_record(scope, run_id, Some(&record)).await {
        tracing::warn!(run_id, error = %e, "cannot record a task's end");
    }
}

/// The live record of task `task_id` of `scope`, or the unknown-task
/// error (an expired record is removed).
pub(crate) async fn live_record<S: CellService>(
    service: &S,
    scope: &str,
    task_id: &str,
) -> Result<TaskRecord, ErrorData> {
    let record = service
        .task_record(scope, task_id)
        .await
        .map_err(|e| ErrorData::internal_error(format!("cannot read the task: {e}"), None))?
        .ok_or_else(|| unknown_task(task_id))?;
    if record.expired(now_ms()) {
        if !record.status.is_terminal() {
            cancel_run(service, scope, task_id).await;
        }
        let _ = service.set_task_record(scope, task_id, None).await;
        return Err(unknown_task(task_id));
    }
    Ok(record)
}

/// `tasks/update`: answers the approvals an `input_required` task asks
/// about and resumes its run; anything else is acknowledged and ignored.
pub(crate) async fn update<S: CellService>(
    service: &Arc<S>,
    drivers: &Arc<TaskDrivers>,
    scope: &str,
    task_id: &str,
    responses: &InputResponses,
) -> Result<(), ErrorData> {
    let mut record = live_record(&**service, scope, task_id).await?;
    let Some(asked) = record
        .input_requests
        .as_ref()
        .filter(|_| record.status == TaskStatus::InputRequired)
    else {
        return Ok(());
    };
    let answers = super::approvals::answers(asked.keys().map(String::as_str), responses);
    if answers.is_empty() {
        return Ok(());
    }
    record.status = TaskStatus::Working;
    record.input_requests = None;
    record.answers = answers.iter().map(StoredAnswer::of).collect();
    record.updated_ms = now_ms();
    service
        .set_task_record(scope, task_id, Some(&record))
        .await
        .map_err(|e| ErrorData::internal_error(format!("cannot record the answer: {e}"), None))?;
    drive(
        service.clone(),
        drivers.clone(),
        scope.to_string(),
        task_id.to_string(),
    );
    Ok(())
}

/// `tasks/cancel`: cancels a working task's run and marks it cancelled.
pub(crate) async fn cancel<S: CellService>(
    service: &S,
    scope: &str,
    task_id: &str,
) -> Result<(), ErrorData> {
    let mut record = live_record(service, scope, task_id).await?;
    if record.status.is_terminal() {
        return Ok(());
    }
    if !cancel_run(service, scope, task_id).await {
        return Err(ErrorData::internal_error(
            "the task's run could not be cancelled; try again",
            None,
        ));
    }
    record.status = TaskStatus::Cancelled;
    record.updated_ms = now_ms();
    service
        .set_task_record(scope, task_id, Some(&record))
        .await
        .map_err(|e| ErrorData::internal_error(format!("cannot record the cancel: {e}"), None))
}
