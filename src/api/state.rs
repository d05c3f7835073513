//! What every handler can reach: the store, the engine, and the
//! configuration and principals a reload swaps.

use std::sync::Arc;

use crate::auth::Principals;
use crate::config::Config;
use crate::engine::Engine;
use crate::store::Store;

/// What every handler can reach: one `Arc`, since axum clones the state
/// for every request (several times, once per layer that holds it), and
/// each clone of the parts is an atomic count shared by every core.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

/// The parts of [`AppState`].
pub struct Shared {
    pub live: Live,
    /// The stored API keys, as the request path looks them up.
    pub keys: crate::auth::StoredKeys,
    pub store: Store,
    pub engine: Engine,
    pub max_body_bytes: usize,
}

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

impl AppState {
    pub fn new(shared: Shared) -> AppState {
        AppState(Arc::new(shared))
    }

    /// The configuration now (a reload swaps it; see [`Live`]).
    pub fn config(&self) -> Arc<Config> {
        self.live.now().0
    }

    /// The API keys now, as principals.
    pub fn principals(&self) -> Arc<Principals> {
        self.live.now().1
    }
}

/// The configuration and principals the doors read, swapped together by a
/// reload (`app::Reloader`): a request reads one pair, never half of each.
/// The engine keeps its own snapshot (see `engine::reload`).
#[derive(Clone)]
pub struct Live(Arc<std::sync::RwLock<(Arc<Config>, Arc<Principals>)>>);

impl Live {
    pub fn new(config: Config, principals: Principals) -> Live {
        Live(Arc::new(std::sync::RwLock::new((Arc::new(config), Arc::new(principals)))))
    }

    pub fn now(&self) -> (Arc<Config>, Arc<Principals>) {
        self.0.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Makes `config` and `principals` what every request from now on reads.
    pub fn replace(&self, config: Config, principals: Principals) {
        *self.0.write().unwrap_or_else(std::sync::PoisonError::into_inner) =
            (Arc::new(config), Arc::new(principals));
    }
}
