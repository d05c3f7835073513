//! The HTTP surface: routing, authentication, the `Idempotency-Key` header
//! and problem+json errors. Handlers translate HTTP into calls on the store
//! (and, for execution, the engine); no rule of the domain is decided here.
//!
//! Layers a request passes, outermost first: tracing of method, path, status
//! and latency → the router (unknown path 404, wrong method 405, both as
//! problem+json) → the `Caller` extractor (401) → the handler, which reads
//! the body within `server.max_body_bytes` (413, at once when `Content-Length`
//! says so; 400 when the body cannot be read) and, from the headers,
//! `server.body_read_timeout` (408, see `deadline`), through `extract`'s
//! extractors, whose rejections are problem+json too.

mod anthropic;
mod attempts;
mod auth;
mod browse;
mod console;
mod contracts;
mod deadline;
mod door;
mod embeddings;
mod extract;
mod health;
mod held_body;
mod idempotency;
mod ijson;
mod job_request;
mod jobs;
mod keys;
mod limits;
mod metrics;
mod openai;
mod openapi;
mod prefer;
mod problem;
mod queue;
pub mod reload;
mod responses;
mod router;
mod routes;
mod state;
mod submit;
mod tags;
mod text;
mod usage;
pub use usage::{DAY_MS, SpendAsk, SpendRow, dimensions, instant, spend_csv, spend_report, usage_body};
mod view;

pub use auth::Caller;
pub use idempotency::IDEMPOTENCY_KEY;
pub use jobs::IDEMPOTENT_REPLAYED;
pub use problem::{PROBLEM_TYPE_BASE, Problem, ProblemType, StoreStage};

pub use router::router;
pub use state::{AppState, Live, Shared};
