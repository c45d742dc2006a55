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
