//! The SQLite files hold every prompt: the directory the gateway creates is
//! 0700, the database and its -wal and -shm 0600, whatever the umask.
//! (SQLite only: PostgreSQL's files are the server's business.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::*;

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap_or_else(|err| panic!("{}: {err}", path.display())).permissions().mode()
        & 0o777
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_directory_and_files_are_private() {
    let root = std::env::temp_dir().join(format!("intentgate-modes-{}", uuid::Uuid::now_v7()));
    let dir = root.join("data");
    let db = dir.join("intentgate.db");
    // The harness's store is replaced by a path whose directory does not exist.
    let store = TestStore::new(Backend::Sqlite).await.unwrap();
    let gw = TestGateway::start_tweaked(&store, |doc| {
        let table = doc.get_mut("store").unwrap().as_table_mut().unwrap();
        table.insert("url".into(), format!("sqlite://{}", db.display()).into());
    })
    .await;
    let created = gw.create(ALICE, "modes", &chat_body("hello")).await;
    assert_eq!(created.status(), 201);

    assert_eq!(mode(&dir), 0o700, "data directory");
    for suffix in ["", "-wal", "-shm"] {
        let file = Path::new(&format!("{}{suffix}", db.display())).to_path_buf();
        assert_eq!(mode(&file), 0o600, "{}", file.display());
    }
    drop(gw);
    let _ = std::fs::remove_dir_all(&root);
}
