//! Tracing spans (operations.md §4.4): `exec`, `wait`, `tool_call`,
//! `checkpoint` and `restore`, with their fields, as a subscriber sees
//! them.

use crate::bridge::t;
use quickcell::{ExecInput, Owner, Runtime, ToolRegistry, WaitInput};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::Subscriber;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt as _};
use tracing_subscriber::registry::LookupSpan;

type Fields = BTreeMap<String, String>;

/// Collects every closed span: its name and fields.
#[derive(Clone, Default)]
struct Collect(Arc<Mutex<Vec<(String, Fields)>>>);

struct Visitor<'a>(&'a mut Fields);

impl Visit for Visitor<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().into(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().into(), value.into());
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Collect {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Fields::new();
        attrs.record(&mut Visitor(&mut fields));
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(fields);
        }
    }
    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            if let Some(fields) = span.extensions_mut().get_mut::<Fields>() {
                values.record(&mut Visitor(fields));
            }
        }
    }
    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(&id) {
            let fields = span
                .extensions()
                .get::<Fields>()
                .cloned()
                .unwrap_or_default();
            self.0
                .lock()
                .unwrap()
                .push((span.name().to_string(), fields));
        }
    }
}

/// An `exec` that calls a tool and parks, and the `wait` that finishes it:
/// each step is a span with the fields an operator filters on.
#[tokio::test]
async fn exec_wait_tool_calls_checkpoint_and_restore_are_spans() {
    let collect = Collect::default();
    let _default =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(collect.clone()));
    let mut registry = ToolRegistry::new();
    registry
        .add(Arc::new(t("lookup", "Look a record up")))
        .unwrap();
    let rt = Runtime::builder().tools(registry).build().await.unwrap();
    let owner = Owner {
        agent_run: "a".into(),
        session: "s".into(),
    };
    let r = rt
        .exec(
            ExecInput::new("t", "await lookup({}); await yield_control(); return 1")
                .with_owner(owner.clone()),
        )
        .await;
    let id = crate::waiting(&r).run_id.clone();
    let r = rt.wait(WaitInput::new(&id).with_owner(owner)).await;
    assert_eq!(crate::value(&r), serde_json::json!(1));

    let spans = collect.0.lock().unwrap().clone();
    let find = |name: &str| {
        spans
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, f)| f.clone())
            .unwrap_or_else(|| panic!("no `{name}` span in {spans:?}"))
    };
    let exec = find("exec");
    assert_eq!(exec["toolKind"], "code_mode_exec");
    assert_eq!(exec["toolInputKind"], "javascript");
    assert_eq!(exec["session"], "s");
    assert_eq!(exec["run_id"], id);
    assert_eq!(exec["outcome"], "waiting");
    assert_eq!(exec["tool_calls"], "1");
    assert!(exec["fuel"].parse::<u64>().unwrap() > 0);
    let tool = find("tool_call");
    assert_eq!(
        (tool["tool"].as_str(), tool["outcome"].as_str()),
        ("lookup", "ok")
    );
    let checkpoint = find("checkpoint");
    assert_eq!(checkpoint["run_id"], id);
    assert!(checkpoint["snapshot_bytes"].parse::<u64>().unwrap() > 0);
    assert_eq!(find("restore")["run_id"], id);
    let wait = find("wait");
    assert_eq!(
        (wait["run_id"].as_str(), wait["outcome"].as_str()),
        (id.as_str(), "completed")
    );
}

/// An exported span: name, string/int attributes, span id, parent span id,
/// trace id.
type ExportedSpan = (String, Fields, Vec<u8>, Vec<u8>, Vec<u8>);

/// An OTLP/HTTP receiver on a loopback port of this test process: it
/// decodes every `POST /v1/traces` (protobuf) and answers 200.
struct OtlpReceiver {
    port: u16,
    requests: Arc<
        Mutex<Vec<opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest>>,
    >,
}

