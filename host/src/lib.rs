//! quickcell runs model-written JavaScript "cells" in QuickJS compiled to
//! WebAssembly, under Wasmtime, with deterministic fuel metering and memory
//! limits.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), quickcell::Error> {
//! use quickcell::{ExecInput, Limits, Runtime};
//!
//! let runtime = Runtime::builder()
//!     .limits(Limits::default().with_timeout_ms(2_000))
//!     .build()
//!     .await?;
//! let result = runtime
//!     .exec(ExecInput::new("add numbers", "text('adding'); return 1 + 1;"))
//!     .await;
//! println!("{}", result.to_json());
//! assert_eq!(result.into_value()?, serde_json::json!(2));
//! # Ok(())
//! # }
//! ```
//!
//! A cell is the body of an async function: top-level `await` and `return`
//! work, and the returned value comes back after a safe projection to JSON.
//! Results follow the contract's union (`completed` / `waiting` / `failed`,
//! see [`CellResult`]), with output entries, telemetry (including the
//! deterministic `fuelUsed`), `failurePhase` and `bridgeDispatchStarted`.
//!
//! # Design
//!
//! - One Wasmtime engine per process; the guest is pre-initialized once
//!   (wasmtime-wizer) and the compiled module is cached on disk, so a cell
//!   is an instantiation from a copy-on-write image plus a fresh `Store`.
//! - Guest and host talk through the WIT world in `wit/bridge.wit`, spoken
//!   over a core module so the guest's linear memory stays visible.
//! - Limits ([`Limits`]) are enforced by type: deadline → `timeout`,
//!   fuel → `fuel_exhausted`, heap / linear-memory cap →
//!   `memory_limit_exceeded`; deep recursion raises a catchable
//!   `RangeError`. See the `cell` module docs for the exact mapping.
//! - A cell that yields, or still waits on tools when its budget runs out,
//!   parks as a linear-memory snapshot in a SQLite state store
//!   ([`RuntimeBuilder::state_dir`]) and is resumed with [`Runtime::wait`] —
//!   in this process, after a restart, or in another process.
//! - Source is checked on the host before any guest code runs: shell-shaped
//!   input, syntax errors (with `line:column`) and module access (`require`,
//!   `import()`), using the oxc JavaScript parser.

/// The README's Rust examples, run as doc tests so that they stay true.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeExamples;

mod approval;
mod bridge;
mod cell;
mod client_tools;
mod clock;
mod config;
mod engine;
mod error;
mod frontends;
mod guest_abi;
mod input;
pub mod instruments;
mod ledger;
#[cfg(feature = "otlp")]
pub mod otlp;
mod output;
mod progress;
mod quota;
mod registry;
mod result;
mod runtime;
mod source;
mod state_key;
pub mod store;
#[cfg(feature = "tls")]
mod tls;
pub mod tools;

pub use approval::{
    Approval, ApprovalAnswer, ApprovalRequest, Approver, MAX_APPROVAL_PREVIEW_BYTES,
    MAX_APPROVAL_REASON_BYTES, MAX_PENDING_APPROVALS,
};
pub use client_tools::{
    ClientToolResult, ClientToolSpec, MAX_CLIENT_TOOLS, MAX_CLIENT_TOOLS_BYTES,
    MAX_CLIENT_TOOL_DESCRIPTION_BYTES, MAX_CLIENT_TOOL_INPUT_BYTES, MAX_CLIENT_TOOL_NAME_BYTES,
    MAX_PENDING_CLIENT_INPUT_BYTES, MAX_TOOL_RESULTS, MAX_TOOL_RESULT_ERROR_BYTES,
};
pub use config::{
    check_state_url, Config, Fuel, HostLimits, HttpLimits, Limits, McpOptions, Quotas,
    TelemetryConfig, ToolSearchConfig, ToolSearchMode, DEFAULT_FUEL, MAX_OTLP_ENDPOINT_BYTES,
    MAX_STATE_URL_BYTES, MAX_SUSPENDED_RUNS, MAX_TASK_TTL_MS, MAX_TOOLS_TTL_MS,
};
pub use engine::{module_cache_dir, GuestOrigin};

/// The guest build this quickcell carries: the SHA-256 of its guest module,
/// hex encoded. `quickcell --version` prints its first 16 digits.
pub fn guest_build() -> &'static str {
    engine::GUEST_SHA256
}

