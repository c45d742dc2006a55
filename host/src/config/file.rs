//! The configuration file's one parser: serde structs that mirror its
//! tables, read with `toml`, then turned into [`Config`]'s public types.
//!
//! Every table is a `Raw*` struct with `#[serde(deny_unknown_fields)]`, so
//! an unknown key anywhere is an error; a wrong type is serde's error too.
//! Both are located by [`Problem`]. What serde cannot check (duplicate tool
//! names, a `[[tools]]` entry's invariants in
//! [`CommandToolConfig::validate`], an MCP server's transport in
//! [`crate::tools::mcp::server_from_keys`]) is checked here after deserializing and
//! reported at the entry's table.
//!
//! | table | raw struct | public type |
//! | --- | --- | --- |
//! | the file | `RawConfig` | [`Config`] |
//! | `[limits]` | `RawLimits` | [`Limits`] |
//! | `[host]` | `RawHost` | [`HostLimits`] |
//! | `[http]` | `RawHttp` | [`HttpLimits`] |
//! | `[[tools]]` | `RawTool` | [`CommandToolConfig`] |
//! | `[workspace]` | `RawWorkspace` | [`Config::workspace_root`] |
//! | `[policy]` | `RawPolicy` | [`crate::catalog::Policy`] |
//! | `[mcp]`, `[mcp.servers.NAME]` | `RawMcp`, `RawServer` | [`McpServerConfig`] |
//!
//! A limit key (`[limits]`, `[host]`, the numbers of `[http]`) takes any
//! value ([`Setting`]): the contract's rule makes a non-integer or
//! non-positive value the default, not an error.

use super::problem::Problem;
use super::{Config, Fuel, HostLimits, HttpLimits, Limits};
use crate::tools::mcp::McpServerConfig;
use crate::tools::{CommandToolConfig, MAX_COMMAND_TIMEOUT_MS};
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use toml::Spanned;

/// Parses configuration text.
pub(super) fn parse(text: &str) -> Result<Config, Problem> {
    let document = toml::de::Deserializer::parse(text).map_err(|e| Problem::malformed(text, &e))?;
    let mut raw =
        RawConfig::deserialize(document).map_err(|e| Problem::from_serde(Some(text), &e))?;
    Ok(Config {
        limits: raw.limits.map_or_else(Limits::default, RawLimits::limits),
        host: match raw.host {
            Some(host) => host.limits(text)?,
            None => HostLimits::default(),
        },
        http: raw.http.map_or_else(HttpLimits::default, RawHttp::limits),
        tools: match raw.tools {
            Some(Tools(entries)) => tools(text, entries)?,
            None => Vec::new(),
        },
        workspace_root: raw.workspace.and_then(|w| w.root).map(PathBuf::from),
        mcp: match &mut raw.mcp {
            Some(mcp) => mcp.options(text)?,
            None => super::McpOptions::default(),
        },
        mcp_servers: match raw.mcp.and_then(|mcp| mcp.servers) {
            Some(servers) => mcp_servers(text, servers)?,
            None => Vec::new(),
        },
        policy: match raw.policy {
            Some(policy) => {
                let span = policy.span();
                let policy = policy.into_inner().policy();
                policy
                    .check()
                    .map_err(|message| Problem::at(text, span, message))?;
                policy
            }
            None => quickcell_catalog::Policy::default(),
        },
        tool_search: raw
            .tool_search
            .map(RawToolSearch::config)
            .unwrap_or_default(),
        quotas: raw.quotas.map(RawQuotas::quotas).unwrap_or_default(),
        state_key_file: raw
            .state
            .as_ref()
            .and_then(|s| s.key_file.clone())
            .map(PathBuf::from),
        state_url: match raw.state.and_then(|s| s.url) {
            Some(url) => {
                let span = url.span();
                let url = url.into_inner();
                super::check_state_url(&url).map_err(|message| {
                    Problem::at(text, span, format!("`state.url`: {message}"))
                })?;
                Some(url)
            }
            None => None,
        },
        telemetry: match raw.telemetry {
            Some(telemetry) => telemetry.config(text)?,
            None => super::TelemetryConfig::default(),
        },
    })
}

