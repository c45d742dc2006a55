//! The session store (`store` / `load`, contract §8.8): a cell reads
//! committed values through the state store's
//! [`SessionStore`](crate::store::SessionStore) and buffers its writes,
//! committed atomically when the cell completes.
//!
//! Requests run one at a time per cell, in the order the cell made them, so
//! a read sees the writes made before it and the size check of a write sees
//! every earlier write. The projected size of the session is kept as running
//! sums, so a write costs the same however many writes came before it; the
//! committed sizes those sums use are learnt again whenever the session's
//! committed total has changed (another cell committed) since.

use super::settlement::{err, ok, ok_raw, Settlement};
use super::SessionAccess;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

/// What `store.get` of a stored value replies (its value as stored).
#[derive(serde::Serialize)]
struct Found<'a> {
    found: bool,
    value: &'a RawValue,
}

/// Largest session-store value, in bytes of compact JSON (contract §8.8).
pub(crate) const MAX_STORE_VALUE_BYTES: usize = 262_144;
/// Largest sum of a session's stored values, in bytes (contract §8.8).
pub(crate) const MAX_STORE_TOTAL_BYTES: usize = 1_048_576;
/// Longest session-store key, in UTF-16 code units (contract §8.8).
pub(crate) const MAX_STORE_KEY_UNITS: usize = 256;

/// A cell's buffered writes (`None` deletes) and the sums its size check
/// needs.
#[derive(Debug, Default)]
pub(crate) struct BufferedWrites {
    writes: BTreeMap<String, Option<String>>,
    /// Committed size of each key of `writes`, learnt when it was first
    /// written (unknown after a restore until the next write).
    committed: HashMap<String, usize>,
    /// The session's committed total when `committed` was learnt: when the
    /// total has changed since (another cell committed), the sizes are
    /// learnt again.
    learnt_total: Option<usize>,
    /// Sum of `committed`.
    committed_sum: usize,
    /// Sum of the buffered value sizes.
    buffered_sum: usize,
}

impl BufferedWrites {
    /// Writes restored from a snapshot (committed sizes to be learnt).
    pub(crate) fn from_writes(writes: BTreeMap<String, Option<String>>) -> Self {
        let buffered_sum = writes.values().map(value_len).sum();
        Self {
            writes,
            buffered_sum,
            ..Self::default()
        }
    }

    /// The buffered writes.
    pub(crate) fn writes(&self) -> &BTreeMap<String, Option<String>> {
        &self.writes
    }

    /// The buffered writes, taken (to commit them).
    pub(crate) fn take(&mut self) -> BTreeMap<String, Option<String>> {
        std::mem::take(self).writes
    }

    /// Forgets the committed sizes unless they were learnt at a committed
    /// total of `total`.
    fn check_learnt_at(&mut self, total: usize) {
        if self.learnt_total != Some(total) {
            self.committed.clear();
            self.committed_sum = 0;
            self.learnt_total = Some(total);
        }
    }

    /// Keys written whose committed size is not known yet.
    fn unknown_keys(&self) -> Vec<String> {
        self.writes
            .keys()
            .filter(|k| !self.committed.contains_key(*k))
            .cloned()
            .collect()
    }

    /// Records the committed size of a written key.
    fn learn(&mut self, key: &str, size: usize) {
        if self.writes.contains_key(key) && !self.committed.contains_key(key) {
            self.committed.insert(key.to_string(), size);
            self.committed_sum += size;
        }
    }

    /// The session's size with `value` written at `key`: committed values
    /// (`committed_total`), with the buffered writes and this one in place
    /// of what they replace. `key_committed` is `key`'s committed size.
    fn projected(
        &self,
        committed_total: usize,
        key: &str,
        key_committed: usize,
        value: Option<&String>,
    ) -> usize {
        let (committed, buffered) = match self.writes.get(key) {
            Some(old) => (self.committed_sum, self.buffered_sum - value_len(old)),
            None => (self.committed_sum + key_committed, self.buffered_sum),
        };
        committed_total.saturating_sub(committed) + buffered + value.map_or(0, |v| v.len())
    }

    /// Buffers a write whose size check passed.
    fn insert(&mut self, key: &str, value: Option<String>, key_committed: usize) {
        match self.writes.get(key) {
            Some(old) => self.buffered_sum -= value_len(old),
            None => {
                self.committed.insert(key.to_string(), key_committed);
                self.committed_sum += key_committed;
            }
        }
        self.buffered_sum += value_len(&value);
        self.writes.insert(key.to_string(), value);
    }
}

fn value_len(value: &Option<String>) -> usize {
    value.as_ref().map_or(0, String::len)
}

