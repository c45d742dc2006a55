// Included into `testing::fuzz` (host/src/lib.rs): the fuzz targets of the
// configuration parser, the MCP request bodies and the state store's
// records. `fuzz/` (cargo-fuzz, libFuzzer) and `tests/all/fuzz.rs`
// (bolero) drive them; see docs/hardening.md, "Fuzzing".

/// A current-thread Tokio runtime per thread, for the targets that drive
/// a bridge.
fn fuzz_runtime<R>(f: impl FnOnce(&tokio::runtime::Runtime) -> R) -> R {
    thread_local! {
        static FUZZ_RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
    }
    FUZZ_RUNTIME.with(f)
}

/// The tools of a cell over an empty catalog.
fn empty_cell_tools() -> std::sync::Arc<crate::bridge::CellTools> {
    let registry = crate::ToolRegistry::new();
    std::sync::Arc::new(crate::bridge::CellTools::new(
        registry.catalog(),
        &registry,
        crate::Limits::default().guest_search_limits(),
    ))
}

/// Most bytes an error message of the configuration parser may take for
/// `text`: it may quote the text (a key, a value), and lists known keys.
fn config_message_bound(text: &str) -> usize {
    2 * text.len() + (16 << 10)
}

/// TOML configuration text through [`crate::Config::parse`]: a
/// configuration or an error that says where, never a panic. The limits
/// of a parsed configuration are within their documented ranges (out of
/// range values are clamped or refused, never kept).
pub fn config_parse(text: &str) {
    match crate::Config::parse(text) {
        Ok(config) => {
            let l = &config.limits;
            assert!((100..=60_000).contains(&l.timeout_ms()));
            assert!(((1 << 20)..=(1 << 30)).contains(&l.memory_limit_bytes()));
            assert!((1_024..=10_485_760).contains(&l.max_output_bytes()));
            assert!((1_024..=268_435_456).contains(&l.max_snapshot_bytes()));
            assert!((1..=128).contains(&l.max_pending_tool_calls()));
            assert!((1..=86_400).contains(&l.snapshot_ttl_seconds()));
            assert!((1..=50).contains(&l.max_search_limit()));
            assert!((1..=l.max_search_limit()).contains(&l.search_default_limit()));
            if let crate::Fuel::Limited(fuel) = l.fuel() {
                assert!(fuel > 0, "a zero fuel allowance");
            }
            let h = &config.host;
            assert!(h.max_suspended_runs() >= 1);
            assert!(h.max_suspended_runs_per_session() >= 1);
            assert!(h.max_running_cells_per_session() >= 1);
            let http = &config.http;
            assert!(((1 << 10)..=(256 << 20)).contains(&http.max_body_bytes()));
            assert!(http.max_sessions() >= 1);
            if let Some(url) = &config.state_url {
                assert!(
                    crate::check_state_url(url).is_ok(),
                    "an unchecked state URL"
                );
            }
            assert!(config.policy.check().is_ok(), "a policy over its caps");
            let _ = format!("{config:?}");
        }
        Err(e) => {
            let message = e.to_string();
            assert!(!message.is_empty());
            assert!(
                message.len() <= config_message_bound(text),
                "an error of {} bytes for {} bytes of text",
                message.len(),
                text.len()
            );
        }
    }
}

/// Whether `text` is one JSON value (as the guest's `JSON.parse` reads
/// it: a number out of `f64`'s range is JSON, which `serde_json::Value`
/// refuses).
fn is_json(text: &str) -> bool {
    serde_json::from_str::<&serde_json::value::RawValue>(text).is_ok()
}

/// Checks what `ExecInput::from_json` accepted.
fn check_exec_input(input: &crate::ExecInput) {
    assert!(!input.title.trim().is_empty());
    assert!(input.title.chars().count() <= crate::MAX_TITLE_CHARS);
    assert!(!input.code.trim().is_empty());
    assert!(input.client_tools.len() <= crate::MAX_CLIENT_TOOLS);
    assert!(
        input.validate().is_ok(),
        "from_json accepted what validate refuses"
    );
}

/// Checks what `WaitInput::from_json` accepted.
fn check_wait_input(input: &crate::WaitInput) {
    assert!(!input.run_id.is_empty());
    assert_eq!(input.run_id.trim(), input.run_id, "an untrimmed run id");
    assert!(input.tool_results.len() <= crate::MAX_TOOL_RESULTS);
    assert!(
        input.validate().is_ok(),
        "from_json accepted what validate refuses"
    );
}

