//! The usage ledger in SQLite: records, totals and listings over the
//! `usage` table (`UsageStore` for [`SqliteStateStore`]).

use super::{to_i64, Db, SqliteStateStore};
use crate::store::{
    StoreResult, UsageFilter, UsageRecord, UsageStore, UsageTotals, MAX_USAGE_RECORDS_LISTED,
};
use async_trait::async_trait;
use rusqlite::params;

/// The `WHERE` clause and parameters of a usage filter.
fn usage_where(filter: &UsageFilter) -> (String, Vec<rusqlite::types::Value>) {
    use rusqlite::types::Value as V;
    let mut clauses = Vec::new();
    let mut values = Vec::new();
    if let Some(session) = &filter.session {
        clauses.push("session = ?");
        values.push(V::Text(session.clone()));
    }
    if let Some(since) = filter.since_ms {
        clauses.push("at_ms >= ?");
        values.push(V::Integer(to_i64(since)));
    }
    if let Some(kind) = &filter.kind {
        clauses.push("kind = ?");
        values.push(V::Text(kind.clone()));
    }
    let clause = if clauses.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", clauses.join(" AND "))
    };
    (clause, values)
}

impl Db {
    fn usage_record(&self, r: &UsageRecord) -> anyhow::Result<()> {
        self.conn().execute(
            "INSERT INTO usage (at_ms, agent_run, session, run_id, kind, fuel, wall_ms, guest_us, tool_calls, output_bytes, snapshot_bytes, outcome, guest_build)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
            params![
                to_i64(r.at_ms), r.agent_run, r.session, r.run_id, r.kind, to_i64(r.fuel),
                to_i64(r.wall_ms), to_i64(r.guest_us), to_i64(r.tool_calls),
                to_i64(r.output_bytes), to_i64(r.snapshot_bytes), r.outcome, r.guest_build
            ],
        )?;
        Ok(())
    }

    fn usage_totals(&self, filter: &UsageFilter) -> anyhow::Result<UsageTotals> {
        let (clause, values) = usage_where(filter);
        let sql = format!(
            "SELECT COUNT(*), TOTAL(fuel), TOTAL(wall_ms), TOTAL(guest_us), TOTAL(tool_calls), TOTAL(output_bytes), TOTAL(snapshot_bytes), MIN(at_ms) FROM usage {clause}"
        );
        let conn = self.conn();
        // TOTAL is a float sum (it cannot overflow); fuel sums stay exact
        // below 2^53.
        let totals = conn.query_row(&sql, rusqlite::params_from_iter(values), |row| {
            let n = |i| row.get::<_, f64>(i).map(|v| v as u64);
            Ok(UsageTotals {
                calls: row.get::<_, i64>(0)? as u64,
                fuel: n(1)?,
                wall_ms: n(2)?,
                guest_us: n(3)?,
                tool_calls: n(4)?,
                output_bytes: n(5)?,
                snapshot_bytes: n(6)?,
                first_at_ms: row.get::<_, Option<i64>>(7)?.map(|t| t.max(0) as u64),
            })
        })?;
        Ok(totals)
    }

    fn usage_list(&self, filter: &UsageFilter, limit: usize) -> anyhow::Result<Vec<UsageRecord>> {
        let (clause, mut values) = usage_where(filter);
        values.push(rusqlite::types::Value::Integer(
            limit.min(MAX_USAGE_RECORDS_LISTED) as i64,
        ));
        let sql = format!(
            "SELECT at_ms, agent_run, session, run_id, kind, fuel, wall_ms, guest_us, tool_calls, output_bytes, snapshot_bytes, outcome, guest_build
             FROM (SELECT * FROM usage {clause} ORDER BY seq DESC LIMIT ?) ORDER BY seq"
        );
        let conn = self.conn();
        let mut stmt = conn.prepare(&sql)?;
        let rows = stmt.query_map(rusqlite::params_from_iter(values), |row| {
            let n = |i| row.get::<_, i64>(i).map(|v| v.max(0) as u64);
            Ok(UsageRecord {
                at_ms: n(0)?,
                agent_run: row.get(1)?,
                session: row.get(2)?,
                run_id: row.get(3)?,
                kind: row.get(4)?,
                fuel: n(5)?,
                wall_ms: n(6)?,
                guest_us: n(7)?,
                tool_calls: n(8)?,
                output_bytes: n(9)?,
                snapshot_bytes: n(10)?,
                outcome: row.get(11)?,
                guest_build: row.get(12)?,
            })
        })?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }
}

#[async_trait]
impl UsageStore for SqliteStateStore {
    async fn usage_record(&self, record: UsageRecord) -> StoreResult<()> {
        self.blocking(move |db| db.usage_record(&record)).await
    }

    async fn usage_totals(&self, filter: &UsageFilter) -> StoreResult<UsageTotals> {
        let filter = filter.clone();
        self.blocking(move |db| db.usage_totals(&filter)).await
    }

    async fn usage_list(
        &self,
        filter: &UsageFilter,
        limit: usize,
    ) -> StoreResult<Vec<UsageRecord>> {
        let filter = filter.clone();
        self.blocking(move |db| db.usage_list(&filter, limit)).await
    }
}
