//! intentgate: a multi-provider AI inference gateway whose one promise is
//! that one user intent is one job, however many retries, double clicks,
//! timeouts, fallbacks and racing attempts happen underneath.
//!
//! The modules follow the request (see `ARCHITECTURE.md`):
//! [`api`] (HTTP surface) → [`jobs`] and [`keys`] (the domain, no HTTP and no SQL) →
//! [`engine`] (drives jobs through providers) → [`store`] (SQLite and
//! PostgreSQL); [`budgets`] is the arithmetic of spend and rate limits. [`config`] and [`auth`] feed them;
//! [`app`] assembles a running gateway; [`cli`] is the command line.

#![deny(clippy::disallowed_methods)]

pub mod api;
pub mod app;
pub mod auth;
pub mod budgets;
pub mod cli;
pub mod config;
pub mod contract_runs;
pub mod contracts;
pub mod engine;
pub mod jobs;
pub mod keys;
pub mod server;
pub mod store;
pub mod telemetry;
pub mod traces;