/// `exec` and `wait` arguments (any JSON value) through
/// `ExecInput::from_json` and `WaitInput::from_json`: an input within the
/// contract's rules, or the contract's error text.
pub fn exec_wait_args(args: &serde_json::Value) {
    match crate::ExecInput::from_json(args) {
        Ok(input) => check_exec_input(&input),
        Err(message) => assert!(!message.is_empty()),
    }
    match crate::WaitInput::from_json(args) {
        Ok(input) => check_wait_input(&input),
        Err(message) => assert!(!message.is_empty()),
    }
}

/// An HTTP request body (or one stdio line) as the MCP front end reads it
/// (`host/src/frontends/mcp/transport.rs`, `reject_malformed_json_rpc`): a
/// JSON-RPC message or the id its error answer names; the arguments of a
/// `tools/call` to `exec` or `wait` through the contract's argument
/// checks, and the params of a `tools/call` rmcp could not type as
/// `on_custom_request` reads them. Never a panic.
#[cfg(feature = "mcp-server")]
pub fn mcp_request_body(body: &[u8]) {
    use rmcp::model::{ClientJsonRpcMessage, ClientRequest, JsonRpcMessage};
    use serde_json::Value;
    let message = match serde_json::from_slice::<ClientJsonRpcMessage>(body) {
        Ok(message) => message,
        Err(error) => {
            let _ = error.to_string();
            if let Ok(value) = serde_json::from_slice::<Value>(body) {
                let _id = match value.get("id") {
                    Some(id @ (Value::String(_) | Value::Number(_))) => id.clone(),
                    _ => Value::Null,
                };
                // What a client that is not rmcp-typed might have meant.
                if let Some(arguments) = value.pointer("/params/arguments") {
                    exec_wait_args(arguments);
                }
            }
            return;
        }
    };
    let _ = serde_json::to_string(&message);
    let JsonRpcMessage::Request(request) = message else {
        return;
    };
    match request.request {
        ClientRequest::CallToolRequest(call) => {
            if let Some(state) = &call.params.request_state {
                let args = Value::Object(call.params.arguments.clone().unwrap_or_default());
                crate::frontends::mcp::fuzz_request_state(
                    state,
                    call.params.input_responses.as_ref(),
                    &args,
                );
            }
            let args = Value::Object(call.params.arguments.unwrap_or_default());
            match &*call.params.name {
                "exec" => match crate::ExecInput::from_json(&args) {
                    Ok(input) => check_exec_input(&input),
                    Err(message) => assert!(!message.is_empty()),
                },
                "wait" => match crate::WaitInput::from_json(&args) {
                    Ok(input) => check_wait_input(&input),
                    Err(message) => assert!(!message.is_empty()),
                },
                _ => exec_wait_args(&args),
            }
        }
        ClientRequest::UpdateTaskRequest(update) => {
            crate::frontends::mcp::fuzz_request_state("", Some(&update.params.input_responses), &Value::Null);
        }
        ClientRequest::CustomRequest(custom) if custom.method == "tools/call" => {
            let params = custom.params.unwrap_or(Value::Null);
            let _ = serde_json::from_value::<rmcp::model::CallToolRequestParams>(params.clone())
                .map_err(|e| e.to_string());
            if let Some(arguments) = params.get("arguments") {
                exec_wait_args(arguments);
            }
        }
        _ => {}
    }
}

