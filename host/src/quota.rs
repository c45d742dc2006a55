//! Per-session quotas (operations.md §4.3): the check before a call runs,
//! and the fuel a running call holds against the session's fuel quota.
//!
//! The fuel quota is hard within a runtime. Each `exec` or `wait` of a
//! session with a fuel quota *reserves* fuel before any guest code runs:
//! its own allowance (the `fuel` limit), or what is left of the quota when
//! that is less — left meaning the ledger's last hour minus what the
//! session's other running calls hold. The call runs with the reservation
//! as its fuel, so it cannot spend more; when it ends, its usage record
//! holds what it spent and the reservation is released. Checks and
//! reservations of one runtime are serialized, so two calls cannot both
//! take the same remainder. With no remainder at all the call is refused
//! (`quota_exceeded`, nothing runs).
//!
//! Across runtimes sharing a state store the ledger is shared but the
//! reservations are not: each runtime can hand out the remainder it sees
//! while another's calls are running. A session's fuel in the ledger's
//! hour then stays at most `H × quota` for `H` runtimes serving it at
//! once, and at most the quota with one (a session is usually served by
//! one runtime: the MCP session's).

use crate::config::{Fuel, Quotas};
use crate::ledger::Ledger;
use crate::store::{StateStore, StoreError, UsageFilter};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The window of `fuel_per_session_per_hour`, in milliseconds.
const HOUR_MS: u64 = 3_600_000;
/// The window of `cells_per_session_per_minute`, in milliseconds.
const MINUTE_MS: u64 = 60_000;

/// Why a call was not admitted.
pub(crate) enum Refusal {
    /// Over a quota: the message names it and when it frees.
    Quota(String),
    /// The ledger could not be read (quotas fail closed).
    Unreadable(String),
}

/// A call admitted under the quotas.
pub(crate) struct Admission {
    /// The fuel the call may spend when the quota cut it below its own
    /// allowance (else `None`: the `fuel` limit applies).
    pub allowance: Option<u64>,
    /// Held while the call runs; dropping it releases the fuel.
    _reservation: Option<Reservation>,
}

impl Admission {
    fn free() -> Self {
        Self {
            allowance: None,
            _reservation: None,
        }
    }
}

/// Fuel reserved by the running calls of each session.
type Reserved = Arc<Mutex<HashMap<String, u64>>>;

/// Fuel one running call holds against its session's quota.
struct Reservation {
    reserved: Reserved,
    session: String,
    fuel: u64,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut reserved = self.reserved.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(held) = reserved.get_mut(&self.session) {
            *held = held.saturating_sub(self.fuel);
            if *held == 0 {
                reserved.remove(&self.session);
            }
        }
    }
}

/// The quotas of a runtime and the fuel its running calls hold.
pub(crate) struct QuotaGate {
    quotas: Quotas,
    reserved: Reserved,
    /// Serializes check-and-reserve, so one remainder is handed out once.
    admitting: tokio::sync::Mutex<()>,
}

impl QuotaGate {
    pub(crate) fn new(quotas: Quotas) -> Self {
        Self {
            quotas,
            reserved: Reserved::default(),
            admitting: tokio::sync::Mutex::new(()),
        }
    }

    /// Admits a call of `session` (`exec`: the fuel and cell-rate quotas;
    /// `wait`: the fuel quota) whose own fuel allowance is `fuel`, or says
    /// why not. The ledger is flushed first, so this runtime's finished
    /// calls count. Keep the admission until the call's usage record is
    /// written.
    pub(crate) async fn admit(
        &self,
        store: &dyn StateStore,
        ledger: &Ledger,
        session: &str,
        exec: bool,
        fuel: Fuel,
    ) -> Result<Admission, Refusal> {
        if self.quotas.is_empty() {
            return Ok(Admission::free());
        }
        let _admitting = self.admitting.lock().await;
        ledger.flush().await;
        let now = crate::clock::unix_ms();
        let unreadable = |e: StoreError| {
            Refusal::Unreadable(format!(
                "InternalError: the usage ledger cannot be read to check this session's quotas: {e:#}"
            ))
        };
        let frees_in = |first: Option<u64>, window: u64| {
            first
                .map_or(0, |t| t.saturating_add(window).saturating_sub(now))
                .div_ceil(1000)
        };
        let session_filter = UsageFilter::all().session(session);
        if let (true, Some(max)) = (exec, self.quotas.cells_per_session_per_minute()) {
            let filter = session_filter
                .clone()
                .kind("exec")
                .since_ms(now.saturating_sub(MINUTE_MS));
            let used = store.usage_totals(&filter).await.map_err(unreadable)?;
            if used.calls >= max {
                return Err(Refusal::Quota(format!(
                    "quota exceeded: cells_per_session_per_minute ({} of {max} cells in the last minute); it frees in {} s.",
                    used.calls,
                    frees_in(used.first_at_ms, MINUTE_MS)
                )));
            }
        }
        let Some(max) = self.quotas.fuel_per_session_per_hour() else {
            return Ok(Admission::free());
        };
        let used = store
            .usage_totals(&session_filter.since_ms(now.saturating_sub(HOUR_MS)))
            .await
            .map_err(unreadable)?;
        if used.fuel >= max {
            return Err(Refusal::Quota(format!(
                "quota exceeded: fuel_per_session_per_hour ({} of {max} fuel used in the last hour); it frees as calls age out of the hour, the first in {} s.",
                used.fuel,
                frees_in(used.first_at_ms, HOUR_MS)
            )));
        }
        let mut reserved = self.reserved.lock().unwrap_or_else(|p| p.into_inner());
        let held = reserved.get(session).copied().unwrap_or(0);
        let left = max.saturating_sub(used.fuel).saturating_sub(held);
        if left == 0 {
            return Err(Refusal::Quota(format!(
                "quota exceeded: fuel_per_session_per_hour ({} of {max} fuel used in the last hour, and the rest held by this session's running calls); it frees when one of them ends.",
                used.fuel
            )));
        }
        let own = match fuel {
            Fuel::Limited(n) => n,
            Fuel::Unlimited => u64::MAX,
        };
        let take = own.min(left);
        *reserved.entry(session.to_string()).or_insert(0) += take;
        Ok(Admission {
            allowance: (take < own).then_some(take),
            _reservation: Some(Reservation {
                reserved: self.reserved.clone(),
                session: session.to_string(),
                fuel: take,
            }),
        })
    }

    /// The message of a call that ran out of the fuel its admission cut
    /// to `allowance`.
    pub(crate) fn cut_short(&self, allowance: u64) -> String {
        let max = self.quotas.fuel_per_session_per_hour().unwrap_or(0);
        format!(
            "quota exceeded: fuel_per_session_per_hour ({max} fuel an hour): this call was given the {allowance} fuel left of the session's quota and spent it all; it frees as calls age out of the hour."
        )
    }
}
