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
        let hosts = &self.hosts;
        let mut listening = hosts
            .listening
            .get_or_init(|| async {
                let (ready, listening) = tokio::sync::watch::channel(false);
                tokio::spawn(listen(
                    hosts.config.clone(),
                    hosts.tls.clone(),
                    Arc::downgrade(&hosts.wakers),
                    ready,
                    hosts.stop.clone(),
                ));
                listening
            })
            .await
            .clone();
        // The watch counts from when the connection listens.
        let listens = tokio::time::timeout(
            hosts.connect_timeout,
            listening.wait_for(|listens| *listens),
        )
        .await;
        if !matches!(listens, Ok(Ok(_))) {
            return Err(anyhow::anyhow!(
                "cannot listen for settlements: the LISTEN connection to the state store is down (its errors are logged)"
            )
            .into());
        }
        Ok(watch)
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

/// Keeps one connection listening on [`SETTLEMENT_CHANNEL`] and wakes the
/// watches of the runs it names, until `stop` or the wakers are dropped.
/// `ready` is `true` while it listens; every reconnection wakes all
/// watches, since notifications sent meanwhile were lost.
async fn listen(
    config: tokio_postgres::Config,
    tls: tokio_postgres_rustls::MakeRustlsConnect,
    wakers: std::sync::Weak<SettlementWakers>,
    ready: tokio::sync::watch::Sender<bool>,
    stop: tokio_util::sync::CancellationToken,
) {
    loop {
        let listened = async {
            let (client, mut connection) = config.connect(tls.clone()).await?;
            // The connection is driven here, and wakes the watches of the
            // runs its notifications name.
            let notified = wakers.clone();
            let driver = tokio::spawn(async move {
                while let Some(message) =
                    std::future::poll_fn(|cx| connection.poll_message(cx)).await
                {
                    if let tokio_postgres::AsyncMessage::Notification(n) = message? {
                        match notified.upgrade() {
                            Some(wakers) => wakers.wake(n.payload()),
                            None => break,
                        }
                    }
                }
                Ok::<_, tokio_postgres::Error>(())
            });
            client
                .batch_execute(&format!("LISTEN {SETTLEMENT_CHANNEL}"))
                .await?;
            if let Some(wakers) = wakers.upgrade() {
                wakers.wake_all();
            }
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
                if wakers.strong_count() == 0 {
                    return;
                }
                if let Err(e) = ended {
                    tracing::warn!(error = %e, "the state store's LISTEN connection ended; reconnecting");
                }
            }
        }
        if let Some(wakers) = wakers.upgrade() {
            wakers.wake_all();
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(LISTEN_RECONNECT_DELAY) => {}
        }
    }
}