/// The stored records of the state store, from bytes a store (or whoever
/// can write to its database) holds:
///
/// - a parked run's host state (the JSON inside its snapshot) and the
///   bridge rebuilt from it as a resuming host does, with the answers of
///   a `wait` checked against it;
/// - a settlement recorded for a drained call, plain and sealed;
/// - a sealed snapshot opened with a key that did not seal it;
/// - a usage record in its JSON form;
/// - a session-store value delivered to a cell by `store.get`.
///
/// Never a panic; what each yields names what was asked for.
pub fn store_records(bytes: &[u8]) {
    use serde_json::Value;
    let text = String::from_utf8_lossy(bytes);

    // A parked run's host state, and its bridge rebuilt.
    if let Ok(host) = serde_json::from_slice::<crate::cell::HostState>(bytes) {
        let answers = [
            crate::ClientToolResult::value("bridge:clientTool:1", Value::Null),
            crate::ClientToolResult::error("bridge:clientTool:2", "no"),
        ];
        let answered = crate::bridge::check_answers(&host.bridge, &answers).is_ok();
        let approvals = [
            crate::ApprovalAnswer::approve("bridge:approval:1"),
            crate::ApprovalAnswer::decline("bridge:approval:2", Some("no".into())),
        ];
        let approved = crate::bridge::check_approval_answers(&host.bridge, &approvals).is_ok();
        let outstanding = host.bridge.outstanding.len();
        fuzz_runtime(|rt| {
            let _enter = rt.enter();
            let mut bridge = crate::bridge::Bridge::restore(
                empty_cell_tools(),
                16,
                host.restart_safe,
                host.bridge,
                Vec::new(),
                None,
            )
            .with_reply_inbox(1 << 20);
            let pending = bridge.pending_calls();
            assert!(
                pending.len() <= outstanding,
                "more pending calls than records"
            );
            let parked = bridge.parked_state(None);
            let json = serde_json::to_vec(&parked).expect("a bridge state serializes");
            assert!(
                serde_json::from_slice::<crate::bridge::BridgeState>(&json).is_ok(),
                "a bridge state that does not read back"
            );
            if answered {
                bridge.answer_client_calls(&answers);
            }
            if approved {
                bridge.answer_approvals(&approvals);
            }
            bridge.release_yields();
            bridge.collect_finished();
            let mut taken = 0usize;
            while let Some(settlement) = bridge.take_ready() {
                let delivery = settlement.delivery_json();
                assert!(is_json(&delivery), "a delivery that is not JSON");
                taken += 1;
                assert!(taken <= outstanding + answers.len() + approvals.len() + bytes.len());
            }
        });
    }

    // A recorded settlement: it settles the call it was looked up for.
    let settlement = crate::bridge::recorded(None, "fuzz-run", 7, &text);
    assert_eq!(settlement.id, 7, "a recorded settlement of another call");
    assert!(is_json(&settlement.delivery_json()));
    let key = crate::StateKey::new(&[7u8; 32]).expect("a valid key");
    let settlement = crate::bridge::recorded(Some(&key), "fuzz-run", 7, &text);
    assert_eq!(settlement.id, 7, "a sealed settlement of another call");
    assert!(
        settlement.error.is_some(),
        "a forged sealed settlement opened"
    );

    // A sealed snapshot under a key that did not seal it.
    let owner = crate::Owner {
        agent_run: "fuzz".into(),
        session: "fuzz".into(),
    };
    assert!(
        key.open("fuzz-run", &owner, 1, bytes.to_vec()).is_err(),
        "a forged sealed snapshot opened"
    );

    // A usage record in its JSON form reads back as itself.
    if let Ok(record) = serde_json::from_slice::<crate::store::UsageRecord>(bytes) {
        let json = serde_json::to_string(&record).expect("a usage record serializes");
        let again: crate::store::UsageRecord =
            serde_json::from_str(&json).expect("a usage record reads back");
        assert_eq!(again, record);
        assert!(crate::store::UsageFilter::default().selects(&record));
    }

    // A stored session value, as `store.get` delivers it: the value stored
    // and nothing else, or an error.
    session_value(&text);
}

/// `store.get` of a session value stored as `stored` (text the store
/// holds, which the host wrote as one JSON value): the cell receives
/// `{"found":true,"value":V}` with V that value, or an error.
pub fn session_value(stored: &str) {
    use crate::store::StateStore;
    let state: std::sync::Arc<dyn StateStore> =
        std::sync::Arc::new(crate::store::MemoryStateStore::default());
    let owner = crate::Owner {
        agent_run: "fuzz".into(),
        session: "fuzz".into(),
    };
    fuzz_runtime(|rt| {
        rt.block_on(async {
            state
                .store_commit(&owner.session, vec![("k".into(), Some(stored.to_string()))])
                .await
                .expect("the memory store commits");
            let mut bridge = crate::bridge::Bridge::new(empty_cell_tools(), 4, false)
                .with_reply_inbox(1 << 20)
                .with_session(crate::bridge::SessionAccess {
                    state: state.clone(),
                    owner,
                });
            let request = crate::guest_abi::BridgeRequest {
                id: 1,
                method: "storeGet".into(),
                args_json: std::sync::Arc::from(r#"{"key":"k"}"#),
                oversized_args: None,
                over_outstanding_cap: false,
            };
            if bridge.accept(vec![request], 0).is_err() {
                return;
            }
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            let settled = bridge.next_settlement(Some(deadline)).await.flatten();
            let Some(settlement) = settled.into_iter().next() else {
                panic!("storeGet did not settle");
            };
            assert_eq!(settlement.id, 1);
            if let Some(value) = &settlement.value {
                // Typed, so that a field twice (or another field) fails.
                #[derive(serde::Deserialize)]
                #[serde(deny_unknown_fields)]
                struct Delivered<'a> {
                    found: bool,
                    #[serde(borrow)]
                    value: &'a serde_json::value::RawValue,
                }
                let delivered: Delivered<'_> = serde_json::from_str(value.get())
                    .unwrap_or_else(|e| panic!("a delivery of other fields: {e}"));
                assert!(delivered.found);
                assert_eq!(
                    delivered.value.get(),
                    stored.trim_matches([' ', '\t', '\n', '\r']),
                    "another value than the one stored"
                );
            }
        })
    });
}
