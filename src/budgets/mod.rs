//! Spend budgets and rate limits as arithmetic: prices, windows, what an
//! attempt reserves before it is sent and what it is charged once settled.
//!
//! No SQL and no HTTP here. What passes through this seam:
//! - in: the configured [`Limits`] (prices, `[[budgets]]`, `[[rate_limits]]`),
//!   an owner, a route, a provider and an estimate of the request's tokens;
//! - out: [`Hold`]s — one per meter and window the attempt (or the job)
//!   counts against — that the store checks and books in the same
//!   transaction that writes the attempt `starting` (or inserts the job),
//!   and the [`crate::jobs::charge`] that replaces an attempt's reservation when it
//!   leaves its open state.
//!
//! Money is counted in integer nano-units of the configured currency, so
//! that the spend of a window is the exact sum of its attempts' costs.

mod limits;
mod price;
pub mod report;
mod stored;
mod window;

pub use limits::{BudgetRule, Hold, LimitKind, LimitRefusal, Limits, RateLimitRule};
pub use price::{Price, PriceError, TokenUsage, decimal_to_nanos, nanos_to_decimal};
pub use stored::{LimitAudit, LimitScope, SpendLimit, merge_holds, stored_holds};
pub use window::{Window, WindowError};
