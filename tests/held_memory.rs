//! What a job held open costs in memory is mostly the futures that wait for
//! it. A store call's future is part of every one of them (a drive awaits
//! several), so it must not carry anything large inline: sqlx's connection
//! acquire is about 14 KB, and awaited inline it made every store call as
//! large — on either backend, since one future type serves both — and a
//! streamed job's task 66 KB (release build; docs/benchmarks.md). In this
//! test's build a job read was 4.4 KB and is 0.7 KB: the bound leaves room
//! for the store's own state and catches the next large inline await.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::TestStore;

store_matrix!(a_store_call_does_not_carry_the_pools_connect_path);

const STORE_CALL_BOUND: usize = 2048;

async fn a_store_call_does_not_carry_the_pools_connect_path(store: TestStore) {
    let config = common::test_config(&store.url);
    let real = intentgate::store::Store::connect(&config.store).await.unwrap();
    real.migrate().await.unwrap();
    let id = uuid::Uuid::now_v7();
    let read = real.job(id);
    let size = std::mem::size_of_val(&read);
    assert!(size <= STORE_CALL_BOUND, "a job read's future is {size} bytes");
    assert!(read.await.unwrap().is_none());
    let attempts = real.attempts(id);
    let size = std::mem::size_of_val(&attempts);
    assert!(size <= STORE_CALL_BOUND, "an attempts read's future is {size} bytes");
    assert!(attempts.await.unwrap().is_empty());
}
