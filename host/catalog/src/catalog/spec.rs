//! A tool definition as its provider supplies it.

use serde_json::Value;

/// Whether a tool goes through the catalog or is called by the model itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CatalogMode {
    /// Cataloged (hidden behind search / globals).
    #[default]
    Normal,
    /// `catalogMode: "direct-only"`: never cataloged; the model calls it.
    DirectOnly,
}

/// A tool definition as supplied by its provider.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ToolSpec {
    /// Exact tool name.
    pub name: String,
    /// Description (indexed; shown per the trust rules).
    pub description: String,
    /// Display label; defaults to the name where one is shown.
    pub label: Option<String>,
    /// JSON Schema of the input object.
    pub input_schema: Option<Value>,
    /// JSON Schema of the result details (trusted host tools only use it).
    pub output_schema: Option<Value>,
    /// Audited replay-safe (may run in `restartSafe` cells).
    pub replay_safe: bool,
    /// Normal or direct-only.
    pub catalog_mode: CatalogMode,
    /// A host-designated core primitive that stays model-visible in Tool
    /// Search modes: still cataloged, but not listed in the directory.
    pub always_visible: bool,
}

impl ToolSpec {
    /// A normal tool with a name and description.
    pub fn new(name: impl Into<String>, description: impl Into<String>) -> Self {
        ToolSpec {
            name: name.into(),
            description: description.into(),
            ..ToolSpec::default()
        }
    }

    /// Set the input schema.
    pub fn with_input_schema(mut self, schema: Value) -> Self {
        self.input_schema = Some(schema);
        self
    }

    /// Set the output schema.
    pub fn with_output_schema(mut self, schema: Value) -> Self {
        self.output_schema = Some(schema);
        self
    }

    /// Set the label.
    pub fn with_label(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into());
        self
    }

    /// Mark replay-safe.
    pub fn replay_safe(mut self) -> Self {
        self.replay_safe = true;
        self
    }

    /// Mark direct-only.
    pub fn direct_only(mut self) -> Self {
        self.catalog_mode = CatalogMode::DirectOnly;
        self
    }

    /// Mark as an always-visible core primitive.
    pub fn always_visible(mut self) -> Self {
        self.always_visible = true;
        self
    }
}