impl OtlpReceiver {
    fn start() -> Self {
        use std::io::{BufRead, BufReader, Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let kept = requests.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let kept = kept.clone();
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(stream.try_clone().unwrap());
                    let mut stream = stream;
                    // One connection may carry several requests.
                    loop {
                        let mut request_line = String::new();
                        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
                            return;
                        }
                        let mut length = 0usize;
                        loop {
                            let mut line = String::new();
                            reader.read_line(&mut line).unwrap();
                            if line.trim().is_empty() {
                                break;
                            }
                            if let Some((name, value)) = line.split_once(':') {
                                if name.eq_ignore_ascii_case("content-length") {
                                    length = value.trim().parse().unwrap();
                                }
                            }
                        }
                        let mut body = vec![0; length];
                        reader.read_exact(&mut body).unwrap();
                        assert!(
                            request_line.starts_with("POST /v1/traces "),
                            "{request_line}"
                        );
                        let decoded = <opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest as prost::Message>::decode(body.as_slice())
                            .expect("an OTLP protobuf trace export");
                        kept.lock().unwrap().push(decoded);
                        let _ = stream.write_all(
                            b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n",
                        );
                    }
                });
            }
        });
        Self { port, requests }
    }

    /// Every exported span: (name, string/int attributes, span id, parent
    /// span id, trace id), and the service names of their resources.
    fn spans(&self) -> (Vec<ExportedSpan>, Vec<String>) {
        use opentelemetry_proto::tonic::common::v1::any_value::Value as V;
        let text = |v: &Option<opentelemetry_proto::tonic::common::v1::AnyValue>| match v
            .as_ref()
            .and_then(|v| v.value.as_ref())
        {
            Some(V::StringValue(s)) => s.clone(),
            Some(V::IntValue(i)) => i.to_string(),
            Some(V::BoolValue(b)) => b.to_string(),
            other => format!("{other:?}"),
        };
        let mut spans = Vec::new();
        let mut services = Vec::new();
        for request in self.requests.lock().unwrap().iter() {
            for resource_spans in &request.resource_spans {
                for attribute in resource_spans.resource.iter().flat_map(|r| &r.attributes) {
                    if attribute.key == "service.name" {
                        services.push(text(&attribute.value));
                    }
                }
                for scope in &resource_spans.scope_spans {
                    for span in &scope.spans {
                        let fields = span
                            .attributes
                            .iter()
                            .map(|a| (a.key.clone(), text(&a.value)))
                            .collect();
                        spans.push((
                            span.name.clone(),
                            fields,
                            span.span_id.clone(),
                            span.parent_span_id.clone(),
                            span.trace_id.clone(),
                        ));
                    }
                }
            }
        }
        (spans, services)
    }
}

