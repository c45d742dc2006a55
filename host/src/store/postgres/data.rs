//! Session values, saved results and the usage ledger.

use super::*;

#[async_trait]
impl SessionStore for PostgresStateStore {
    async fn store_get(&self, session: &str, key: &str) -> StoreResult<Option<String>> {
        self.optional_text(
            "SELECT value FROM session_store WHERE session = $1 AND key = $2",
            &[&session, &key],
        )
        .await
    }

    async fn store_entries(&self, session: &str) -> StoreResult<Vec<(String, String)>> {
        let work = async {
            let client = self.client().await?;
            let rows = client
                .query(
                    "SELECT key, value FROM session_store WHERE session = $1",
                    &[&session],
                )
                .await?;
            anyhow::Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
        };
        Ok(work.await?)
    }

    async fn store_total_bytes(&self, session: &str) -> StoreResult<usize> {
        self.count(
            "SELECT COALESCE(SUM(octet_length(value)), 0)::BIGINT FROM session_store WHERE session = $1",
            &[&session],
        )
        .await
    }

    async fn store_commit(
        &self,
        session: &str,
        writes: Vec<(String, Option<String>)>,
    ) -> StoreResult<()> {
        let work = async {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            for (key, value) in &writes {
                match value {
                    Some(v) => {
                        tx.execute(
                            "INSERT INTO session_store (session, key, value) VALUES ($1, $2, $3)
                             ON CONFLICT (session, key) DO UPDATE SET value = EXCLUDED.value",
                            &[&session, key, v],
                        )
                        .await?
                    }
                    None => {
                        tx.execute(
                            "DELETE FROM session_store WHERE session = $1 AND key = $2",
                            &[&session, key],
                        )
                        .await?
                    }
                };
            }
            tx.commit().await?;
            anyhow::Ok(())
        };
        Ok(work.await?)
    }

    async fn store_clear(&self, session: &str) -> StoreResult<usize> {
        let n = self
            .execute("DELETE FROM session_store WHERE session = $1", &[&session])
            .await?;
        Ok(n as usize)
    }
}

#[async_trait]
impl ResultStore for PostgresStateStore {
    async fn result_save(
        &self,
        agent_run: &str,
        id: &str,
        json: String,
        max_count: usize,
        max_bytes: usize,
    ) -> StoreResult<bool> {
        let work = async {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            // The caps hold across hosts: one save per agent run at a time.
            tx.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended('quickcell.results:' || $1, 0))",
                &[&agent_run],
            )
            .await?;
            let row = tx
                .query_one(
                    "SELECT COUNT(*), COALESCE(SUM(octet_length(json)), 0)::BIGINT FROM results WHERE agent_run = $1",
                    &[&agent_run],
                )
                .await?;
            let (n, bytes): (i64, i64) = (row.get(0), row.get(1));
            if n as usize >= max_count || bytes as usize + json.len() > max_bytes {
                return Ok(false);
            }
            tx.execute(
                "INSERT INTO results (agent_run, id, json) VALUES ($1, $2, $3)",
                &[&agent_run, &id, &json],
            )
            .await?;
            tx.commit().await?;
            anyhow::Ok(true)
        };
        Ok(work.await?)
    }

    async fn result_load(&self, agent_run: &str, id: &str) -> StoreResult<Option<String>> {
        self.optional_text(
            "SELECT json FROM results WHERE agent_run = $1 AND id = $2",
            &[&agent_run, &id],
        )
        .await
    }

    async fn result_delete(&self, agent_run: &str, id: &str) -> StoreResult<bool> {
        let n = self
            .execute(
                "DELETE FROM results WHERE agent_run = $1 AND id = $2",
                &[&agent_run, &id],
            )
            .await?;
        Ok(n > 0)
    }

    async fn result_clear(&self, agent_run: &str) -> StoreResult<usize> {
        let n = self
            .execute("DELETE FROM results WHERE agent_run = $1", &[&agent_run])
            .await?;
        Ok(n as usize)
    }
}

