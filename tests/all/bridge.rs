//! Cells calling host tools through the bridge.

use crate::{failed, json, texts, value};
use quickcell::tools::{async_trait, CancelSignal, Tool, ToolError};
use quickcell::{ErrorCode, ExecInput, FailurePhase, Limits, Runtime, ToolRegistry};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Test tool `T(name, desc)` from the contract's examples: takes
/// `{value?: string}` and returns `{name, input}`; counts executions;
/// optionally sleeps, fails or panics.
pub(crate) struct T {
    pub name: String,
    pub desc: String,
    pub calls: Arc<AtomicUsize>,
    pub running: Arc<AtomicUsize>,
    pub max_running: Arc<AtomicUsize>,
    pub delay: Duration,
    pub behaviour: &'static str,
    pub replay_safe: bool,
}

pub(crate) fn t(name: &str, desc: &str) -> T {
    T {
        name: name.into(),
        desc: desc.into(),
        calls: Arc::new(AtomicUsize::new(0)),
        running: Arc::new(AtomicUsize::new(0)),
        max_running: Arc::new(AtomicUsize::new(0)),
        delay: Duration::ZERO,
        behaviour: "ok",
        replay_safe: false,
    }
}

#[async_trait]
impl Tool for T {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        &self.desc
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {"value": {"type": "string"}, "index": {"type": "integer"}}, "additionalProperties": false})
    }
    fn replay_safe(&self) -> bool {
        self.replay_safe
    }
    async fn call(&self, args: Value, _cancel: CancelSignal) -> Result<Value, ToolError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_running.fetch_max(now, Ordering::SeqCst);
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        self.running.fetch_sub(1, Ordering::SeqCst);
        match self.behaviour {
            "fail" => Err(ToolError::tool("the service said no")),
            "panic" => panic!("tool bug"),
            _ => Ok(json!({"name": self.name, "input": args})),
        }
    }
}

pub(crate) async fn runtime_with(
    tools: Vec<T>,
    limits: Limits,
) -> (Runtime, Vec<Arc<AtomicUsize>>) {
    let mut registry = ToolRegistry::new();
    let mut counters = Vec::new();
    for tool in tools {
        counters.push(tool.calls.clone());
        registry.add(Arc::new(tool)).unwrap();
    }
    let rt = Runtime::builder()
        .limits(limits)
        .tools(registry)
        .build()
        .await
        .unwrap();
    (rt, counters)
}

