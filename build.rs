//! `sqlx::migrate!` embeds `migrations/` at compile time, but a proc macro
//! cannot tell cargo to watch a directory on stable Rust: without this, a new
//! migration file leaves a stale binary that refuses a database migrated by
//! a fresh one.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
