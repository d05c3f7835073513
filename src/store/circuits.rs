//! Provider circuits shared between replicas (`provider_circuits`): each
//! provider's circuit as the last replica to change it left it. One upsert
//! per change — a circuit opens or closes seldom — and one read of what
//! changed since a time; what the engine makes of them is
//! `src/engine/health.rs`.

use super::{Store, StoreError};

const UPSERT: &str = "INSERT INTO provider_circuits (provider, open_until, failures, changed_at, changed_by) \
     VALUES ($1, $2, $3, $4, $5) ON CONFLICT (provider) DO UPDATE SET open_until = excluded.open_until, \
     failures = excluded.failures, changed_at = excluded.changed_at, changed_by = excluded.changed_by \
     WHERE excluded.changed_at >= provider_circuits.changed_at";
const SELECT_CHANGED: &str = "SELECT provider, open_until, failures, changed_at, changed_by \
     FROM provider_circuits WHERE changed_at > $1 ORDER BY changed_at";

/// One provider's circuit as a replica changed it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct SharedCircuit {
    pub provider: String,
    /// Passed over until then; `None`: an answer closed it.
    pub open_until: Option<i64>,
    /// Signs of trouble in a row when it opened.
    pub failures: i64,
    pub changed_at: i64,
    /// The replica that changed it.
    pub changed_by: String,
}

impl Store {
    /// Records a change of a provider's circuit, unless a later one is
    /// recorded already.
    pub async fn record_circuit(&self, circuit: &SharedCircuit) -> Result<(), StoreError> {
        let args = vec![
            circuit.provider.as_str().into(),
            circuit.open_until.into(),
            circuit.failures.into(),
            circuit.changed_at.into(),
            circuit.changed_by.as_str().into(),
        ];
        self.execute(UPSERT, args).await.map(drop)
    }

    /// The circuits changed after `after_ms`, oldest change first.
    pub async fn circuits_changed_after(&self, after_ms: i64) -> Result<Vec<SharedCircuit>, StoreError> {
        self.read_all(SELECT_CHANGED, vec![after_ms.into()], |row| {
            Ok(SharedCircuit {
                provider: row.get(0)?,
                open_until: row.get(1)?,
                failures: row.get(2)?,
                changed_at: row.get(3)?,
                changed_by: row.get(4)?,
            })
        })
        .await
    }
}