/// The engines under the cells: Wasmtime's version, and the JavaScript
/// engine built into the guest (rquickjs, and the QuickJS-ng release that
/// rquickjs bundles). A test checks the crate versions against
/// `Cargo.lock` and `guest/Cargo.lock`.
pub const ENGINE_VERSIONS: &str = "Wasmtime 48.0.8; guest rquickjs 0.14.0 (QuickJS-ng 0.16.2)";
pub use error::Error;
pub use frontends::codex::{
    serve_codex, CodexOptions, CODEX_PROTOCOL_VERSION, MAX_CODEX_FRAME_BYTES,
};
#[cfg(feature = "mcp-server")]
pub use frontends::mcp::{
    HttpOptions, ServeMode, DEFAULT_PRINCIPAL, LOCAL_PRINCIPAL, MAX_PRINCIPALS,
    MAX_REQUEST_STATE_BYTES, MAX_TASKS_PER_SCOPE,
};
pub use input::{
    title_from_source, ExecInput, WaitInput, MAX_TITLE_CHARS, MIN_CELL_MEMORY_LIMIT_BYTES,
};
pub use progress::{Progress, MAX_PROGRESS_TOOL_NAME_BYTES};
pub use registry::{ToolRegistry, COMMAND_TOOLS_SOURCE};
pub use result::{
    CellResult, Completed, ErrorCode, Failed, FailurePhase, McpOutage, PendingToolCall, Telemetry,
    WaitReason, Waiting,
};
pub use runtime::{Runtime, RuntimeBuilder, SessionClosed, Shutdown};
pub use source::{MAX_SOURCE_BYTES, MAX_SOURCE_NESTING};
pub use state_key::{StateKey, MAX_STATE_KEY_BYTES, MIN_STATE_KEY_BYTES, STATE_KEY_FILE};
#[cfg(feature = "sqlite")]
pub use store::STATE_FILE;
pub use store::{Owner, StateStore};
/// The cancel token of [`ExecInput::with_cancel`] and [`WaitInput::with_cancel`]
/// (tokio-util's, re-exported so embedders need not depend on it).
pub use tokio_util::sync::CancellationToken;
pub use tools::mcp;
pub use tools::mcp::{McpServerConfig, McpTransport};

/// The tool catalog and Tool Search: what [`Runtime::catalog`] returns and
/// the types its methods take and give. The `quickcell-catalog` crate has
/// the rest (ranking, names, hints) for embedders that build on it.
pub mod catalog {
    pub use quickcell_catalog::{
        Catalog, CatalogError, CatalogMode, ErrorKind, Policy, SearchLimits, SourceCounts,
        SourceKind, Telemetry, ToolSpec, MAX_POLICY_PATTERNS, MAX_POLICY_PATTERN_BYTES,
    };
}

