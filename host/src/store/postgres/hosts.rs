//! Hosts ([`HostStore`]): announcements, heartbeats, liveness, and the
//! `LISTEN` connection that wakes the watches of recorded settlements.

use super::*;

#[async_trait]
impl HostStore for PostgresStateStore {
    async fn announce_host(&self) -> StoreResult<Option<String>> {
        let hosts = &self.hosts;
        let id = hosts
            .announced
            .get_or_try_init(|| async {
                let id = format!("h_{}", uuid::Uuid::new_v4().simple());
                let client = self.client().await?;
                // Hosts gone for a day are forgotten.
                client
                    .execute(
                        "DELETE FROM quickcell_hosts WHERE alive_until < now() - interval '1 day'",
                        &[],
                    )
                    .await?;
                renew(&client, &id).await?;
                drop(client);
                tokio::spawn(heartbeat(
                    hosts.config.clone(),
                    hosts.tls.clone(),
                    id.clone(),
                    hosts.stop.clone(),
                ));
                anyhow::Ok(id)
            })
            .await?;
        Ok(Some(id.clone()))
    }

    async fn host_alive(&self, host: &str) -> StoreResult<bool> {
        if self.hosts.announced.get().is_some_and(|id| id == host) {
            return Ok(true);
        }
        let cached = |liveness: &HashMap<String, (bool, Instant)>| {
            liveness
                .get(host)
                .filter(|(_, at)| at.elapsed() < LIVENESS_CACHE_TTL)
                .map(|(alive, _)| *alive)
        };
        if let Some(alive) = cached(&lock(&self.hosts.liveness)) {
            return Ok(alive);
        }
        let work = async {
            let row = self
                .client()
                .await?
                .query_opt(
                    "SELECT alive_until > now() FROM quickcell_hosts WHERE host_id = $1",
                    &[&host],
                )
                .await?;
            anyhow::Ok(row.is_some_and(|r| r.get::<_, bool>(0)))
        };
        let alive = work.await?;
        let mut liveness = lock(&self.hosts.liveness);
        if liveness.len() >= MAX_CACHED_HOSTS {
            liveness.clear();
        }
        liveness.insert(host.to_string(), (alive, Instant::now()));
        Ok(alive)
    }

    async fn watch_settlements(&self, run_id: &str) -> StoreResult<SettlementWatch> {
        let watch = self.hosts.wakers.watch(run_id);
        self.listening()
            .await
            .map_err(|e| anyhow::anyhow!("cannot listen for settlements: {e}"))?;
        Ok(watch)
    }

    async fn record_cancels(&self, run_ids: &[String], expires_at_ms: u64) -> StoreResult<()> {
        let work = async {
            let client = self.client().await?;
            client
                .execute(
                    "INSERT INTO run_cancels (run_id, expires_at_ms)
                     SELECT id, $2 FROM unnest($1::text[]) AS id
                     ON CONFLICT (run_id) DO NOTHING",
                    &[&run_ids, &to_i64(expires_at_ms)],
                )
                .await?;
            // A statement of its own, as for settlements: a notification
            // that cannot be queued loses no cancel (hosts also poll).
            if let Err(e) = client
                .execute(
                    "SELECT pg_notify($1, id) FROM unnest($2::text[]) AS id",
                    &[&CANCEL_CHANNEL, &run_ids],
                )
                .await
            {
                tracing::warn!(error = %e, "cannot announce a recorded cancel");
            }
            anyhow::Ok(())
        };
        Ok(work.await?)
    }

    async fn cancelled_runs(&self, run_ids: &[String]) -> StoreResult<Vec<String>> {
        let work = async {
            let rows = self
                .client()
                .await?
                .query(
                    "SELECT run_id FROM run_cancels WHERE run_id = ANY($1)",
                    &[&run_ids],
                )
                .await?;
            anyhow::Ok(rows.iter().map(|r| r.get(0)).collect())
        };
        Ok(work.await?)
    }

    async fn watch_cancels(&self) -> StoreResult<SettlementWatch> {
        self.listening()
            .await
            .map_err(|e| anyhow::anyhow!("cannot listen for cancels: {e}"))?;
        // From when the connection listens: its first wake is not a cancel.
        // A caller reads the cancels it cares about after watching.
        Ok(SettlementWatch::of(&self.hosts.cancel_wake))
    }

    fn cancel_poll_interval(&self) -> Option<Duration> {
        Some(POSTGRES_CANCEL_POLL)
    }

    async fn recorded_settlements(
        &self,
        run_id: &str,
        request_ids: &[u64],
    ) -> StoreResult<Vec<(u64, String)>> {
        let ids: Vec<i64> = request_ids.iter().map(|&id| to_i64(id)).collect();
        let work = async {
            let rows = self
                .client()
                .await?
                .query(
                    "SELECT request_id, settlement FROM settlements
                     WHERE run_id = $1 AND request_id = ANY($2) ORDER BY seq",
                    &[&run_id, &ids],
                )
                .await?;
            anyhow::Ok(rows.iter().map(|r| (to_u64(r.get(0)), r.get(1))).collect())
        };
        Ok(work.await?)
    }
}