/// What one cell's session-store requests share: its buffered writes and
/// the turn that runs them one at a time.
#[derive(Clone, Default)]
pub(crate) struct CellSessionStore {
    pub writes: Arc<Mutex<BufferedWrites>>,
    turn: Arc<tokio::sync::Mutex<()>>,
}

impl CellSessionStore {
    /// Over restored writes.
    pub(crate) fn restored(writes: BTreeMap<String, Option<String>>) -> Self {
        Self {
            writes: Arc::new(Mutex::new(BufferedWrites::from_writes(writes))),
            turn: Arc::default(),
        }
    }

    /// The buffered writes, locked.
    pub(crate) fn buffered(&self) -> std::sync::MutexGuard<'_, BufferedWrites> {
        self.writes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `storeSet {key, value | delete}` or `storeGet {key}`.
    pub(crate) async fn request(
        self,
        session: SessionAccess,
        id: u64,
        method: String,
        args: Value,
    ) -> Settlement {
        let _turn = self.turn.lock().await;
        let Some(key) = args["key"].as_str() else {
            return err(
                id,
                "store keys must be strings of 1 to 256 characters",
                "store_type",
            );
        };
        let units = key.encode_utf16().count();
        if units == 0 || units > MAX_STORE_KEY_UNITS {
            return err(
                id,
                "store keys must be strings of 1 to 256 characters",
                "store_type",
            );
        }
        let unavailable = |e: &dyn std::fmt::Display| {
            err(
                id,
                format!("the session store is unavailable: {e:#}"),
                "tool_error",
            )
        };
        if method == "storeGet" {
            let buffered = self.buffered().writes.get(key).cloned();
            let found = match buffered {
                Some(buffered) => Ok(buffered),
                None => session.state.store_get(&session.owner.session, key).await,
            };
            return match found {
                // The stored text is checked to be one JSON value before it
                // goes into the reply: text that is not (a store written to
                // by something else) could otherwise close the value early
                // and add fields of its own to `{"found":true,"value":…}`.
                Ok(Some(json)) => match RawValue::from_string(json) {
                    Ok(value) => match serde_json::value::to_raw_value(&Found {
                        found: true,
                        value: &value,
                    }) {
                        Ok(reply) => ok_raw(id, reply),
                        Err(e) => err(
                            id,
                            format!("a stored value is unreadable: {e}"),
                            "tool_error",
                        ),
                    },
                    Err(e) => err(
                        id,
                        format!("a stored value is unreadable: {e}"),
                        "tool_error",
                    ),
                },
                Ok(None) => ok(id, json!({"found": false})),
                Err(e) => unavailable(&e),
            };
        }
        let value = if args["delete"] == Value::Bool(true) {
            None
        } else {
            Some(args.get("value").unwrap_or(&Value::Null).to_string())
        };
        if let Some(v) = &value {
            if v.len() > MAX_STORE_VALUE_BYTES {
                return err(
                    id,
                    format!("store value is {} bytes of JSON; at most {MAX_STORE_VALUE_BYTES} bytes fit. Nothing was stored.", v.len()),
                    "store_range",
                );
            }
        }
        match self.check_write(&session, key, value.as_ref()).await {
            Ok((total, _)) if total > MAX_STORE_TOTAL_BYTES => err(
                id,
                format!("the session store would hold {total} bytes of values; at most {MAX_STORE_TOTAL_BYTES} bytes fit. Nothing was stored."),
                "store_range",
            ),
            Ok((_, key_committed)) => {
                self.buffered().insert(key, value, key_committed);
                ok(id, Value::Null)
            }
            Err(e) => unavailable(&e),
        }
    }

    /// The session's projected size with `value` written at `key`, and
    /// `key`'s committed size.
    async fn check_write(
        &self,
        session: &SessionAccess,
        key: &str,
        value: Option<&String>,
    ) -> anyhow::Result<(usize, usize)> {
        let name = &session.owner.session;
        let total = session.state.store_total_bytes(name).await?;
        // Sizes learnt before another cell committed are learnt again.
        self.buffered().check_learnt_at(total);
        let committed_len = async |k: &str| -> anyhow::Result<usize> {
            Ok(session
                .state
                .store_get(name, k)
                .await?
                .map_or(0, |v| v.len()))
        };
        // After a restore (or another cell's commit), the committed sizes of
        // earlier writes are learnt once.
        let unknown = self.buffered().unknown_keys();
        for k in unknown {
            let size = committed_len(&k).await?;
            self.buffered().learn(&k, size);
        }
        let known = self.buffered().committed.get(key).copied();
        let key_committed = match known {
            Some(size) => size,
            None => committed_len(key).await?,
        };
        let projected = self.buffered().projected(total, key, key_committed, value);
        Ok((projected, key_committed))
    }
}
