//! Tests of the PostgreSQL store against a throwaway cluster.

use super::*;

/// A client of its own on `url` (TLS as the store's).
async fn raw_client(url: &str) -> tokio_postgres::Client {
    let (url, root_cert) = split_root_cert(url).unwrap();
    let tls = tls_connector(root_cert.as_deref()).unwrap();
    let (client, connection) = tokio_postgres::connect(&url, tls).await.unwrap();
    tokio::spawn(connection);
    client
}

fn parked(id: &str) -> ParkedRun {
    ParkedRun {
        run_id: id.into(),
        owner: owner(),
        generation: 1,
        expires_at_ms: u64::MAX / 4,
        snapshot: vec![1],
        lease: None,
        regrant: false,
        awaiting: Vec::new(),
        guest_build: String::new(),
    }
}

fn owner() -> Owner {
    Owner {
        agent_run: "a".into(),
        session: "s".into(),
    }
}

/// The pool's size is kept within 1 and its maximum; timeouts are at
/// least a millisecond.
#[test]
fn limits_are_clamped_to_their_range() {
    let limits = PostgresLimits::default();
    assert_eq!(limits.max_connections(), DEFAULT_POSTGRES_CONNECTIONS);
    assert_eq!(limits.with_max_connections(64).max_connections(), 64);
    assert_eq!(limits.with_max_connections(0).max_connections(), 1);
    assert_eq!(
        limits.with_max_connections(100_000).max_connections(),
        MAX_POSTGRES_CONNECTIONS
    );
    let instant = limits
        .with_connect_timeout(Duration::ZERO)
        .with_statement_timeout(Duration::ZERO);
    assert_eq!(instant.connect_timeout, Duration::from_millis(1));
    assert_eq!(instant.statement_timeout, Duration::from_millis(1));
}

/// A statement past the statement timeout (a claim of a row another
/// session holds) fails with the cause named; once the row is free
/// the same claim succeeds, the run unchanged.
#[tokio::test]
async fn a_statement_past_the_timeout_fails_and_loses_nothing() {
    let url = crate::testing::postgres_database();
    let limits = PostgresLimits::default().with_statement_timeout(Duration::from_millis(300));
    let store = PostgresStateStore::connect_with(&url, limits)
        .await
        .unwrap();
    store.park(parked("r1")).await.unwrap();
    let mut holder = raw_client(&url).await;
    let held = holder.transaction().await.unwrap();
    held.execute("SELECT 1 FROM runs WHERE run_id = 'r1' FOR UPDATE", &[])
        .await
        .unwrap();
    let error = store.claim("r1", &owner(), None, 1, 100).await.unwrap_err();
    assert!(
        format!("{error:#}").contains("statement timeout"),
        "{error:#}"
    );
    held.rollback().await.unwrap();
    let claimed = store
        .claim("r1", &owner(), None, 1, 100)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claimed.snapshot, vec![1]);
}

/// The pool opens at most its connections however many calls run at
/// once; with every connection busy, a call waits the connect timeout
/// and fails, and the busy calls still finish.
#[tokio::test]
async fn the_pool_holds_its_connections_and_a_call_waits_at_most_the_timeout() {
    let name = format!("qc_pool_{}", uuid::Uuid::new_v4().simple());
    let url = crate::testing::postgres_database();
    let url_named = format!(
        "{url}{}application_name={name}",
        if url.contains('?') { '&' } else { '?' }
    );
    let limits = PostgresLimits::default()
        .with_max_connections(2)
        .with_connect_timeout(Duration::from_millis(500));
    let store = Arc::new(
        PostgresStateStore::connect_with(&url_named, limits)
            .await
            .unwrap(),
    );
    store.park(parked("r1")).await.unwrap();
    let monitor = raw_client(&url).await;
    let connections = async |waiting_on_lock: bool| -> i64 {
        monitor
            .query_one(
                "SELECT COUNT(*) FROM pg_stat_activity WHERE application_name = $1
                   AND (NOT $2 OR wait_event_type = 'Lock')",
                &[&name, &waiting_on_lock],
            )
            .await
            .unwrap()
            .get(0)
    };
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..32 {
        let store = store.clone();
        calls.spawn(async move { store.count_runs().await.unwrap() });
    }
    while let Some(count) = calls.join_next().await {
        assert_eq!(count.unwrap(), 1);
    }
    let open = connections(false).await;
    assert!((1..=2).contains(&open), "{open} connections");
    // Both connections blocked on a row another session holds.
    let mut holder = raw_client(&url).await;
    let held = holder.transaction().await.unwrap();
    held.execute("SELECT 1 FROM runs WHERE run_id = 'r1' FOR UPDATE", &[])
        .await
        .unwrap();
    let mut claims = tokio::task::JoinSet::new();
    for _ in 0..2 {
        let store = store.clone();
        claims.spawn(async move { store.claim("r1", &owner(), None, 1, u64::MAX / 8).await });
    }
    while connections(true).await < 2 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let error = store.count_runs().await.unwrap_err();
    assert!(
        format!("{error:#}").contains("cannot connect to the state store"),
        "{error:#}"
    );
    held.rollback().await.unwrap();
    let mut outcomes = Vec::new();
    while let Some(claim) = claims.join_next().await {
        outcomes.push(claim.unwrap().unwrap().map(|c| c.lease));
    }
    outcomes.sort_by_key(|o| o.is_err());
    assert_eq!(outcomes, vec![Ok(1), Err(ClaimRefused::Busy)]);
}

