//! Provider contract suites (R9 in `docs/design.md`): a provider may be
//! failed over to only after a recorded run proved it keeps a route's
//! contract.
//!
//! What passes through this seam:
//! - **in**: suite files from `contract-tests/` ([`Suite::load_dir`]), a
//!   built [`Provider`](intentgate_providers::Provider), and the provider's
//!   declared `tokenizer` ([`Tokenizer::from_spec`], or `remote`: its own
//!   endpoints, [`intentgate_providers::RemoteTokenizer`]) and
//!   `context_window` from its config;
//! - **out**: a [`SuiteReport`] per (route, provider) — per case: passed,
//!   reasons, duration, round trips made — keyed by
//!   [`Suite::fingerprint`] and [`provider_fingerprint`], which the caller
//!   records and compares to decide whether a record is current;
//! - **reused at runtime**: [`ShapeChecker`], built once per route with a
//!   schema, judges every attempt's answer the same way the suite did; on a
//!   route whose suite declares tools, an answer's tool calls are checked
//!   against the tools its request offered ([`Offer`]).
//!
//! No database, CLI or HTTP here: the store records reports, the CLI shows
//! [`Progress`], the engine gates failover on records.

mod describe;
mod eligibility;
mod embeddings;
mod fingerprint;
mod render;
mod rules;
mod run;
mod runner;
mod shape;
mod suite;
mod template;
mod tokenizer;
mod tools;

#[cfg(test)]
mod testing;

pub use eligibility::{Current, Eligibility, judge};
pub use embeddings::EmbeddingContract;
pub use fingerprint::{provider_fingerprint, provider_fingerprint_with};
pub use render::{
    RenderCheck, RenderIssue, RenderIssueKind, RenderedPrompt, TokenizerRef, check_case, check_case_through,
    check_suite, check_suite_through,
};
pub use rules::Rules;
pub use run::{FinishedRun, RunError, fingerprint_of, pairs, run_pair};
pub use runner::{CaseReport, Progress, SuiteReport, run_suite, run_suite_through};
pub use shape::{ShapeChecker, ShapeError};
pub use suite::{Case, CaseExpect, MAX_TEMPERATURE, Suite, SuiteError};
pub use template::{Rendered, Template, TemplateSyntaxError};
pub use tokenizer::{Tokenizer, UnusableTokenizer};
pub use tools::{Expect, Offer, ToolError, ToolSet, ToolSpec};

/// Where the shipped suites live, relative to the working directory.
pub const DEFAULT_SUITE_DIR: &str = "contract-tests";