/// The file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct RawConfig {
    limits: Option<RawLimits>,
    host: Option<RawHost>,
    http: Option<RawHttp>,
    tools: Option<Tools>,
    workspace: Option<RawWorkspace>,
    mcp: Option<RawMcp>,
    policy: Option<Spanned<RawPolicy>>,
    tool_search: Option<RawToolSearch>,
    quotas: Option<RawQuotas>,
    telemetry: Option<RawTelemetry>,
    state: Option<RawState>,
}

/// `[state]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct RawState {
    url: Option<Spanned<String>>,
    key_file: Option<String>,
}

/// `[telemetry]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct RawTelemetry {
    otlp_endpoint: Option<Spanned<String>>,
}

impl RawTelemetry {
    fn config(self, text: &str) -> Result<super::TelemetryConfig, Problem> {
        let mut config = super::TelemetryConfig::default();
        if let Some(endpoint) = self.otlp_endpoint {
            let span = endpoint.span();
            let endpoint = endpoint.into_inner();
            super::check_otlp_endpoint(&endpoint).map_err(|message| {
                Problem::at(text, span, format!("`telemetry.otlp_endpoint`: {message}"))
            })?;
            config.otlp_endpoint = Some(endpoint);
        }
        Ok(config)
    }
}

/// `[quotas]`: a positive integer sets a quota; anything else, none.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct RawQuotas {
    fuel_per_session_per_hour: Option<Setting>,
    cells_per_session_per_minute: Option<Setting>,
}

impl RawQuotas {
    fn quotas(self) -> super::Quotas {
        let value = |s: Option<Setting>| s.map_or(0, Setting::value);
        super::Quotas::default()
            .with_fuel_per_session_per_hour(value(self.fuel_per_session_per_hour))
            .with_cells_per_session_per_minute(value(self.cells_per_session_per_minute))
    }
}

/// `[tool_search]` (tool-search.md §2.1).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct RawToolSearch {
    enabled: Option<bool>,
    mode: Option<RawToolSearchMode>,
    search_default_limit: Option<Setting>,
    max_search_limit: Option<Setting>,
    lean: Option<bool>,
}

#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum RawToolSearchMode {
    Code,
    Tools,
    Directory,
}

impl RawToolSearch {
    fn config(self) -> super::ToolSearchConfig {
        use super::ToolSearchMode as Mode;
        // A non-positive or non-integer limit falls back to the default,
        // as if unset (but still activates Tool Search).
        let limit = |s: Option<Setting>| s.map(|s| s.value()).filter(|&n| n > 0);
        let given = |s: &Option<Setting>| s.is_some();
        let any_limit = given(&self.search_default_limit) || given(&self.max_search_limit);
        super::ToolSearchConfig {
            enabled: self.enabled.or(any_limit.then_some(true)),
            mode: self.mode.map(|m| match m {
                RawToolSearchMode::Code => Mode::Code,
                RawToolSearchMode::Tools => Mode::Tools,
                RawToolSearchMode::Directory => Mode::Directory,
            }),
            search_default_limit: limit(self.search_default_limit),
            max_search_limit: limit(self.max_search_limit),
            lean: self.lean.unwrap_or(false),
        }
    }
}

/// `[policy]`: glob lists of tool names (`<server>.<tool>` for MCP tools).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct RawPolicy {
    allow: Option<Vec<String>>,
    deny: Option<Vec<String>>,
    approve: Option<Vec<String>>,
}

impl RawPolicy {
    fn policy(self) -> quickcell_catalog::Policy {
        quickcell_catalog::Policy {
            allow: self.allow,
            deny: self.deny.unwrap_or_default(),
            approve: self.approve.unwrap_or_default(),
        }
    }
}

/// `[limits]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct RawLimits {
    timeout_ms: Option<Setting>,
    memory_limit_bytes: Option<Setting>,
    max_output_bytes: Option<Setting>,
    max_snapshot_bytes: Option<Setting>,
    max_pending_tool_calls: Option<Setting>,
    snapshot_ttl_seconds: Option<Setting>,
    search_default_limit: Option<Setting>,
    max_search_limit: Option<Setting>,
    fuel: Option<Setting>,
}

