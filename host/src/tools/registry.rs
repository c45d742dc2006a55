//! [`ToolSet`]: the tools a runtime exposes, in registration order.

use super::Tool;
use std::collections::HashMap;
use std::sync::Arc;

/// Why a tool could not be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolSetError {
    /// Another registered tool already has this exact name.
    #[error("a tool named `{0}` is already registered")]
    Duplicate(String),
    /// The tool's name is empty.
    #[error("a tool name must not be empty")]
    EmptyName,
}

/// Registry of tools, kept in registration order, with unique exact names.
///
/// Registration order is the catalog order the guest sees. Cloning is cheap
/// (the tools are shared `Arc`s).
#[derive(Clone, Default)]
pub struct ToolSet {
    tools: Vec<Arc<dyn Tool>>,
    by_name: HashMap<String, usize>,
}

impl ToolSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `tool` after the ones already registered. Fails, leaving the
    /// set unchanged, if its name is empty or already taken.
    pub fn register(&mut self, tool: Arc<dyn Tool>) -> Result<(), ToolSetError> {
        let name = tool.name();
        if name.is_empty() {
            return Err(ToolSetError::EmptyName);
        }
        if self.by_name.contains_key(name) {
            return Err(ToolSetError::Duplicate(name.to_owned()));
        }
        self.by_name.insert(name.to_owned(), self.tools.len());
        self.tools.push(tool);
        Ok(())
    }

    /// Registers every tool of `tools` in order; stops at the first error
    /// (the tools before it stay registered).
    pub fn register_all(
        &mut self,
        tools: impl IntoIterator<Item = Arc<dyn Tool>>,
    ) -> Result<(), ToolSetError> {
        tools.into_iter().try_for_each(|t| self.register(t))
    }

    /// Builder form of [`register`](Self::register).
    pub fn with(mut self, tool: Arc<dyn Tool>) -> Result<Self, ToolSetError> {
        self.register(tool)?;
        Ok(self)
    }

    /// The tool with exactly this name.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.by_name.get(name).map(|&i| &self.tools[i])
    }

    /// The tools in registration order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &Arc<dyn Tool>> {
        self.tools.iter()
    }

    /// The tool names in registration order.
    pub fn names(&self) -> impl ExactSizeIterator<Item = &str> {
        self.tools.iter().map(|t| t.name())
    }

    /// Number of registered tools.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// Whether no tool is registered.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}

impl std::fmt::Debug for ToolSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::super::{async_trait, CancelSignal, ToolError};
    use super::*;
    use serde_json::{json, Value};

    struct Named(&'static str);

    #[async_trait]
    impl Tool for Named {
        fn name(&self) -> &str {
            self.0
        }
        fn description(&self) -> &str {
            "test tool"
        }
        fn input_schema(&self) -> Value {
            json!({"type": "object"})
        }
        async fn call(&self, args: Value, _cancel: CancelSignal) -> Result<Value, ToolError> {
            Ok(json!({"tool": self.0, "args": args}))
        }
    }

    #[tokio::test]
    async fn keeps_order_and_rejects_duplicates() {
        let mut set = ToolSet::new();
        set.register(Arc::new(Named("b"))).unwrap();
        set.register(Arc::new(Named("a"))).unwrap();
        assert_eq!(
            set.register(Arc::new(Named("b"))),
            Err(ToolSetError::Duplicate("b".into()))
        );
        assert_eq!(
            set.register(Arc::new(Named(""))),
            Err(ToolSetError::EmptyName)
        );
        assert_eq!(set.names().collect::<Vec<_>>(), ["b", "a"]);
        assert_eq!(set.len(), 2);
        let tool = set.get("a").unwrap();
        assert!(!tool.replay_safe());
        assert_eq!(tool.output_schema(), None);
        let out = tool.call(json!(1), CancelSignal::new()).await.unwrap();
        assert_eq!(out, json!({"tool": "a", "args": 1}));
        assert!(set.get("c").is_none());
        assert_eq!(format!("{set:?}"), r#"["b", "a"]"#);
    }

    #[test]
    fn builder_and_register_all() {
        let set = ToolSet::new()
            .with(Arc::new(Named("x")))
            .unwrap()
            .with(Arc::new(Named("y")))
            .unwrap();
        assert_eq!(set.len(), 2);
        let mut set2 = ToolSet::new();
        let tools: Vec<Arc<dyn Tool>> = vec![
            Arc::new(Named("p")),
            Arc::new(Named("q")),
            Arc::new(Named("p")),
        ];
        assert!(set2.register_all(tools).is_err());
        assert_eq!(set2.names().collect::<Vec<_>>(), ["p", "q"]);
    }
}
