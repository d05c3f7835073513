//! Problems of API keys: a stored key that no longer works, a route the
//! key may not use, and why a key admin call changed nothing.

use super::{Problem, ProblemType, StoreStage};
use crate::auth::ManageError;
use crate::keys::KeyRefusal;

impl Problem {
    /// A stored key that was revoked, expired or retired: 401, before
    /// anything is read or stored.
    pub fn key_refused(refusal: KeyRefusal) -> Problem {
        let reason = match refusal {
            KeyRefusal::Revoked => "revoked",
            KeyRefusal::Expired => "expired",
            KeyRefusal::Retired => "rotated",
        };
        Problem::new(ProblemType::Unauthorized, refusal.to_string()).with("reason", reason)
    }

    /// The caller's key may not use `route`.
    pub fn route_not_allowed(route: &str) -> Problem {
        Problem::new(ProblemType::RouteNotAllowed, format!("this API key may not use the route `{route}`"))
            .with("route", route)
    }

    /// Why a key admin call changed nothing.
    pub fn key_management(err: ManageError) -> Problem {
        let detail = err.to_string();
        match err {
            ManageError::Invalid(invalid) => Problem::new(ProblemType::InvalidBody, detail)
                .titled("Invalid API key")
                .with("path", format!("/{}", invalid.field)),
            ManageError::Exceeds(_) => Problem::new(ProblemType::KeyRightsExceeded, detail),
            ManageError::NotFound(_) => Problem::new(ProblemType::NotFound, detail),
            ManageError::Revoked(_) | ManageError::Rotated(_) | ManageError::Changed(_) => {
                Problem::new(ProblemType::KeyConflict, detail)
            }
            ManageError::Store(err) => Problem::store(err, StoreStage::BeforeCommit),
            ManageError::NoRandomness(_) => {
                tracing::error!(error = %detail, "cannot make an API key");
                Problem::new(ProblemType::Internal, detail)
            }
        }
    }
}
