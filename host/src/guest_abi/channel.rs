//! The cell's output channel on the host side: the ordered entries a cell
//! emitted (`text`, `json`, `console`) that no result has delivered yet.
//!
//! The guest can emit without bound, so the host keeps at most
//! [`OutputBuffer::cap`] bytes of entries — the cell's whole output budget
//! (`maxOutputBytes`); nothing beyond it could ever be delivered. Entries
//! past the cap are counted, and the first of them keeps a bounded prefix,
//! so the result can still report what was cut.

/// Undelivered output entries, each the compact JSON text of
/// `{"type":"text","text":..}` or `{"type":"json","value":..}`.
#[derive(Debug, Default, Clone)]
pub(crate) struct OutputBuffer {
    cap: usize,
    entries: Vec<String>,
    kept_bytes: usize,
    /// Entries dropped because the cap was reached.
    pub dropped_entries: usize,
    /// Bytes of the dropped entries.
    pub dropped_bytes: usize,
    /// Leading bytes (at most `cap`) of the first dropped entry.
    pub dropped_prefix: Option<String>,
}

impl OutputBuffer {
    /// An empty buffer that keeps at most `cap` bytes of entries.
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            cap,
            ..Self::default()
        }
    }

    /// Appends one entry's JSON text as the guest emitted it.
    pub(crate) fn push_raw(&mut self, bytes: &[u8]) {
        if self.dropped_entries == 0 && self.kept_bytes + bytes.len() <= self.cap {
            if let Ok(text) = std::str::from_utf8(bytes) {
                self.kept_bytes += bytes.len();
                self.entries.push(text.to_owned());
                return;
            }
        }
        if self.dropped_entries == 0 {
            // The longest valid UTF-8 prefix within the cap, found in one
            // pass (the entry is guest bytes of any length).
            let head = &bytes[..bytes.len().min(self.cap)];
            let end = match std::str::from_utf8(head) {
                Ok(_) => head.len(),
                Err(e) => e.valid_up_to(),
            };
            self.dropped_prefix = Some(String::from_utf8_lossy(&head[..end]).into_owned());
        }
        self.dropped_entries += 1;
        self.dropped_bytes += bytes.len();
    }

    /// The entries as JSON values for budget fitting. When entries were
    /// dropped at the cap, a final stand-in entry carries the first dropped
    /// entry's prefix; [`OutputBuffer::stand_in_shortfall`] says how many
    /// bytes the stand-in under-represents.
    pub(crate) fn to_values(&self) -> Vec<crate::output::GuestJson> {
        let mut values: Vec<crate::output::GuestJson> = self
            .entries
            .iter()
            .filter_map(|e| crate::output::parse_guest_entry(e).ok())
            .collect();
        if let Some(stand_in) = self.stand_in() {
            values.push(crate::output::GuestJson::host(stand_in));
        }
        values
    }

    fn stand_in(&self) -> Option<serde_json::Value> {
        let prefix = self.dropped_prefix.as_ref()?;
        Some(serde_json::json!({ "type": "text", "text": prefix }))
    }

    /// Bytes of the dropped entries (with the commas between them in the
    /// summary's JSON array) minus the stand-in's bytes: add this to a
    /// summary marker's `omittedBytes` to count what was really omitted.
    pub(crate) fn stand_in_shortfall(&self) -> usize {
        match self.stand_in() {
            Some(stand_in) => {
                let real = self.dropped_bytes + self.dropped_entries.saturating_sub(1);
                real.saturating_sub(crate::output::json_len(&stand_in))
            }
            None => 0,
        }
    }
}
