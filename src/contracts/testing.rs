//! Test helpers shared by the contract modules' unit tests.

use std::path::PathBuf;

use super::suite::{Suite, SuiteError};

/// A scratch directory holding `schemas/s.json`, removed on drop.
pub(crate) struct Scratch(pub(crate) PathBuf);

impl Scratch {
    pub(crate) fn new(schema: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("intentgate-suite-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(dir.join("schemas")).unwrap();
        std::fs::write(dir.join("schemas/s.json"), schema).unwrap();
        Scratch(dir)
    }

    /// Parses `toml` as if it were `s.toml` in this directory.
    pub(crate) fn suite(&self, toml: &str) -> Result<Suite, SuiteError> {
        Suite::from_toml(&self.0.join("s.toml"), toml)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
