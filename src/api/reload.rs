//! Reloading the configuration without a restart: `POST /v1/admin/reload`
//! (an admin key) and SIGHUP (`intentgate serve`) run [`reload`].
//!
//! The file the gateway was started from is read again with its
//! environment overrides, validated, and every part built — the providers'
//! clients and API keys, the contract suites, the principals — before
//! anything is swapped; a file that fails any of it changes nothing and
//! the answer (and the log) says why. Then the engine and the doors swap
//! to it whole. Jobs being driven keep the snapshot they started with
//! (`engine::configured`); new jobs get the new one. What only a restart
//! can change (the store, the listener and its limits, the engine's lease
//! settings, the simulator) is reported, not applied.

use axum::Json;
use axum::extract::State;
use serde::Serialize;

use super::auth::Admin;
use super::{AppState, Live, Problem, ProblemType};
use crate::auth::Principals;
use crate::config::Config;
use crate::engine::Engine;

/// What a reload did.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Reloaded {
    /// The version now running (`config_version` on `/readyz`).
    pub version: String,
    /// The version it replaced.
    pub previous: String,
    /// Sections that changed but take effect only at the next start.
    pub restart_required: Vec<&'static str>,
}

/// Why a reload changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error("the gateway was not started from a file, so there is none to read again")]
    NoFile,
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Principals(#[from] crate::auth::MissingKeyEnv),
    #[error(transparent)]
    Engine(#[from] crate::engine::EngineError),
}

/// Reads the running configuration's file again and, if every part of it
/// can be built, makes it the configuration of everything from now on.
pub async fn reload(live: &Live, engine: &Engine) -> Result<Reloaded, ReloadError> {
    let (running, _) = live.now();
    let path = running.source.clone().ok_or(ReloadError::NoFile)?;
    let next = Config::load(&path)?;
    let principals = Principals::from_config(&next)?;
    engine.reload(&next).await?;
    let restart_required = restart_only_changes(&running, &next);
    crate::telemetry::install(&next);
    metrics::gauge!(crate::telemetry::CONFIG_INFO, "version" => running.version.clone()).set(0.0);
    metrics::gauge!(crate::telemetry::CONFIG_INFO, "version" => next.version.clone()).set(1.0);
    let reloaded =
        Reloaded { version: next.version.clone(), previous: running.version.clone(), restart_required };
    live.replace(next, principals);
    tracing::info!(version = %reloaded.version, previous = %reloaded.previous,
        restart_required = ?reloaded.restart_required, path = %path.display(), "configuration reloaded");
    Ok(reloaded)
}

/// The sections a running gateway cannot change, that differ between
/// `running` and `next` (compared, never printed: the store's URL may
/// carry a password).
fn restart_only_changes(running: &Config, next: &Config) -> Vec<&'static str> {
    let differs = |a: &dyn std::fmt::Debug, b: &dyn std::fmt::Debug| format!("{a:?}") != format!("{b:?}");
    [
        ("store", differs(&running.store, &next.store)),
        ("server", differs(&running.server, &next.server)),
        ("engine", differs(&running.engine, &next.engine)),
        ("simulator", differs(&running.simulator, &next.simulator)),
    ]
    .into_iter()
    .filter_map(|(section, changed)| changed.then_some(section))
    .collect()
}

#[utoipa::path(
    post,
    path = "/v1/admin/reload",
    tag = "operations",
    operation_id = "reload_config",
    summary = "Reload the configuration file (admin)",
    description = "Reads the file the gateway was started from again, validates it and builds every \
        part; only then do new jobs and requests use it. Jobs being driven keep the configuration \
        they started with. A file that fails changes nothing. SIGHUP does the same.",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The new configuration runs", body = Reloaded),
        (status = 401, response = super::problem::Unauthorized),
        (status = 403, response = super::problem::Forbidden),
        (status = 422, description = "`config-rejected`: the file does not parse, validate or build; the \
            running configuration stays", body = Problem, content_type = "application/problem+json"),
        (status = 500, response = super::problem::Internal),
    )
)]
pub async fn reload_config(State(state): State<AppState>, _admin: Admin) -> Result<Json<Reloaded>, Problem> {
    match reload(&state.live, &state.engine).await {
        Ok(reloaded) => Ok(Json(reloaded)),
        Err(err) => {
            tracing::warn!(error = %err, "configuration reload refused; the running configuration stays");
            Err(Problem::new(ProblemType::ConfigRejected, err.to_string()))
        }
    }
}
