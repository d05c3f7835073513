//! PostgreSQL over TLS (`sslmode` in the URL, rustls with ring): managed
//! databases demand it. The local test server offers TLS with a certificate
//! no root vouches for, which shows all three behaviours: `disable` stays
//! plain, `require` encrypts, and `verify-full` refuses the unverifiable
//! certificate as an unavailable store — an error with the reason, never a
//! panic, never "built without TLS support".

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Backend, TestStore};
use intentgate::store::{Store, StoreError};
use sqlx::Connection;

fn with_sslmode(url: &str, mode: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}sslmode={mode}")
}

/// Whether the server sees this connection as TLS.
async fn encrypted(url: &str) -> bool {
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .fetch_one(&mut conn)
        .await
        .unwrap()
}

#[tokio::test]
async fn sslmode_disable_stays_plain_require_encrypts_verify_full_refuses_an_unknown_certificate() {
    let Some(store) = TestStore::new(Backend::Postgres).await else { return };

    let plain = with_sslmode(&store.url, "disable");
    Store::connect(&common::test_config(&plain).store).await.unwrap().ping().await.unwrap();
    assert!(!encrypted(&plain).await, "sslmode=disable never tries TLS");

    let required = with_sslmode(&store.url, "require");
    let server_has_tls = {
        let tls = Store::connect(&common::test_config(&required).store).await.unwrap();
        match tls.ping().await {
            Ok(()) => true,
            // A server without TLS: refused with the driver's reason.
            Err(err) => {
                assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
                assert!(err.to_string().contains("server does not support TLS"), "{err}");
                false
            }
        }
    };
    if !server_has_tls {
        return;
    }
    assert!(encrypted(&required).await, "sslmode=require encrypts");

    // The local certificate is self-signed: verify-full must refuse it.
    let verified = with_sslmode(&store.url, "verify-full");
    let err = Store::connect(&common::test_config(&verified).store)
        .await
        .unwrap()
        .ping()
        .await
        .expect_err("an unverifiable certificate is refused");
    assert!(matches!(err, StoreError::Unavailable(_)), "an unavailable store, not a panic: {err:?}");
    let message = err.to_string().to_lowercase();
    assert!(message.contains("certificate") || message.contains("tls"), "the reason: {message}");
}