impl PostgresStateStore {
    /// Starts the `LISTEN` connection (once) and waits until it listens,
    /// at most the connect timeout.
    async fn listening(&self) -> anyhow::Result<()> {
        let hosts = &self.hosts;
        let mut listening = hosts
            .listening
            .get_or_init(|| async {
                let (ready, listening) = tokio::sync::watch::channel(false);
                tokio::spawn(listen(
                    hosts.config.clone(),
                    hosts.tls.clone(),
                    Wakes {
                        settlements: Arc::downgrade(&hosts.wakers),
                        cancels: Arc::downgrade(&hosts.cancel_wake),
                    },
                    ready,
                    hosts.stop.clone(),
                ));
                listening
            })
            .await
            .clone();
        // A watch counts from when the connection listens.
        let listens = tokio::time::timeout(
            hosts.connect_timeout,
            listening.wait_for(|listens| *listens),
        )
        .await;
        if !matches!(listens, Ok(Ok(_))) {
            anyhow::bail!(
                "the LISTEN connection to the state store is down (its errors are logged)"
            );
        }
        Ok(())
    }
}

/// What the `LISTEN` connection wakes: the watches of runs' settlements,
/// and the cancel watches.
#[derive(Clone)]
struct Wakes {
    settlements: std::sync::Weak<SettlementWakers>,
    cancels: std::sync::Weak<tokio::sync::watch::Sender<u64>>,
}

impl Wakes {
    /// Wakes every watch (notifications may have been lost); `false` once
    /// the store is gone.
    fn all(&self) -> bool {
        let Some(wakers) = self.settlements.upgrade() else {
            return false;
        };
        wakers.wake_all();
        if let Some(cancels) = self.cancels.upgrade() {
            cancels.send_modify(|n| *n = n.wrapping_add(1));
        }
        true
    }
}

/// Sets `host`'s deadline [`HOST_LIVENESS_TTL`] past the database's now.
async fn renew(client: &tokio_postgres::Client, host: &str) -> anyhow::Result<()> {
    let ttl_ms = HOST_LIVENESS_TTL.as_millis() as f64;
    client
        .execute(
            "INSERT INTO quickcell_hosts (host_id, alive_until)
             VALUES ($1, now() + $2 * interval '1 millisecond')
             ON CONFLICT (host_id) DO UPDATE SET alive_until = EXCLUDED.alive_until",
            &[&host, &ttl_ms],
        )
        .await?;
    Ok(())
}

/// Renews `host`'s announcement every [`HOST_HEARTBEAT_INTERVAL`] until
/// `stop`, on a connection of its own (a pool whose connections are all
/// busy must not make a live host look dead); a store that closes
/// withdraws it, so that other hosts stop waiting on it at once.
async fn heartbeat(
    config: tokio_postgres::Config,
    tls: tokio_postgres_rustls::MakeRustlsConnect,
    host: String,
    stop: tokio_util::sync::CancellationToken,
) {
    let mut ticks = tokio::time::interval(HOST_HEARTBEAT_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    let mut connection: Option<tokio_postgres::Client> = None;
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = ticks.tick() => {}
        }
        if connection.as_ref().is_none_or(|c| c.is_closed()) {
            connection = match config.connect(tls.clone()).await {
                Ok((client, driver)) => {
                    tokio::spawn(driver);
                    Some(client)
                }
                Err(e) => {
                    tracing::warn!(host, error = %format!("{e:#}"), "cannot connect to renew this host's announcement");
                    continue;
                }
            };
        }
        if let Some(client) = &connection {
            if let Err(e) = renew(client, &host).await {
                tracing::warn!(host, error = %format!("{e:#}"), "cannot renew this host's announcement in the state store");
                connection = None;
            }
        }
    }
    if let Some(client) = connection {
        let _ = client
            .execute("DELETE FROM quickcell_hosts WHERE host_id = $1", &[&host])
            .await;
    }
}

/// Keeps one connection listening on [`SETTLEMENT_CHANNEL`] and
/// [`CANCEL_CHANNEL`], waking the watches of the runs settlement
/// notifications name and the cancel watches, until `stop` or the store is
/// dropped. `ready` is `true` while it listens; every reconnection wakes
/// all watches, since notifications sent meanwhile were lost.
async fn listen(
    config: tokio_postgres::Config,
    tls: tokio_postgres_rustls::MakeRustlsConnect,
    wakes: Wakes,
    ready: tokio::sync::watch::Sender<bool>,
    stop: tokio_util::sync::CancellationToken,
) {
    loop {
        let listened = async {
            let (client, mut connection) = config.connect(tls.clone()).await?;
            // The connection is driven here, and wakes the watches its
            // notifications concern.
            let notified = wakes.clone();
            let driver = tokio::spawn(async move {
                while let Some(message) =
                    std::future::poll_fn(|cx| connection.poll_message(cx)).await
                {
                    if let tokio_postgres::AsyncMessage::Notification(n) = message? {
                        if n.channel() == CANCEL_CHANNEL {
                            match notified.cancels.upgrade() {
                                Some(cancels) => cancels.send_modify(|n| *n = n.wrapping_add(1)),
                                None => break,
                            }
                            continue;
                        }
                        match notified.settlements.upgrade() {
                            Some(wakers) => wakers.wake(n.payload()),
                            None => break,
                        }
                    }
                }
                Ok::<_, tokio_postgres::Error>(())
            });
            client
                .batch_execute(&format!(
                    "LISTEN {SETTLEMENT_CHANNEL}; LISTEN {CANCEL_CHANNEL}"
                ))
                .await?;
            wakes.all();
            ready.send_replace(true);
            // The client lives as long as the connection.
            let ended = driver.await;
            drop(client);
            ended??;
            anyhow::Ok(())
        };
        tokio::select! {
            _ = stop.cancelled() => return,
            ended = listened => {
                ready.send_replace(false);
                if wakes.settlements.strong_count() == 0 {
                    return;
                }
                if let Err(e) = ended {
                    tracing::warn!(error = %e, "the state store's LISTEN connection ended; reconnecting");
                }
            }
        }
        if !wakes.all() {
            return;
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(LISTEN_RECONNECT_DELAY) => {}
        }
    }
}