impl RawLimits {
    fn limits(self) -> Limits {
        let limits = apply(
            Limits::default(),
            [
                // First, so `search_default_limit` is clamped to it.
                (self.max_search_limit, Limits::with_max_search_limit),
                (self.timeout_ms, Limits::with_timeout_ms),
                (self.memory_limit_bytes, Limits::with_memory_limit_bytes),
                (self.max_output_bytes, Limits::with_max_output_bytes),
                (self.max_snapshot_bytes, Limits::with_max_snapshot_bytes),
                (
                    self.max_pending_tool_calls,
                    Limits::with_max_pending_tool_calls,
                ),
                (self.snapshot_ttl_seconds, Limits::with_snapshot_ttl_seconds),
                (self.search_default_limit, Limits::with_search_default_limit),
            ],
        );
        match self.fuel {
            None => limits,
            Some(Setting::False) => limits.with_fuel(Fuel::Unlimited),
            Some(fuel) => limits.with_fuel(Fuel::Limited(fuel.value())),
        }
    }
}

/// `[host]`: the operator's host-wide caps and the shares of them. Unlike
/// `[limits]` (the contract's rule: any value, non-positive → default), a
/// value here outside its range is an error naming the key: a share of 0
/// or one larger than what it is a share of is a mistake in the file, not
/// something to correct silently and discover at run time.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct RawHost {
    max_suspended_runs: Option<Spanned<Setting>>,
    max_suspended_runs_per_session: Option<Spanned<Setting>>,
    max_running_cells_per_session: Option<Spanned<Setting>>,
    max_await_results_ms: Option<Spanned<Setting>>,
    approval_timeout_ms: Option<Spanned<Setting>>,
    drain_timeout_ms: Option<Spanned<Setting>>,
}

impl RawHost {
    fn limits(self, text: &str) -> Result<HostLimits, Problem> {
        use super::host_range as range;
        let mut host = HostLimits::default();
        if let Some(n) = strict(
            text,
            "max_suspended_runs",
            self.max_suspended_runs,
            range::SUSPENDED_RUNS,
        )? {
            host = host.with_max_suspended_runs(n);
        }
        // Checked against the total set above (or its default).
        let share = (1, host.max_suspended_runs());
        if let Some(n) = strict(
            text,
            "max_suspended_runs_per_session",
            self.max_suspended_runs_per_session,
            share,
        )? {
            host = host.with_max_suspended_runs_per_session(n);
        }
        if let Some(n) = strict(
            text,
            "max_running_cells_per_session",
            self.max_running_cells_per_session,
            range::RUNNING_CELLS_PER_SESSION,
        )? {
            host = host.with_max_running_cells_per_session(n);
        }
        if let Some(n) = strict(
            text,
            "max_await_results_ms",
            self.max_await_results_ms,
            range::WAIT_MS,
        )? {
            host = host.with_max_await_results_ms(n);
        }
        if let Some(n) = strict(
            text,
            "approval_timeout_ms",
            self.approval_timeout_ms,
            range::WAIT_MS,
        )? {
            host = host.with_approval_timeout_ms(n);
        }
        if let Some(n) = strict(
            text,
            "drain_timeout_ms",
            self.drain_timeout_ms,
            range::DRAIN_MS,
        )? {
            host = host.with_drain_timeout_ms(n);
        }
        Ok(host)
    }
}

/// A `[host]` key's value: an integer in `min..=max`, else an error that
/// names the key, the range and what the file says.
fn strict(
    text: &str,
    key: &str,
    value: Option<Spanned<Setting>>,
    range: (u64, u64),
) -> Result<Option<u64>, Problem> {
    strict_in(text, "host", key, value, range)
}

/// [`strict`] for a key of the table `table`.
fn strict_in(
    text: &str,
    table: &str,
    key: &str,
    value: Option<Spanned<Setting>>,
    (min, max): (u64, u64),
) -> Result<Option<u64>, Problem> {
    let Some(value) = value else {
        return Ok(None);
    };
    let span = value.span();
    match value.into_inner() {
        Setting::Integer(n) if n >= 0 && (min..=max).contains(&(n as u64)) => Ok(Some(n as u64)),
        setting => {
            let got = match setting {
                Setting::Integer(n) => n.to_string(),
                _ => "a value of another type".to_string(),
            };
            let what = if key == "max_suspended_runs_per_session" {
                format!(" (a share of `host.max_suspended_runs`, {max})")
            } else {
                String::new()
            };
            Err(Problem::at(
                text,
                span,
                format!("`{table}.{key}`: must be an integer from {min} to {max}{what}, got {got}"),
            ))
        }
    }
}

/// `[http]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct RawHttp {
    max_body_bytes: Option<Setting>,
    max_sessions: Option<Setting>,
    session_idle_seconds: Option<Setting>,
    allowed_origins: Option<Strings>,
    allowed_hosts: Option<Strings>,
    auth_token_file: Option<String>,
}

