//! A store error as a problem. Its detail must be true of the request it
//! answers: "nothing was stored" is what lets a client send its intent
//! again under a new key, so it is said only before the job was stored;
//! once the job exists the problem names it and says to retry under the
//! same key.

use axum::http::{HeaderName, HeaderValue, header};
use uuid::Uuid;

use super::{Problem, ProblemType};
use crate::api::view::JOB_ID_HEADER;
use crate::store::StoreError;

/// How far a request had got when the job store failed under it. The
/// 503's detail must say it truthfully: on it a client decides whether
/// sending its intent again is safe, and under which key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreStage {
    /// Before the request committed anything: nothing was stored, no
    /// provider was called for it.
    BeforeCommit,
    /// While looking a job up: the request changed nothing, and whether the
    /// job exists (and what it did) cannot be known now.
    Lookup,
    /// After the job existed (this request created it, or found it): it may
    /// already have been sent to a provider.
    AfterCommit(Uuid),
    /// Partway through a request that changes several jobs: some changes
    /// may be stored.
    Partway,
    /// The write was on its way when the store failed (a connection broke
    /// with a statement or its commit in flight): it may have landed.
    /// [`Problem::store`] says this in place of [`StoreStage::BeforeCommit`]
    /// whenever the error cannot prove the write did not commit.
    CommitUnknown,
}

impl StoreStage {
    /// The problem's `stored` member: what the request left in the store,
    /// for a client that decides without reading the detail. `None` for a
    /// lookup, which stored nothing and cannot say what exists.
    fn stored(self) -> Option<&'static str> {
        match self {
            StoreStage::BeforeCommit => Some("no"),
            StoreStage::CommitUnknown => Some("maybe"),
            StoreStage::AfterCommit(_) => Some("yes"),
            StoreStage::Partway => Some("partly"),
            StoreStage::Lookup => None,
        }
    }

    fn unavailable_detail(self) -> String {
        match self {
            StoreStage::BeforeCommit => {
                "the job store cannot be reached; nothing was stored and no provider was called. Retry later."
                    .to_owned()
            }
            StoreStage::Lookup => "the job store cannot be reached, so no job can be read now; this \
                request changed nothing. A job created earlier may exist and may already have been sent to a \
                provider: retry this request later, and never send that intent again under a new \
                Idempotency-Key."
                .to_owned(),
            StoreStage::AfterCommit(job_id) => format!(
                "job {job_id} exists: it was stored and may already have been sent to a provider, but the \
                 job store cannot be reached, so its state cannot be read or changed now. Retry later: this \
                 request with the same Idempotency-Key, or GET /v1/jobs/{job_id}. Never send this intent \
                 again under a new Idempotency-Key."
            ),
            StoreStage::CommitUnknown => "the job store failed while this request's write was on its way, \
                so whether it was stored cannot be known now: it may have been, and a job it created may \
                already be running. Retry this request as it is, with the same Idempotency-Key (the retry \
                finds what was stored, or stores it now); never send this intent again under a new \
                Idempotency-Key."
                .to_owned(),
            StoreStage::Partway => "the job store cannot be reached; some of this request's changes may \
                already be stored, and jobs they let go on may have called a provider. Retry later: what is \
                already done is skipped."
                .to_owned(),
        }
    }
}

impl Problem {
    /// The problem for a store error: 503 `store-unavailable` (its detail
    /// saying what `stage` the request had reached) when the database
    /// cannot be reached, else 500 `internal`. After the job was stored,
    /// both name it: the `job_id` member, `Location` and `x-intentgate-job-id`.
    pub fn store(err: StoreError, stage: StoreStage) -> Problem {
        // "Nothing was stored" only when the error proves it.
        let stage = match stage {
            StoreStage::BeforeCommit if !err.provably_not_committed() => StoreStage::CommitUnknown,
            other => other,
        };
        let problem = match err {
            // A write that may have landed is always worth the same retry,
            // whatever broke it.
            _ if stage == StoreStage::CommitUnknown => {
                tracing::warn!(error = %err, "job store failed with a write in flight");
                Problem::new(ProblemType::StoreUnavailable, stage.unavailable_detail())
            }
            StoreError::Unavailable(_) => {
                tracing::warn!(error = %err, ?stage, "job store unavailable");
                Problem::new(ProblemType::StoreUnavailable, stage.unavailable_detail())
            }
            other => {
                tracing::error!(error = %other, ?stage, "job store error");
                Problem::new(
                    ProblemType::Internal,
                    "the job store failed unexpectedly; the error is in the gateway's log",
                )
            }
        };
        let problem = match stage.stored() {
            Some(stored) => problem.with("stored", stored),
            None => problem,
        };
        match stage {
            StoreStage::AfterCommit(job_id) => problem.naming_job(job_id),
            StoreStage::BeforeCommit
            | StoreStage::Lookup
            | StoreStage::Partway
            | StoreStage::CommitUnknown => problem,
        }
    }

    /// Names the job the problem is about, in the body and the headers.
    fn naming_job(mut self, job_id: Uuid) -> Problem {
        let id = job_id.to_string();
        if let Ok(location) = HeaderValue::from_str(&format!("/v1/jobs/{id}")) {
            self.headers.push((header::LOCATION, location));
        }
        if let Ok(value) = HeaderValue::from_str(&id) {
            self.headers.push((HeaderName::from_static(JOB_ID_HEADER), value));
        }
        self.with("job_id", id)
    }
}

/// A store error before the request committed anything (see [`Problem::store`]
/// for the other stages).
impl From<StoreError> for Problem {
    fn from(err: StoreError) -> Self {
        Problem::store(err, StoreStage::BeforeCommit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::DbError;

    /// `stored` says what the request left behind, from the proof the error
    /// gives: a refused connection proves nothing landed, a broken one does not.
    #[test]
    fn stored_says_no_only_on_proof() {
        let stored = |err: sqlx::Error, stage: StoreStage| {
            Problem::store(StoreError::Unavailable(DbError::Sqlx(err)), stage)
                .extensions
                .get("stored")
                .cloned()
        };
        let refused = || sqlx::Error::Io(std::io::ErrorKind::ConnectionRefused.into());
        let reset = || sqlx::Error::Io(std::io::ErrorKind::ConnectionReset.into());
        assert_eq!(stored(sqlx::Error::PoolTimedOut, StoreStage::BeforeCommit), Some("no".into()));
        assert_eq!(stored(refused(), StoreStage::BeforeCommit), Some("no".into()));
        assert_eq!(stored(reset(), StoreStage::BeforeCommit), Some("maybe".into()));
        assert_eq!(stored(reset(), StoreStage::AfterCommit(Uuid::nil())), Some("yes".into()));
        assert_eq!(stored(reset(), StoreStage::Lookup), None);
    }
}
