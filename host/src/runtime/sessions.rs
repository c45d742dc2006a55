//! What front ends keep beside their cells: session values read and
//! written directly, and parked runs kept from expiring.

use super::Runtime;
use crate::error::Error;
use crate::store::Owner;

impl Runtime {
    /// A value of `session` in the session store: what a cell of that
    /// session gets from `load(key)` (`None` when there is none). For front
    /// ends that keep their own records beside their cells' values.
    ///
    /// # Errors
    ///
    /// [`Error::StateStore`] when the store cannot be read or the value is
    /// not JSON.
    pub async fn session_value(
        &self,
        session: &str,
        key: &str,
    ) -> Result<Option<serde_json::Value>, Error> {
        let text = self
            .store
            .store_get(session, key)
            .await
            .map_err(|e| Error::state_store("cannot read a session value", e.into()))?;
        text.map(|t| serde_json::from_str(&t))
            .transpose()
            .map_err(|e| Error::state_store("a session value is unreadable", e.into()))
    }

    /// Keeps a parked run of `owner` from expiring for another
    /// [`crate::Limits::snapshot_ttl_seconds`] from now: for a front end whose
    /// client is still working on the run's calls (a person approving one,
    /// say). Returns whether the run was parked and `owner`'s; a run being
    /// resumed, or gone, is left alone.
    ///
    /// # Errors
    ///
    /// [`Error::StateStore`] when the store cannot be written.
    pub async fn keep_parked(&self, run_id: &str, owner: &Owner) -> Result<bool, Error> {
        let ttl_ms = self.limits.snapshot_ttl_seconds().saturating_mul(1000);
        let until = crate::clock::unix_ms().saturating_add(ttl_ms);
        self.store
            .extend_parked(run_id, owner, until)
            .await
            .map_err(|e| Error::state_store("cannot keep a parked run", e.into()))
    }

    /// Every value of `session`, sorted by key (as UTF-8 bytes): what its
    /// cells get from `load`. For front ends that hand a cell the
    /// session's values up front.
    ///
    /// # Errors
    ///
    /// [`Error::StateStore`] when the store cannot be read or a value is
    /// not JSON.
    pub async fn session_values(
        &self,
        session: &str,
    ) -> Result<Vec<(String, serde_json::Value)>, Error> {
        let mut entries = self
            .store
            .store_entries(session)
            .await
            .map_err(|e| Error::state_store("cannot read session values", e.into()))?;
        entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        entries
            .into_iter()
            .map(|(key, text)| {
                serde_json::from_str(&text)
                    .map(|value| (key, value))
                    .map_err(|e| Error::state_store("a session value is unreadable", e.into()))
            })
            .collect()
    }

    /// Writes (`Some`) and deletes (`None`) values of `session`, at once.
    /// Unlike a cell's `store`, this is not bounded by the session store's
    /// caps: the caller bounds what it writes.
    ///
    /// # Errors
    ///
    /// [`Error::StateStore`] when the store cannot be written; nothing is.
    pub async fn set_session_values(
        &self,
        session: &str,
        writes: Vec<(String, Option<serde_json::Value>)>,
    ) -> Result<(), Error> {
        let writes = writes
            .into_iter()
            .map(|(key, value)| (key, value.map(|v| v.to_string())))
            .collect();
        self.store
            .store_commit(session, writes)
            .await
            .map_err(|e| Error::state_store("cannot write session values", e.into()))
    }
}