impl RawHttp {
    fn limits(self) -> HttpLimits {
        let mut http = apply(
            HttpLimits::default(),
            [
                (self.max_body_bytes, HttpLimits::with_max_body_bytes),
                (self.max_sessions, HttpLimits::with_max_sessions),
                (
                    self.session_idle_seconds,
                    HttpLimits::with_session_idle_seconds,
                ),
            ],
        );
        if let Some(Strings(origins)) = self.allowed_origins {
            http = http.with_allowed_origins(origins);
        }
        if let Some(Strings(hosts)) = self.allowed_hosts {
            http = http.with_allowed_hosts(hosts);
        }
        http.with_auth_token_file(self.auth_token_file.map(PathBuf::from))
    }
}

/// A limit key's value and the `with_*` setter it goes to.
type LimitKey<T> = (Option<Setting>, fn(T, u64) -> T);

/// Applies each limit key that is present, in order, with its setter.
fn apply<T, const N: usize>(limits: T, keys: [LimitKey<T>; N]) -> T {
    keys.into_iter()
        .fold(limits, |limits, (value, setter)| match value {
            Some(value) => setter(limits, value.value()),
            None => limits,
        })
}

/// `[workspace]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct RawWorkspace {
    /// The directory of the built-in read-only tools.
    root: Option<String>,
}

/// One `[[tools]]` entry (the keys are documented in
/// [`crate::tools::command`]).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct RawTool {
    name: String,
    description: String,
    /// A table, or a string holding a JSON object.
    input_schema: toml::Value,
    /// Like `input_schema`.
    output_schema: Option<toml::Value>,
    command: Strings,
    replay_safe: Option<bool>,
    timeout_ms: Option<Integer>,
}

impl RawTool {
    /// The declaration, checked; the error names the key.
    fn tool(self) -> Result<CommandToolConfig, String> {
        let timeout_ms = match self.timeout_ms {
            None => None,
            Some(Integer(n)) if n >= 1 => Some(n as u64),
            Some(_) => {
                return Err(format!(
                    "`timeout_ms`: must be an integer from 1 to {MAX_COMMAND_TIMEOUT_MS}"
                ))
            }
        };
        let config = CommandToolConfig {
            name: self.name,
            description: self.description,
            input_schema: schema("input_schema", self.input_schema)?,
            output_schema: self
                .output_schema
                .map(|value| schema("output_schema", value))
                .transpose()?,
            command: self.command.0,
            replay_safe: self.replay_safe.unwrap_or(false),
            timeout_ms,
        };
        config.validate()?;
        Ok(config)
    }
}

/// The `[[tools]]` entries, checked, in file order; two entries with the
/// same name are an error.
fn tools(text: &str, entries: Vec<Spanned<RawTool>>) -> Result<Vec<CommandToolConfig>, Problem> {
    let mut out: Vec<CommandToolConfig> = Vec::with_capacity(entries.len());
    for (i, entry) in entries.into_iter().enumerate() {
        let span = entry.span();
        let problem =
            |message: String| Problem::at(text, span.clone(), format!("tools[{i}]: {message}"));
        let tool = entry.into_inner().tool().map_err(problem)?;
        if let Some(j) = out.iter().position(|t| t.name == tool.name) {
            return Err(problem(format!(
                "`name`: {:?} is already used by tools[{j}]",
                tool.name
            )));
        }
        out.push(tool);
    }
    Ok(out)
}

/// A `[[tools]]` entry inside any serde-based configuration, with the same
/// keys, checks and messages as in the configuration file. Read on its own,
/// the entry is written out as a TOML document of its own and parsed like
/// a file, so that a problem names its key; the line would be that
/// document's, so it is left out.
impl<'de> Deserialize<'de> for CommandToolConfig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let entry = toml::Value::deserialize(deserializer)?;
        let toml::Value::Table(entry) = entry else {
            return Err(de::Error::custom("must be a table"));
        };
        let text = toml::to_string(&entry).map_err(de::Error::custom)?;
        let raw = toml::from_str::<RawTool>(&text)
            .map_err(|e| de::Error::custom(Problem::from_serde(Some(&text), &e).message()))?;
        raw.tool().map_err(de::Error::custom)
    }
}

