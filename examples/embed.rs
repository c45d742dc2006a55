//! The smallest embedder: the library without default features, one tool
//! of its own, one cell. `cargo run --example embed --no-default-features`
//! runs it; its release build is the library's share of a binary (README,
//! "Cold start and binary size").

use quickcell::tools::{async_trait, CancelSignal, Tool, ToolError};
use quickcell::{ExecInput, Runtime, ToolRegistry};
use serde_json::{json, Value};

/// A tool that answers every city with the same temperature.
struct Weather;

#[async_trait]
impl Tool for Weather {
    fn name(&self) -> &str {
        "weather"
    }
    fn description(&self) -> &str {
        "Current temperature of a city, in degrees Celsius"
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {"city": {"type": "string"}}})
    }
    async fn call(&self, args: Value, _: CancelSignal) -> Result<Value, ToolError> {
        Ok(json!({"city": args["city"], "celsius": 21}))
    }
}

#[tokio::main]
async fn main() -> Result<(), quickcell::Error> {
    let mut tools = ToolRegistry::new();
    tools.add(std::sync::Arc::new(Weather))?;
    let runtime = Runtime::builder().tools(tools).build().await?;
    let cell = "const all = await Promise.all(['Oslo', 'Lima'].map((city) => weather({ city })));
                return all.map((w) => `${w.city}: ${w.celsius}`).join(', ');";
    let result = runtime.exec(ExecInput::new("weather", cell)).await;
    println!("{}", result.to_json());
    Ok(())
}
