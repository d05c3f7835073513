//! What the result compare-and-swap (R6, R7) answers: both stores' paths
//! to it — the one-by-one write and PostgreSQL's delivery batches — answer
//! in these terms.

use uuid::Uuid;

use crate::jobs::Job;

/// What the compare-and-swap of a result did.
#[derive(Debug, Clone, PartialEq)]
pub enum CasOutcome {
    /// This attempt's result is the job's result; the job as the write left it.
    Won(Box<Job>),
    /// Another attempt completed the job first (`winner`), or the job was
    /// cancelled (no winner): this result stays on the attempt, marked
    /// `superseded`, for audit only.
    Superseded { winner: Option<Uuid> },
    /// The attempt had already been settled as `failed`: it cannot deliver.
    NotDeliverable,
}