/// A schema key's JSON object: a table, or a string holding a JSON object.
fn schema(key: &str, value: toml::Value) -> Result<Value, String> {
    let value = match value {
        toml::Value::String(text) => serde_json::from_str::<Value>(&text)
            .map_err(|e| format!("`{key}`: invalid JSON: {e}"))?,
        table @ toml::Value::Table(_) => toml_to_json(&table).map_err(|e| format!("`{key}`{e}"))?,
        _ => {
            return Err(format!(
                "`{key}`: must be a table or a string holding a JSON object"
            ))
        }
    };
    if !value.is_object() {
        return Err(format!("`{key}`: must be a JSON object"));
    }
    Ok(value)
}

/// Converts a TOML value to JSON; the error is a suffix to the key name
/// (a nested path, then the reason).
fn toml_to_json(v: &toml::Value) -> Result<Value, String> {
    Ok(match v {
        toml::Value::String(s) => Value::String(s.clone()),
        toml::Value::Integer(i) => Value::from(*i),
        toml::Value::Float(f) => serde_json::Number::from_f64(*f)
            .map(Value::Number)
            .ok_or_else(|| format!(": the float {f} has no JSON form"))?,
        toml::Value::Boolean(b) => Value::Bool(*b),
        toml::Value::Datetime(d) => {
            return Err(format!(
                ": the datetime {d} has no JSON form; quote it as a string"
            ))
        }
        toml::Value::Array(items) => Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, v)| toml_to_json(v).map_err(|e| format!("[{i}]{e}")))
                .collect::<Result<_, _>>()?,
        ),
        toml::Value::Table(t) => {
            let mut map = Map::with_capacity(t.len());
            for (k, v) in t {
                map.insert(k.clone(), toml_to_json(v).map_err(|e| format!(".{k}{e}"))?);
            }
            Value::Object(map)
        }
    })
}

/// `[mcp]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct RawMcp {
    servers: Option<BTreeMap<String, Spanned<RawServer>>>,
    tools_ttl_ms: Option<Spanned<Setting>>,
    cache_scope: Option<Spanned<String>>,
    principal: Option<Spanned<String>>,
    task_ttl_ms: Option<Spanned<Setting>>,
}

impl RawMcp {
    /// The `[mcp]` keys other than `servers` (taken from `self`).
    fn options(&mut self, text: &str) -> Result<super::McpOptions, Problem> {
        let mut options = super::McpOptions::default();
        if let Some(ms) = strict_in(
            text,
            "mcp",
            "tools_ttl_ms",
            self.tools_ttl_ms.take(),
            (0, super::MAX_TOOLS_TTL_MS),
        )? {
            options.tools_ttl_ms = ms;
        }
        if let Some(ms) = strict_in(
            text,
            "mcp",
            "task_ttl_ms",
            self.task_ttl_ms.take(),
            (1_000, super::MAX_TASK_TTL_MS),
        )? {
            options.task_ttl_ms = ms;
        }
        if let Some(scope) = self.cache_scope.take() {
            let span = scope.span();
            options.cache_public = match scope.into_inner().as_str() {
                "public" => true,
                "private" => false,
                other => {
                    return Err(Problem::at(
                        text,
                        span,
                        format!(
                            "`mcp.cache_scope`: must be \"public\" or \"private\", got {other:?}"
                        ),
                    ))
                }
            };
        }
        if let Some(principal) = self.principal.take() {
            let span = principal.span();
            let principal = principal.into_inner();
            if !super::valid_principal(&principal) {
                return Err(Problem::at(
                    text,
                    span,
                    format!(
                        "`mcp.principal`: must be 1 to 64 of A-Z a-z 0-9 . _ -, got {principal:?}"
                    ),
                ));
            }
            options.principal = Some(principal);
        }
        Ok(options)
    }
}

/// One `[mcp.servers.NAME]` table (the keys are documented in
/// [`crate::tools::mcp`]).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct RawServer {
    command: Option<String>,
    args: Option<Strings>,
    env: Option<BTreeMap<String, String>>,
    url: Option<String>,
    timeout_ms: Option<Integer>,
}

/// The `[mcp.servers.NAME]` entries, in name order.
fn mcp_servers(
    text: &str,
    servers: BTreeMap<String, Spanned<RawServer>>,
) -> Result<Vec<McpServerConfig>, Problem> {
    servers
        .into_iter()
        .map(|(name, server)| {
            let span = server.span();
            let server = server.into_inner();
            crate::tools::mcp::server_from_keys(
                &name,
                server.command,
                server.args.map(|args| args.0).unwrap_or_default(),
                server.env.unwrap_or_default(),
                server.url,
                server.timeout_ms.map(|t| t.0),
            )
            .map_err(|message| Problem::at(text, span, message))
        })
        .collect()
}

