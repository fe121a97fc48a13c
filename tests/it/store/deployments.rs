//! The store as real deployments reach it: TLS with a private CA and a
//! client certificate (the test services' `tls-port` server), ACL users,
//! a managed service that refuses `CONFIG`, and credentials that are
//! missing or wrong, each reported as what it is.

use std::sync::Arc;

use idemgate::store::redis::{Auth, RedisOptions, RedisStore, RedisTarget};
use idemgate::store::{ClaimOutcome, ClaimStore, StoreError};
use idemgate_testkit::servers::{RedisServer, ServerOptions};
use idemgate_testkit::unique;

use super::conformance::{claim, hash, streams, EXACT, T0};
use super::tls_options;

async fn connect(options: &RedisOptions) -> Result<RedisStore, StoreError> {
    RedisStore::connect(options, streams()).await
}

fn refusal(result: Result<RedisStore, StoreError>) -> String {
    match result {
        Ok(_) => panic!("the store connected"),
        Err(StoreError::Refused(why)) => why,
        Err(other) => panic!("not a refusal: {other}"),
    }
}

#[tokio::test]
async fn claims_go_through_rediss_with_a_private_ca_and_a_client_certificate() {
    let salt = unique("tls");
    let options = tls_options(
        &format!("{salt}:"),
        "IDEMGATE_TEST_REDIS_TLS_USER",
        "IDEMGATE_TEST_REDIS_TLS_PASSWORD",
    );
    let store: Arc<dyn ClaimStore> = Arc::new(connect(&options).await.expect("rediss store"));
    let first = store
        .claim(&[claim(EXACT, hash(&salt, 1), 10, T0)])
        .await
        .unwrap();
    assert_eq!(first[0], ClaimOutcome::Won { fresh: true });
    let copy = store
        .claim(&[claim(EXACT, hash(&salt, 1), 11, T0)])
        .await
        .unwrap();
    assert!(matches!(copy[0], ClaimOutcome::Held { .. }), "{copy:?}");
}

#[tokio::test]
async fn without_a_client_certificate_the_tls_server_turns_the_store_away() {
    let mut options = tls_options(
        "idemgate-test:",
        "IDEMGATE_TEST_REDIS_TLS_USER",
        "IDEMGATE_TEST_REDIS_TLS_PASSWORD",
    );
    if let Some(files) = options.tls.as_mut() {
        files.cert_file = None;
        files.key_file = None;
    }
    assert!(
        connect(&options).await.is_err(),
        "connected without a client certificate"
    );
}

#[tokio::test]
async fn a_wrong_acl_password_over_tls_is_reported_as_wrongpass() {
    let mut options = tls_options(
        "idemgate-test:",
        "IDEMGATE_TEST_REDIS_TLS_USER",
        "IDEMGATE_TEST_REDIS_TLS_PASSWORD",
    );
    options.auth.password = Some("not-the-password".into());
    let why = refusal(connect(&options).await);
    assert!(why.contains("WRONGPASS"), "{why}");
}

#[tokio::test]
async fn a_managed_redis_that_refuses_config_starts_with_a_warning() {
    let options = tls_options(
        &format!("{}:", unique("managed")),
        "IDEMGATE_TEST_REDIS_MANAGED_USER",
        "IDEMGATE_TEST_REDIS_MANAGED_PASSWORD",
    );
    let store = connect(&options)
        .await
        .expect("a store despite CONFIG refused");
    let won = store
        .claim(&[claim(EXACT, hash(&unique("managed"), 1), 1, T0)])
        .await
        .unwrap();
    assert_eq!(won[0], ClaimOutcome::Won { fresh: true });
}

#[tokio::test]
async fn a_managed_redis_that_refuses_config_is_refused_when_the_check_is_required() {
    let options = RedisOptions {
        require_eviction_check: true,
        ..tls_options(
            "idemgate-test:",
            "IDEMGATE_TEST_REDIS_MANAGED_USER",
            "IDEMGATE_TEST_REDIS_MANAGED_PASSWORD",
        )
    };
    let why = refusal(connect(&options).await);
    assert!(
        why.contains("maxmemory-policy") && why.contains("require_eviction_check"),
        "{why}"
    );
}

fn password_protected() -> RedisServer {
    RedisServer::start(
        "auth",
        ServerOptions {
            args: vec!["--requirepass".into(), "right-password".into()],
            ..ServerOptions::default()
        },
    )
}

#[tokio::test]
async fn a_missing_password_is_reported_as_noauth() {
    let server = password_protected();
    let options = RedisOptions::new(RedisTarget::Standalone(server.url()), "t:");
    let why = refusal(connect(&options).await);
    assert!(
        why.contains("NOAUTH") && why.contains("store.password"),
        "{why}"
    );
}

#[tokio::test]
async fn a_wrong_password_is_reported_as_wrongpass_and_the_right_one_connects() {
    let server = password_protected();
    let mut options = RedisOptions {
        auth: Auth {
            username: None,
            password: Some("wrong-password".into()),
        },
        ..RedisOptions::new(RedisTarget::Standalone(server.url()), "t:")
    };
    let why = refusal(connect(&options).await);
    assert!(why.contains("WRONGPASS"), "{why}");
    options.auth.password = Some("right-password".into());
    connect(&options)
        .await
        .expect("the right password connects");
}

#[tokio::test]
async fn an_evicting_policy_is_still_refused_with_the_field_to_change() {
    let server = RedisServer::start(
        "lru",
        ServerOptions {
            args: vec!["--maxmemory-policy".into(), "allkeys-lru".into()],
            ..ServerOptions::default()
        },
    );
    let options = RedisOptions::new(RedisTarget::Standalone(server.url()), "t:");
    let why = refusal(connect(&options).await);
    assert!(
        why.contains("allkeys-lru") && why.contains("allow_eviction"),
        "{why}"
    );
}