/// `[telemetry] otlp_endpoint` (and, for another process,
/// `OTEL_EXPORTER_OTLP_ENDPOINT`) sends the binary's spans to an OTLP
/// receiver: the `exec` span with its fields, its tool call as a child in
/// the same trace, the checkpoint, and the `wait` and `restore` of the
/// process that resumes the run.
#[test]
fn spans_are_exported_over_otlp() {
    let receiver = OtlpReceiver::start();
    let dir = std::env::temp_dir().join(format!("quickcell-otlp-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("quickcell.toml");
    std::fs::write(
        &config,
        format!(
            "[telemetry]\notlp_endpoint = \"http://127.0.0.1:{}\"\n",
            receiver.port
        ),
    )
    .unwrap();
    let state = dir.join("state");
    let run = |args: &[&str], env: Option<String>| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_quickcell"));
        command
            .args(args)
            .arg("--state-dir")
            .arg(&state)
            .arg("--workspace")
            .arg(env!("CARGO_MANIFEST_DIR"))
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .env_remove("OTEL_SERVICE_NAME");
        if let Some(endpoint) = env {
            command.env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint);
        }
        let out = command.output().unwrap();
        serde_json::from_slice::<serde_json::Value>(&out.stdout)
            .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)))
    };
    let parked = run(
        &[
            "exec",
            "--config",
            config.to_str().unwrap(),
            "--code",
            "const r = await read({path: 'README.md', limit: 1}); await yield_control(); return r.kind",
        ],
        None,
    );
    assert_eq!(parked["status"], "waiting", "{parked}");
    let run_id = parked["runId"].as_str().unwrap();
    // The exporter flushes when the process exits.
    let (spans, services) = receiver.spans();
    let named = |name: &str| spans.iter().filter(|s| s.0 == name).collect::<Vec<_>>();
    let exec = named("exec");
    assert_eq!(exec.len(), 1, "{spans:?}");
    let exec = exec[0];
    assert_eq!(exec.1["toolKind"], "code_mode_exec");
    assert_eq!(exec.1["toolInputKind"], "javascript");
    assert_eq!(exec.1["outcome"], "waiting");
    assert_eq!(exec.1["run_id"], run_id);
    assert_eq!(exec.1["fuel"], parked["telemetry"]["fuelUsed"].to_string());
    let tool = named("tool_call");
    assert_eq!(tool.len(), 1, "{spans:?}");
    assert_eq!(
        (tool[0].1["tool"].as_str(), tool[0].1["outcome"].as_str()),
        ("read", "ok")
    );
    assert_eq!(tool[0].4, exec.4, "one trace");
    let checkpoint = named("checkpoint");
    assert_eq!(checkpoint.len(), 1, "{spans:?}");
    assert_eq!(checkpoint[0].3, exec.2, "the checkpoint is a child of exec");
    assert!(services.iter().all(|s| s == "quickcell") && !services.is_empty());

    // Another process, configured by the standard variable.
    let before = spans.len();
    let resumed = run(
        &["wait", run_id],
        Some(format!("http://127.0.0.1:{}", receiver.port)),
    );
    assert_eq!(resumed["value"], "truncated", "{resumed}");
    let (spans, _) = receiver.spans();
    let later: Vec<&str> = spans[before..].iter().map(|s| s.0.as_str()).collect();
    assert!(
        later.contains(&"wait") && later.contains(&"restore"),
        "{later:?}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// A malformed OTLP endpoint is a usage error (exit 2) naming it; nothing
/// runs.
#[test]
fn a_malformed_otlp_endpoint_is_refused() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_quickcell"))
        .args(["exec", "--code", "return 1"])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("the OTLP endpoint must be an http:// or https:// URL"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
}

/// An MCP request's `_meta` `traceparent` parents the `exec` span: the
/// span exported over OTLP is in the caller's trace, a child of the
/// caller's span (MCP 2026-07-28 over stdio, no `initialize`).
#[test]
fn a_traceparent_in_mcp_meta_parents_the_exec_span() {
    use std::io::{BufRead, Write};
    let receiver = OtlpReceiver::start();
    let dir = std::env::temp_dir().join(format!("quickcell-traceparent-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("quickcell.toml");
    std::fs::write(
        &config,
        format!(
            "[telemetry]\notlp_endpoint = \"http://127.0.0.1:{}\"\n",
            receiver.port
        ),
    )
    .unwrap();
    let mut server = std::process::Command::new(env!("CARGO_BIN_EXE_quickcell"))
        .args(["serve", "--config", config.to_str().unwrap(), "--state-dir"])
        .arg(dir.join("state"))
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let parent = "00f067aa0ba902b7";
    let request = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "exec", "arguments": {"title": "t", "code": "return 7;"},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": {},
                  "traceparent": format!("00-{trace}-{parent}-01")}}});
    let mut stdin = server.stdin.take().unwrap();
    writeln!(stdin, "{request}").unwrap();
    let mut line = String::new();
    std::io::BufReader::new(server.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let answer: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(
        answer["result"]["structuredContent"]["value"], 7,
        "{answer}"
    );
    // The exporter flushes when the process exits.
    drop(stdin);
    server.wait().unwrap();
    let (spans, _) = receiver.spans();
    let exec: Vec<_> = spans.iter().filter(|s| s.0 == "exec").collect();
    assert_eq!(exec.len(), 1, "{spans:?}");
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    assert_eq!(hex(&exec[0].4), trace);
    assert_eq!(hex(&exec[0].3), parent);
    let _ = std::fs::remove_dir_all(dir);
}