/// TOML integers are 64-bit: a larger one is an error, as the TOML
/// specification asks.
const TOO_LARGE: &str = "the integer does not fit in 64 bits";

/// A limit key's value as written: any value is accepted, and only a
/// positive integer counts (the contract's rule).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Setting {
    Integer(i64),
    /// `false` (`fuel = false` is unlimited fuel).
    False,
    /// Any other value: the default.
    Other,
}

impl Setting {
    /// What the key's `with_*` setter takes: a positive integer as it is,
    /// anything else 0, which the setters read as the default.
    fn value(self) -> u64 {
        match self {
            Setting::Integer(n) if n > 0 => n as u64,
            _ => 0,
        }
    }
}

impl<'de> Deserialize<'de> for Setting {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Any;
        impl<'de> Visitor<'de> for Any {
            type Value = Setting;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any value")
            }
            fn visit_i64<E>(self, n: i64) -> Result<Setting, E> {
                Ok(Setting::Integer(n))
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Setting, E> {
                i64::try_from(n)
                    .map(Setting::Integer)
                    .map_err(|_| E::custom(TOO_LARGE))
            }
            fn visit_i128<E: de::Error>(self, _: i128) -> Result<Setting, E> {
                Err(E::custom(TOO_LARGE))
            }
            fn visit_u128<E: de::Error>(self, _: u128) -> Result<Setting, E> {
                Err(E::custom(TOO_LARGE))
            }
            fn visit_bool<E>(self, b: bool) -> Result<Setting, E> {
                Ok(if b { Setting::Other } else { Setting::False })
            }
            fn visit_f64<E>(self, _: f64) -> Result<Setting, E> {
                Ok(Setting::Other)
            }
            fn visit_str<E>(self, _: &str) -> Result<Setting, E> {
                Ok(Setting::Other)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Setting, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Setting::Other)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Setting, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Setting::Other)
            }
        }
        deserializer.deserialize_any(Any)
    }
}

/// An integer (a timeout of a tool or server; the range is checked where
/// it is used).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Integer(i64);

impl<'de> Deserialize<'de> for Integer {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Int;
        impl<'de> Visitor<'de> for Int {
            type Value = Integer;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an integer")
            }
            fn visit_i64<E>(self, n: i64) -> Result<Integer, E> {
                Ok(Integer(n))
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Integer, E> {
                i64::try_from(n)
                    .map(Integer)
                    .map_err(|_| E::custom(TOO_LARGE))
            }
            fn visit_i128<E: de::Error>(self, _: i128) -> Result<Integer, E> {
                Err(E::custom(TOO_LARGE))
            }
            fn visit_u128<E: de::Error>(self, _: u128) -> Result<Integer, E> {
                Err(E::custom(TOO_LARGE))
            }
        }
        deserializer.deserialize_i64(Int)
    }
}

/// An array of strings; an element of another type fails the whole array,
/// so the message names the key.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Strings(Vec<String>);

impl<'de> Deserialize<'de> for Strings {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct List;
        impl<'de> Visitor<'de> for List {
            type Value = Strings;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an array of strings")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Strings, A::Error> {
                let mut out = Vec::new();
                loop {
                    match seq.next_element::<String>() {
                        Ok(Some(item)) => out.push(item),
                        Ok(None) => return Ok(Strings(out)),
                        Err(_) => return Err(de::Error::invalid_type(de::Unexpected::Seq, &self)),
                    }
                }
            }
        }
        deserializer.deserialize_seq(List)
    }
}

/// The `tools` key: an array of tables.
struct Tools(Vec<Spanned<RawTool>>);

impl<'de> Deserialize<'de> for Tools {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct List;
        impl<'de> Visitor<'de> for List {
            type Value = Tools;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an array of tables ([[tools]])")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Tools, A::Error> {
                let mut out = Vec::new();
                while let Some(entry) = seq.next_element()? {
                    out.push(entry);
                }
                Ok(Tools(out))
            }
        }
        deserializer.deserialize_seq(List)
    }
}

#[cfg(test)]
#[path = "file_tests.rs"]
mod tests;