/// The `WHERE` clause and parameters of a usage filter (parameters are
/// numbered from `$1`).
fn usage_where(filter: &UsageFilter) -> (String, Vec<Box<dyn ToSql + Sync + Send>>) {
    let mut clauses = Vec::new();
    let mut values: Vec<Box<dyn ToSql + Sync + Send>> = Vec::new();
    if let Some(session) = &filter.session {
        values.push(Box::new(session.clone()));
        clauses.push(format!("session = ${}", values.len()));
    }
    if let Some(since) = filter.since_ms {
        values.push(Box::new(to_i64(since)));
        clauses.push(format!("at_ms >= ${}", values.len()));
    }
    if let Some(kind) = &filter.kind {
        values.push(Box::new(kind.clone()));
        clauses.push(format!("kind = ${}", values.len()));
    }
    let clause = if clauses.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", clauses.join(" AND "))
    };
    (clause, values)
}

fn params(values: &[Box<dyn ToSql + Sync + Send>]) -> Vec<&(dyn ToSql + Sync)> {
    values
        .iter()
        .map(|v| v.as_ref() as &(dyn ToSql + Sync))
        .collect()
}

#[async_trait]
impl UsageStore for PostgresStateStore {
    async fn usage_record(&self, r: UsageRecord) -> StoreResult<()> {
        let work = async {
            self.client().await?.execute(
                "INSERT INTO usage (at_ms, agent_run, session, run_id, kind, fuel, wall_ms, guest_us, tool_calls, output_bytes, snapshot_bytes, outcome, guest_build)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
                &[
                    &to_i64(r.at_ms), &r.agent_run, &r.session, &r.run_id, &r.kind, &to_i64(r.fuel),
                    &to_i64(r.wall_ms), &to_i64(r.guest_us), &to_i64(r.tool_calls),
                    &to_i64(r.output_bytes), &to_i64(r.snapshot_bytes), &r.outcome, &r.guest_build,
                ],
            )
            .await?;
            anyhow::Ok(())
        };
        Ok(work.await?)
    }

    async fn usage_totals(&self, filter: &UsageFilter) -> StoreResult<UsageTotals> {
        let work = async {
            let (clause, values) = usage_where(filter);
            // Sums are numeric (they cannot overflow), capped into BIGINT.
            let sum =
                |c: &str| format!("LEAST(COALESCE(SUM({c}), 0), 9223372036854775807)::BIGINT");
            let sql = format!(
                "SELECT COUNT(*), {}, {}, {}, {}, {}, {}, MIN(at_ms) FROM usage {clause}",
                sum("fuel"),
                sum("wall_ms"),
                sum("guest_us"),
                sum("tool_calls"),
                sum("output_bytes"),
                sum("snapshot_bytes"),
            );
            let row = self
                .client()
                .await?
                .query_one(&sql, &params(&values))
                .await?;
            let n = |i| to_u64(row.get::<_, i64>(i));
            anyhow::Ok(UsageTotals {
                calls: n(0),
                fuel: n(1),
                wall_ms: n(2),
                guest_us: n(3),
                tool_calls: n(4),
                output_bytes: n(5),
                snapshot_bytes: n(6),
                first_at_ms: row.get::<_, Option<i64>>(7).map(to_u64),
            })
        };
        Ok(work.await?)
    }

    async fn usage_list(
        &self,
        filter: &UsageFilter,
        limit: usize,
    ) -> StoreResult<Vec<UsageRecord>> {
        let work = async {
            let (clause, mut values) = usage_where(filter);
            values.push(Box::new(limit.min(MAX_USAGE_RECORDS_LISTED) as i64));
            let sql = format!(
                "SELECT at_ms, agent_run, session, run_id, kind, fuel, wall_ms, guest_us, tool_calls, output_bytes, snapshot_bytes, outcome, guest_build
                 FROM (SELECT * FROM usage {clause} ORDER BY seq DESC LIMIT ${}) latest ORDER BY seq",
                values.len()
            );
            let rows = self.client().await?.query(&sql, &params(&values)).await?;
            anyhow::Ok(
                rows.iter()
                    .map(|row| {
                        let n = |i| to_u64(row.get::<_, i64>(i));
                        UsageRecord {
                            at_ms: n(0),
                            agent_run: row.get(1),
                            session: row.get(2),
                            run_id: row.get(3),
                            kind: row.get(4),
                            fuel: n(5),
                            wall_ms: n(6),
                            guest_us: n(7),
                            tool_calls: n(8),
                            output_bytes: n(9),
                            snapshot_bytes: n(10),
                            outcome: row.get(11),
                            guest_build: row.get(12),
                        }
                    })
                    .collect(),
            )
        };
        Ok(work.await?)
    }
}