#[tokio::test]
async fn search_call_emit() {
    let (rt, calls) = runtime_with(
        vec![t("fake_create_ticket", "Create a fake ticket")],
        Limits::default(),
    )
    .await;
    let r = rt
        .exec(ExecInput::new("ticket", r#"const [t]=await catalog.search("ticket",{limit:1}); const c=await t({value:"ship"}); text("created"); return c;"#))
        .await;
    assert_eq!(
        value(&r),
        json!({"name": "fake_create_ticket", "input": {"value": "ship"}})
    );
    assert_eq!(texts(&r), vec!["created"]);
    let tel = &json(&r)["telemetry"];
    assert_eq!(
        (
            tel["searchCount"].clone(),
            tel["describeCount"].clone(),
            tel["callCount"].clone()
        ),
        (json!(1), json!(0), json!(1))
    );
    assert_eq!(calls[0].load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn callable_names_reach_their_own_tools() {
    let names = [
        "llm-task",
        "llm_task",
        "catalog",
        "class",
        "9patch",
        "__quickcellResult",
        "tool___quickcellResult",
    ];
    let (rt, calls) =
        runtime_with(names.iter().map(|n| t(n, "x")).collect(), Limits::default()).await;
    let r = rt
        .exec(ExecInput::new("names", "const out = {}; for (const h of catalog.all()) out[h.callableName] = (await h({})).name; return out;"))
        .await;
    let v = value(&r);
    let map = v.as_object().unwrap();
    assert_eq!(map.len(), 7);
    assert_eq!(map["llm_task"], "llm_task");
    assert_eq!(map["tool_9patch"], "9patch");
    assert_eq!(map["tool___quickcellResult"], "tool___quickcellResult");
    let suffixed = |prefix: &str| {
        map.keys()
            .any(|k| k.starts_with(prefix) && k.len() == prefix.len() + 8)
    };
    assert!(
        suffixed("llm_task_")
            && suffixed("catalog_")
            && suffixed("class_")
            && suffixed("tool___quickcellResult_"),
        "{v}"
    );
    assert!(map.keys().all(|k| !k.starts_with("__quickcell")));
    for c in &calls {
        assert_eq!(c.load(Ordering::SeqCst), 1);
    }
}

#[tokio::test]
async fn queue_overflow_dispatches_nothing() {
    let (rt, calls) = runtime_with(
        vec![t("fake_mutation", "Mutate")],
        Limits::default().with_max_pending_tool_calls(2),
    )
    .await;
    let r = rt
        .exec(ExecInput::new(
            "overflow",
            "return await Promise.all(Array.from({length:131},(_,i)=>fake_mutation({index:i})))",
        ))
        .await;
    let f = failed(&r);
    assert_eq!(f.code, ErrorCode::InvalidInput);
    assert_eq!(f.failure_phase, FailurePhase::Bridge);
    assert!(!f.bridge_dispatch_started);
    assert!(f.error.starts_with("code mode bridge queue limit exceeded (128 ordinary requests queued; 2 in-flight slots)."), "{}", f.error);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(calls[0].load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn in_flight_cap_obeyed_with_queueing() {
    let mut slow = t("slow", "Slow tool");
    slow.delay = Duration::from_millis(20);
    let (rt, calls) =
        runtime_with(vec![slow], Limits::default().with_max_pending_tool_calls(2)).await;
    let r = rt
        .exec(ExecInput::new(
            "cap",
            "return (await Promise.all(Array.from({length:10},(_,i)=>slow({index:i})))).length",
        ))
        .await;
    assert_eq!(value(&r), 10);
    assert_eq!(calls[0].load(Ordering::SeqCst), 10);
}

#[tokio::test]
async fn sequential_and_concurrent_calls_complete_in_one_exec() {
    let (rt, calls) = runtime_with(vec![t("noop", "Does nothing")], Limits::default()).await;
    let r = rt.exec(ExecInput::new("seq", "let n = 0; for (let i = 0; i < 100; i++) n += (await noop({index: i})).input.index; return n;")).await;
    assert_eq!(value(&r), 4950);
    let r = rt.exec(ExecInput::new("all", "return (await Promise.all(Array.from({length: 100}, (_, i) => noop({index: i})))).length")).await;
    assert_eq!(value(&r), 100);
    assert_eq!(calls[0].load(Ordering::SeqCst), 200);
    assert!(r.telemetry().catalog.call_count >= 200);
}

#[tokio::test]
async fn concurrent_calls_overlap() {
    let mut slow = t("slow", "Slow tool");
    slow.delay = Duration::from_millis(200);
    let (rt, _) = runtime_with(vec![slow], Limits::default()).await;
    let started = std::time::Instant::now();
    let r = rt
        .exec(ExecInput::new(
            "overlap",
            "await Promise.all([slow({}), slow({}), slow({}), slow({})]); return 1",
        ))
        .await;
    assert_eq!(value(&r), 1);
    assert!(
        started.elapsed() < Duration::from_millis(700),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn detached_calls_are_drained_not_aborted() {
    let mut slow = t("slow", "Slow tool");
    slow.delay = Duration::from_millis(50);
    let (rt, calls) = runtime_with(vec![slow], Limits::default()).await;
    let r = rt.exec(ExecInput::new("void", "void slow({}); await Promise.race([slow({}), Promise.resolve(1)]); slow({}).then(() => text('late')); return 'early';")).await;
    assert_eq!(value(&r), "early");
    assert_eq!(calls[0].load(Ordering::SeqCst), 3);
    assert_eq!(
        texts(&r),
        vec!["late"],
        "callbacks of drained calls still run"
    );
    assert!(matches!(r, quickcell::CellResult::Completed(_)));
}

#[tokio::test]
async fn tool_errors_are_catchable_with_a_code() {
    let mut bad = t("bad", "Fails");
    bad.behaviour = "fail";
    // One panics in its first poll (settled without a task), one after
    // waiting (in its task).
    let mut buggy = t("buggy", "Panics");
    buggy.behaviour = "panic";
    let mut late_buggy = t("lateBuggy", "Panics later");
    late_buggy.behaviour = "panic";
    late_buggy.delay = Duration::from_millis(5);
    let (rt, _) = runtime_with(
        vec![bad, buggy, late_buggy, t("good", "Works")],
        Limits::default(),
    )
    .await;
    let r = rt
        .exec(ExecInput::new("errors", r#"
            const out = [];
            try { await bad({}); } catch (e) { out.push([e instanceof Error, e.message, e.code, e.effectStatus]); }
            try { await buggy({}); } catch (e) { out.push([e.code, e.message]); }
            try { await lateBuggy({}); } catch (e) { out.push([e.code, e.message]); }
            try { await good({valu: "x"}); } catch (e) { out.push([e.code, e.message]); }
            out.push((await good({value: "still here"})).input.value);
            return out;"#))
        .await;
    let v = value(&r);
    assert_eq!(
        v[0],
        json!([true, "the service said no", "tool_error", "unknown"])
    );
    let panicked = json!(["tool_error", "the tool failed unexpectedly (it panicked)"]);
    assert_eq!(v[1], panicked);
    assert_eq!(v[2], panicked);
    assert_eq!(v[3][0], "input_contract");
    assert!(
        v[3][1]
            .as_str()
            .unwrap()
            .starts_with("Invalid arguments for tool \"good\""),
        "{v}"
    );
    assert!(
        v[3][1].as_str().unwrap().contains("Did you mean: value?"),
        "{v}"
    );
    assert_eq!(v[4], "still here");
    let f = failed(&rt.exec(ExecInput::new("uncaught", "await bad({})")).await).clone();
    assert_eq!(
        f.error.lines().next().unwrap(),
        "Error: the service said no"
    );
    assert!(f.bridge_dispatch_started);
}

#[tokio::test]
async fn handles_describe_and_serialize_without_bridge_requests() {
    let (rt, _) = runtime_with(vec![t("weather", "Current weather")], Limits::default()).await;
    let r = rt.exec(ExecInput::new("handles", "const [h] = catalog.all(); const d = await h.describe(); json(h); return { d, same: catalog.all()[0] === weather, frozen: Object.isFrozen(catalog.all()) };")).await;
    let v = value(&r);
    assert_eq!(v["d"]["name"], "weather");
    assert_eq!(v["d"]["parameters"]["type"], "object");
    assert_eq!(v["same"], true);
    assert_eq!(v["frozen"], true);
    let meta = &r.output()[0]["value"];
    assert_eq!(meta["callableName"], "weather");
    assert_eq!(
        meta["input"],
        "{ index?: number /* integer */; value?: string }"
    );
    let tel = r.telemetry();
    assert_eq!(
        (
            tel.catalog.describe_count,
            tel.catalog.call_count,
            tel.catalog.search_count
        ),
        (1, 0, 0)
    );
}

#[tokio::test]
async fn timers_run_and_clear() {
    let rt = Runtime::builder().build().await.unwrap();
    let r = rt
        .exec(ExecInput::new(
            "timers",
            r#"
        const order = [];
        setTimeout((a, b) => order.push(a + b), 300, "t", "2");
        setTimeout(() => order.push("t1"), 10);
        const id = setTimeout(() => order.push("cleared"), 20);
        clearTimeout(id); clearTimeout(12345);
        let typeError = null; try { setTimeout("code", 1); } catch (e) { typeError = e.message; }
        await new Promise(r => setTimeout(r, 400));
        return { order, typeError };"#,
        ))
        .await;
    assert_eq!(
        value(&r),
        json!({"order": ["t1", "t2"], "typeError": "setTimeout callback must be a function"})
    );
}

#[tokio::test]
async fn command_tools_from_config_are_callable() {
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/tools/echo_args.sh");
    let config = quickcell::Config::parse(&format!(
        "[[tools]]\nname = \"echo_args\"\ndescription = \"Echo the arguments\"\ninput_schema = {{ type = \"object\" }}\ncommand = [{:?}]\n",
        script.display().to_string()
    ))
    .unwrap();
    let rt = Runtime::builder()
        .tools(ToolRegistry::from_config(&config).unwrap())
        .build()
        .await
        .unwrap();
    let r = rt
        .exec(ExecInput::new(
            "cmd",
            "return await echo_args({hello: 'world'})",
        ))
        .await;
    let v = value(&r);
    assert!(v.to_string().contains("world"), "{v}");
}

#[tokio::test]
async fn request_argument_cap_obeyed_and_violated() {
    let (rt, calls) = runtime_with(vec![t("take", "Takes a value")], Limits::default()).await;
    let r = rt
        .exec(ExecInput::new("cap", r#"
            const ok = (await take({value: "a".repeat(3 * 1024 * 1024)})).input.value.length;
            let err = null;
            try { await take({value: "a".repeat(5 * 1024 * 1024)}); } catch (e) { err = [e.code, e.message]; }
            return { ok, err };"#))
        .await;
    let v = value(&r);
    assert_eq!(v["ok"], 3 * 1024 * 1024);
    assert_eq!(v["err"][0], "invalid_input");
    assert!(
        v["err"][1]
            .as_str()
            .unwrap()
            .contains("the bridge accepts at most 4194304 bytes"),
        "{v}"
    );
    assert_eq!(
        calls[0].load(Ordering::SeqCst),
        1,
        "the oversized call never reached the tool"
    );
}

#[tokio::test]
async fn a_client_tool_shadows_a_host_tool_of_the_same_name() {
    let host = t("lookup", "Host lookup of records");
    let client = t("lookup", "Client lookup");
    let other_client = t("client_only", "A tool only the client has");
    let (host_calls, client_calls) = (host.calls.clone(), client.calls.clone());
    let mut registry = ToolRegistry::new();
    registry.add(Arc::new(host)).unwrap();
    registry.add_client(Arc::new(client)).unwrap();
    registry.add_client(Arc::new(other_client)).unwrap();
    let rt = Runtime::builder().tools(registry).build().await.unwrap();
    let r = rt
        .exec(ExecInput::new(
            "client",
            r#"const r = await lookup({value: "x"});
               const metas = catalog.all().map((h) => [h.callableName, h.source, h.input, h.description]);
               const found = await catalog.search("lookup records");
               return { r, metas, found: found.map((h) => h.source) };"#,
        ))
        .await;
    let v = value(&r);
    assert_eq!(v["r"]["input"], json!({"value": "x"}));
    assert_eq!(
        client_calls.load(Ordering::SeqCst),
        1,
        "the client tool ran"
    );
    assert_eq!(
        host_calls.load(Ordering::SeqCst),
        0,
        "the shadowed host tool did not"
    );
    // One `lookup`, the client's; client inputs are never hinted.
    assert_eq!(
        v["metas"],
        json!([
            [
                "client_only",
                "client",
                "unknown",
                "A tool only the client has"
            ],
            ["lookup", "client", "unknown", "Client lookup"]
        ])
    );
    assert!(
        v["found"].as_array().unwrap().iter().all(|s| s == "client"),
        "{v}"
    );
    assert_eq!(
        json(&r)["telemetry"]["sources"],
        json!({"host": 0, "mcp": 0, "client": 2})
    );
}

#[tokio::test]
async fn client_tools_are_never_replay_safe() {
    let mut client = t("reader", "Claims to be replay-safe");
    client.replay_safe = true;
    let mut registry = ToolRegistry::new();
    registry.add_client(Arc::new(client)).unwrap();
    let rt = Runtime::builder().tools(registry).build().await.unwrap();
    let mut input = ExecInput::new(
        "restart-safe",
        "try { await reader({}); return 'ran'; } catch (e) { return [e.code, e.message]; }",
    );
    input.restart_safe = true;
    let r = rt.exec(input).await;
    assert_eq!(
        value(&r),
        json!(["invalid_input", "restart-safe code mode cannot call tool surfaces that are not proven replay-safe; use audited read, grep, or find tools."])
    );
    assert_eq!(json(&r)["replaySafe"], json!(true));
}

#[tokio::test]
async fn restart_safe_cells_call_only_replay_safe_host_tools() {
    let mut audited = t("audited_read", "Read-only and replay-safe");
    audited.replay_safe = true;
    let mutate = t("mutate", "Changes things");
    let (audited_calls, mutate_calls) = (audited.calls.clone(), mutate.calls.clone());
    let (rt, _) = runtime_with(vec![audited, mutate], Limits::default()).await;
    let mut input = ExecInput::new(
        "restart-safe",
        "const a = await audited_read({}); try { await mutate({}); } catch (e) { return [a.name, e.code]; }",
    );
    input.restart_safe = true;
    let r = rt.exec(input).await;
    assert_eq!(value(&r), json!(["audited_read", "invalid_input"]));
    assert_eq!(audited_calls.load(Ordering::SeqCst), 1);
    assert_eq!(mutate_calls.load(Ordering::SeqCst), 0, "never dispatched");
}

#[tokio::test]
async fn replies_larger_than_the_reply_inbox_reject_instead_of_cutting() {
    // The reply inbox is min(memoryLimitBytes, maxSnapshotBytes) = 1,024 bytes.
    let tools: Vec<T> = (0..20)
        .map(|i| {
            t(
                &format!("widget_tool_{i:02}"),
                "Makes widgets of every kind",
            )
        })
        .collect();
    let (rt, _) = runtime_with(tools, Limits::default().with_max_snapshot_bytes(1024)).await;
    let r = rt
        .exec(ExecInput::new(
            "inbox",
            r#"let many;
               try { await catalog.search("widgets", {limit: 20}); many = "delivered"; }
               catch (e) { many = [e.code, e.message]; }
               const one = await catalog.search("widgets", {limit: 1});
               let big;
               try { await widget_tool_00({value: "v".repeat(2000)}); big = "delivered"; }
               catch (e) { big = [e.code, e.message]; }
               const small = await widget_tool_00({value: "ok"});
               return { many, one: one.length, big, small: small.input.value };"#,
        ))
        .await;
    let v = value(&r);
    assert_eq!(v["many"][0], "invalid_input");
    assert!(
        v["many"][1].as_str().unwrap().contains("Narrow the query"),
        "{v}"
    );
    assert_eq!(v["one"], 1);
    assert_eq!(v["big"][0], "tool_error");
    assert!(
        v["big"][1]
            .as_str()
            .unwrap()
            .contains("reply inbox holds at most 1024 bytes"),
        "{v}"
    );
    assert_eq!(v["small"], "ok");
}

#[tokio::test]
async fn api_read_serves_declaration_files() {
    let (rt, _) = runtime_with(
        vec![t("fake_create_ticket", "Create a fake ticket")],
        Limits::default(),
    )
    .await;
    let r = rt
        .exec(ExecInput::new(
            "api",
            r#"const results = await API.read("results.d.ts");
               const tool = await API.read("tools/fake_create_ticket.d.ts");
               const errors = [];
               for (const p of ["tools/../results.d.ts", "nope.d.ts"]) {
                 try { await API.read(p); } catch (e) { errors.push(e.message); }
               }
               return { results: results.includes("declare namespace results"), tool, errors, type: typeof API.read };"#,
        ))
        .await;
    let v = value(&r);
    assert_eq!(v["results"], true);
    assert!(
        v["tool"].as_str().unwrap().contains("fake_create_ticket"),
        "{v}"
    );
    assert!(
        v["errors"][0]
            .as_str()
            .unwrap()
            .contains("invalid API file path"),
        "{v}"
    );
    assert!(
        v["errors"][1]
            .as_str()
            .unwrap()
            .contains("Unknown API file: nope.d.ts"),
        "{v}"
    );
    assert_eq!(v["type"], "function");
}

/// Returns its input as it arrived.
struct Echo;

#[async_trait]
impl Tool for Echo {
    fn name(&self) -> &str {
        "echo"
    }
    fn description(&self) -> &str {
        "Returns its input"
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    async fn call(&self, args: Value, _cancel: CancelSignal) -> Result<Value, ToolError> {
        Ok(args)
    }
}

#[tokio::test]
async fn tool_inputs_are_sent_as_their_safe_projection() {
    let mut registry = ToolRegistry::new();
    registry.add(Arc::new(Echo)).unwrap();
    let rt = Runtime::builder().tools(registry).build().await.unwrap();
    // Plain data takes the Rust projection; functions, proxies and typed
    // arrays make the prelude project the input. Either way the tool gets
    // what the cell's own result shows for the same value.
    for input in [
        "{ n: 1, s: 'é\\u{1F600}', list: [1, 'x', null, undefined], nested: { d: new Date(0) } }",
        "{ bytes: new Uint8Array([1, 2]), n: 2 }",
        "{ p: new Proxy({ a: 1 }, {}), n: 3 }",
        "{ f() {}, handle: echo, n: 4 }",
    ] {
        let code = format!("const input = {input}; const got = await echo(input); return {{ got, direct: input }};");
        let r = rt.exec(ExecInput::new("echo", code.as_str())).await;
        let v = value(&r);
        assert_eq!(v["got"], v["direct"], "{input}: {v}");
        assert!(v["got"]["n"].is_number(), "{input}: {v}");
    }
}

/// Fuel is deterministic, so the guest's share of a tool round trip is a
/// regression gate: ~18.7k fuel per `await echo({})`. (A no-op tool's round
/// trip took ~40.4k before requests' promises moved to the Rust side of the
/// guest, ~21.3k before the guest's own allocator, ~17.1k now.)
#[tokio::test]
async fn a_tool_round_trip_stays_within_its_fuel_budget() {
    let mut registry = ToolRegistry::new();
    registry.add(Arc::new(Echo)).unwrap();
    let rt = Runtime::builder().tools(registry).build().await.unwrap();
    let fuel = |code: &'static str| {
        let rt = &rt;
        async move {
            let r = rt.exec(ExecInput::new("fuel", code)).await;
            assert_eq!(r.status(), "completed", "{}", r.to_json());
            r.telemetry().fuel_used
        }
    };
    let one = fuel("await echo({}); return 1").await;
    let hundred = fuel("for (let i = 0; i < 100; i++) await echo({}); return 1").await;
    let per_round_trip = (hundred - one) / 99;
    assert!(
        (17_000..=21_000).contains(&per_round_trip),
        "{per_round_trip} fuel per round trip"
    );
}

/// Resolving a request's promise with an object reads the object's `then`,
/// so a cell's own code runs in the middle of a settlement. A getter on
/// `Object.prototype.then` that starts another tool call there must work
/// like any other call (the guest keeps no borrow across the resolve).
#[tokio::test]
async fn a_then_getter_that_calls_a_tool_during_settlement() {
    let mut registry = ToolRegistry::new();
    registry.add(Arc::new(Echo)).unwrap();
    let rt = Runtime::builder().tools(registry).build().await.unwrap();
    let code = "let inner; \
        Object.defineProperty(Object.prototype, 'then', { configurable: true, get() { \
          delete Object.prototype.then; inner = echo({ n: 2 }); return undefined; } }); \
        const outer = await echo({ n: 1 }); \
        return { outer: outer.n, inner: (await inner).n };";
    let r = rt.exec(ExecInput::new("then", code)).await;
    assert_eq!(
        value(&r),
        json!({"outer": 1, "inner": 2}),
        "{}",
        r.to_json()
    );
}

/// Tool globals are made on first touch (accessors installed at start that
/// turn into plain data properties): whichever way a cell first reaches a
/// tool — its global, `catalog.all()` or `catalog.search` — it gets the one
/// handle, and assigning or deleting a global behaves as for any global.
#[tokio::test]
async fn tool_globals_are_one_handle_however_first_reached() {
    let mut registry = ToolRegistry::new();
    for name in ["alpha", "beta", "gamma", "delta"] {
        registry.add(Arc::new(t(name, "test tool"))).unwrap();
    }
    let rt = Runtime::builder().tools(registry).build().await.unwrap();
    let r = rt
        .exec(ExecInput::new(
            "globals",
            r#"const all = catalog.all();
               const byName = (n) => all.find((h) => h.callableName === n);
               const [found] = await catalog.search("gamma");
               const d = () => Object.getOwnPropertyDescriptor(globalThis, "alpha");
               const touched = [alpha === byName("alpha"), typeof alpha, d().enumerable, d().writable, d().configurable, "value" in d()];
               const viaSearch = found === gamma && gamma === byName("gamma");
               beta = 5;
               const assigned = [beta, byName("beta").callableName, (await byName("beta")({ value: "x" })).name];
               delete globalThis.delta;
               const deleted = [typeof delta, "delta" in globalThis, byName("delta").callableName];
               return { touched, viaSearch, assigned, deleted, keys: Object.keys(globalThis).includes("alpha") };"#,
        ))
        .await;
    assert_eq!(
        value(&r),
        json!({
            "touched": [true, "function", false, true, true, true],
            "viaSearch": true,
            "assigned": [5, "beta", "beta"],
            "deleted": ["undefined", false, "delta"],
            "keys": false,
        })
    );
}

/// A catalog tool costs a cell's start a few thousand fuel, not the ~45k it
/// cost when every handle was built up front: the difference between a
/// trivial cell over 201 tools and over one tool, per tool, stays in a band.
#[tokio::test]
async fn catalog_size_costs_cell_start_little_fuel() {
    let fuel = |extra: usize| async move {
        let mut registry = ToolRegistry::new();
        registry.add(Arc::new(Echo)).unwrap();
        for i in 0..extra {
            registry
                .add(Arc::new(t(&format!("tool_{i}"), "test tool")))
                .unwrap();
        }
        let rt = Runtime::builder().tools(registry).build().await.unwrap();
        let r = rt.exec(ExecInput::new("fuel", "return 1")).await;
        assert_eq!(r.status(), "completed", "{}", r.to_json());
        r.telemetry().fuel_used
    };
    let per_tool = (fuel(200).await - fuel(0).await) / 200;
    assert!(
        (3_000..=8_000).contains(&per_tool),
        "{per_tool} fuel per catalog tool"
    );
}