/// Guest internals exposed for tests and benchmarks; not a stable API.
#[doc(hidden)]
pub mod testing {
    /// The embedded guest module as built (before pre-initialization).
    #[cfg(quickcell_compiler)]
    pub fn guest_wasm() -> &'static [u8] {
        crate::engine::GUEST_WASM
    }

    /// The precompiled guest embedded in this build (empty on targets other
    /// than x86-64 Linux).
    pub fn precompiled_guest() -> &'static [u8] {
        crate::engine::PRECOMPILED_GUEST
    }

    /// The precompiled guest made afresh from [`guest_wasm`] by this
    /// Wasmtime: what `prebuilt/quickcell_guest.x86_64-linux.cwasm` must hold.
    #[cfg(quickcell_compiler)]
    pub async fn make_precompiled_guest() -> anyhow::Result<Vec<u8>> {
        crate::engine::make_precompiled_guest().await
    }

    /// The URL of a fresh, empty database for one test, in a throwaway
    /// PostgreSQL 15 cluster: the server at `QUICKCELL_TEST_POSTGRES_URL`
    /// (which `scripts/test` starts), or else one this process starts
    /// with the repository's `scripts/postgres` on first use and that stops
    /// once the process has exited. Panics when neither works: tests of the
    /// PostgreSQL backend never pass without PostgreSQL.
    #[cfg(feature = "postgres")]
    pub fn postgres_database() -> String {
        static SERVER: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        let server = SERVER.get_or_init(|| {
            if let Ok(url) = std::env::var("QUICKCELL_TEST_POSTGRES_URL") {
                return url;
            }
            let dir = std::env::temp_dir().join(format!("quickcell-pg-{}", uuid::Uuid::new_v4()));
            let out = std::process::Command::new(
                std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/postgres"),
            )
            .arg("start")
            .arg(&dir)
            .arg("--until-exit")
            .arg(std::process::id().to_string())
            .output()
            .expect("scripts/postgres runs");
            assert!(
                out.status.success(),
                "cannot start PostgreSQL for the tests: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        });
        let name = format!("quickcell_test_{}", uuid::Uuid::new_v4().simple());
        let out = std::process::Command::new("psql")
            .args([server.as_str(), "-qAtc", &format!("CREATE DATABASE {name}")])
            .output()
            .expect("psql runs");
        assert!(
            out.status.success(),
            "cannot create a test database: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // `postgres://…/postgres?sslmode=…`: the database before the query.
        let (path, query) = server.split_once('?').unwrap_or((server.as_str(), ""));
        let base = path.rsplit_once('/').map_or(path, |(base, _)| base);
        match query {
            "" => format!("{base}/{name}"),
            query => format!("{base}/{name}?{query}"),
        }
    }

    /// A stored snapshot opened (decrypted and authenticated) for its run
    /// under `key`: with [`seal_snapshot`] it lets tests reach the snapshot
    /// decoder's own checks behind the encryption.
    pub fn open_snapshot(
        key: &crate::StateKey,
        run_id: &str,
        owner: &crate::Owner,
        generation: u64,
        sealed: Vec<u8>,
    ) -> Result<Vec<u8>, String> {
        key.open(run_id, owner, generation, sealed)
    }

    /// `snapshot` sealed for its run under `key`, as a runtime stores it.
    pub fn seal_snapshot(
        key: &crate::StateKey,
        run_id: &str,
        owner: &crate::Owner,
        generation: u64,
        snapshot: Vec<u8>,
    ) -> Vec<u8> {
        key.seal(run_id, owner, generation, snapshot)
            .expect("the system gives random bytes")
    }

    /// Timings of the process's latest checkpoint and restore.
    #[derive(Debug, Clone, Copy)]
    pub struct SuspendStats {
        /// Garbage collection, memory diff and compression.
        pub checkpoint: std::time::Duration,
        /// The garbage collection part of `checkpoint`.
        pub collect: std::time::Duration,
        /// Writing the parked run to the state store.
        pub persist: std::time::Duration,
        /// Compressed snapshot size in bytes.
        pub snapshot_bytes: u64,
        /// Uncompressed payload (changed pages and host state) in bytes.
        pub payload_bytes: u64,
        /// Decode, fresh instance, page writes and reseed.
        pub restore: std::time::Duration,
    }

    /// Timings of the latest checkpoint and restore in this process.
    pub fn last_suspend_stats() -> SuspendStats {
        use crate::cell::stats::*;
        use std::sync::atomic::Ordering::Relaxed;
        use std::time::Duration;
        SuspendStats {
            checkpoint: Duration::from_nanos(CHECKPOINT_NANOS.load(Relaxed)),
            collect: Duration::from_nanos(COLLECT_NANOS.load(Relaxed)),
            persist: Duration::from_nanos(PERSIST_NANOS.load(Relaxed)),
            snapshot_bytes: SNAPSHOT_BYTES.load(Relaxed),
            payload_bytes: PAYLOAD_BYTES.load(Relaxed),
            restore: Duration::from_nanos(RESTORE_NANOS.load(Relaxed)),
        }
    }

    /// Has the process's standby instance made, unless it is ready or being
    /// made, and waits (up to five seconds) until it is ready for the next
    /// cell; returns whether it is. Another runtime of the process may take
    /// it first.
    pub async fn standby_ready() -> bool {
        let Ok(shared) = crate::engine::shared().await else {
            return false;
        };
        if !shared.has_standby() {
            shared.make_standby();
        }
        for _ in 0..5000 {
            if shared.has_standby() {
                return true;
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        false
    }

    /// Fuzz targets: each takes arbitrary input and checks the invariants
    /// of one parser or cutter that sees hostile bytes (no panic, results
    /// within their bounds). `tests/all/fuzz.rs` drives them with `bolero`.
    pub mod fuzz {
        use crate::bridge::{Bridge, CellTools, SessionAccess};
        use std::sync::Arc;

        include!("testing_fuzz.rs");

        /// The source check on any text: a verdict, never a panic.
        pub fn source_check(source: &str) {
            let _ = crate::source::prepare_source(source, &|word| word == "tool");
        }

        /// The output cutter and the guest-JSON projection on any text as a
        /// value, an error and an output entry, under `budget`.
        pub fn output_fit(text: &str, budget: u16) {
            let budget = usize::from(budget);
            let fitted = crate::output::fit_to_budget(budget, Vec::new(), Some(text), None);
            if let Ok(fitted) = fitted {
                assert!(fitted.used_bytes <= budget, "value over budget");
            }
            let fitted = crate::output::fit_to_budget(budget, Vec::new(), None, Some(text));
            if let Ok(fitted) = fitted {
                assert!(fitted.used_bytes <= budget, "error over budget");
                let error = fitted.error.unwrap_or_default();
                assert!(
                    text.starts_with(error.trim_end_matches(crate::output::ERROR_TRUNCATED_SUFFIX))
                );
            }
            if let Some(marker) = crate::output::truncation_marker(text, budget) {
                assert!(
                    crate::output::json_len(&marker) <= budget,
                    "marker over budget"
                );
            }
            let _ = crate::output::parse_guest_json(text);
            let mut buffer = crate::guest_abi::channel::OutputBuffer::new(budget);
            buffer.push_raw(text.as_bytes());
            buffer.push_raw(text.as_bytes());
            let entries = buffer.to_values();
            let _ =
                crate::output::fit_to_budget_with_dropped(budget, entries, Some("null"), None, 0);
        }

        /// One bridge request with any method and argument text, dispatched
        /// by a bridge over an empty catalog with a session: it settles,
        /// and never panics.
        pub fn bridge_request(method: &str, args_json: &str) {
            thread_local! {
                static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a runtime");
            }
            let registry = crate::ToolRegistry::new();
            let tools = Arc::new(CellTools::new(
                registry.catalog(),
                &registry,
                crate::Limits::default().guest_search_limits(),
            ));
            let state: Arc<dyn crate::store::StateStore> =
                Arc::new(crate::store::MemoryStateStore::default());
            RUNTIME.with(|rt| {
                rt.block_on(async {
                    // A parked bridge only queues what it accepts: even
                    // then no guest request stands as an approval record
                    // (whose answer would start a call unasked).
                    let mut parked = Bridge::new(tools.clone(), 4, false);
                    parked.set_parked(true);
                    let queued = crate::guest_abi::BridgeRequest {
                        id: 1,
                        method: method.to_string(),
                        args_json: Arc::from(args_json),
                        oversized_args: None,
                        over_outstanding_cap: false,
                    };
                    let _ = parked.accept(vec![queued], 0);
                    assert!(
                        !parked.has_deferred_approvals(),
                        "a guest request stands as an approval record"
                    );
                    let mut bridge = Bridge::new(tools, 4, false)
                        .with_reply_inbox(1 << 20)
                        .with_session(SessionAccess {
                            state,
                            owner: crate::Owner {
                                agent_run: "fuzz".into(),
                                session: "fuzz".into(),
                            },
                        });
                    let request = crate::guest_abi::BridgeRequest {
                        id: 1,
                        method: method.to_string(),
                        args_json: Arc::from(args_json),
                        oversized_args: None,
                        over_outstanding_cap: false,
                    };
                    if bridge.accept(vec![request], 0).is_err() {
                        return;
                    }
                    // Timers, yields and client tool calls do not settle at
                    // once (a yield and a client tool call wait for the
                    // caller); anything else settles, and settles as
                    // request 1.
                    if matches!(
                        method,
                        "yield" | "sleep" | crate::bridge::CLIENT_TOOL_METHOD
                    ) {
                        return;
                    }
                    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
                    let settled = bridge.next_settlement(Some(deadline)).await.flatten();
                    assert_eq!(
                        settled.map(|s| s.id),
                        Some(1),
                        "request {method:?} {args_json:?} settles, as itself"
                    );
                });
            });
        }
    }

    /// Checks the guest's module shape (one mutable global, fixed table,
    /// expected imports only).
    pub fn check_guest_module_shape(wasm: &[u8]) -> Result<(), String> {
        crate::guest_abi::check_module_shape(wasm).map_err(|e| e.to_string())
    }
}