/// Whether the store's connection is encrypted.
async fn encrypted(store: &PostgresStateStore) -> bool {
    store
        .client()
        .await
        .unwrap()
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

/// The store's connections are encrypted and verify the server against
/// the CA file the URL names; the system's roots do not know the
/// throwaway CA, so without it the connection is refused; `sslmode=disable`
/// connects in the clear.
#[tokio::test]
async fn connections_use_tls_and_verify_the_server() {
    let url = crate::testing::postgres_database();
    assert!(
        url.contains("sslrootcert="),
        "the throwaway cluster serves TLS: {url}"
    );
    let store = PostgresStateStore::connect(&url).await.unwrap();
    assert!(encrypted(&store).await);
    let (bare, _) = split_root_cert(&url).unwrap();
    let error = PostgresStateStore::connect(&bare).await.err().unwrap();
    assert!(format!("{error:#}").contains("certificate"), "{error:#}");
    let plain = bare.replace("sslmode=require", "sslmode=disable");
    assert!(!encrypted(&PostgresStateStore::connect(&plain).await.unwrap()).await);
}

/// The CA file is read up to its cap and must hold a certificate.
#[tokio::test]
async fn a_ca_file_over_the_cap_or_without_a_certificate_is_refused() {
    let url = crate::testing::postgres_database();
    let (bare, ca) = split_root_cert(&url).unwrap();
    let dir = std::env::temp_dir().join(format!("quickcell-ca-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let with_ca = |path: &std::path::Path| format!("{bare}&sslrootcert={}", path.display());
    // Obeyed: the real CA padded to the cap still works.
    let mut padded = std::fs::read(ca.unwrap()).unwrap();
    padded.resize(MAX_POSTGRES_CA_FILE_BYTES, b'\n');
    std::fs::write(dir.join("padded.pem"), &padded).unwrap();
    assert!(
        PostgresStateStore::connect(&with_ca(&dir.join("padded.pem")))
            .await
            .is_ok()
    );
    // Violated: one byte more.
    padded.push(b'\n');
    std::fs::write(dir.join("big.pem"), &padded).unwrap();
    std::fs::write(dir.join("empty.pem"), "not a certificate\n").unwrap();
    for (file, says) in [
        ("big.pem", "is over 1048576 bytes"),
        ("empty.pem", "holds no PEM certificate"),
        ("missing.pem", "cannot read the CA file"),
    ] {
        let error = PostgresStateStore::connect(&with_ca(&dir.join(file)))
            .await
            .err()
            .unwrap();
        assert!(format!("{error:#}").contains(says), "{file}: {error:#}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// A database at version 2 keyed settlements by generation: version 3
/// keeps the first recorded for each request, and the store goes on.
#[tokio::test]
async fn version_2_settlements_are_kept_by_request() {
    let url = crate::testing::postgres_database();
    let client = raw_client(&url).await;
    client
        .batch_execute(
            "CREATE TABLE quickcell_migrations (
                version INTEGER PRIMARY KEY,
                applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
        )
        .await
        .unwrap();
    for (index, migration) in MIGRATIONS[..2].iter().enumerate() {
        client.batch_execute(migration).await.unwrap();
        client
            .execute(
                "INSERT INTO quickcell_migrations (version) VALUES ($1)",
                &[&(index as i32 + 1)],
            )
            .await
            .unwrap();
    }
    client
        .batch_execute(
            "INSERT INTO runs (run_id, agent_run, session, state, generation, expires_at_ms, snapshot)
               VALUES ('r1', 'a', 's', 'parked', 2, 9000000000000, '\\x01');
             INSERT INTO settlements (run_id, generation, request_id, settlement) VALUES
               ('r1', 1, 7, 'first'), ('r1', 2, 7, 'second'), ('r1', 2, 8, 'other');",
        )
        .await
        .unwrap();
    let store = PostgresStateStore::connect(&url).await.unwrap();
    let version: i32 = client
        .query_one("SELECT MAX(version) FROM quickcell_migrations", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, MIGRATIONS.len() as i32);
    let recorded = async |ids: &[u64]| store.recorded_settlements("r1", ids).await.unwrap();
    let kept = vec![(7, "first".to_string()), (8, "other".to_string())];
    assert_eq!(recorded(&[7, 8]).await, kept);
    assert!(store.record_settlement("r1", 7, "third").await.unwrap());
    assert_eq!(recorded(&[7, 8, 9]).await, kept);
    // Version 5: the run names no guest build, so any build may claim it
    // (its snapshot's header decides).
    let build: Option<String> = client
        .query_one("SELECT guest_build FROM runs WHERE run_id = 'r1'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(build, None);
    let claimed = store
        .claim("r1", &owner(), Some("b1"), 1, 100)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claimed.generation, 2);
}
