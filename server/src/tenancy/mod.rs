//! Tenants that are separate: authentication from an auth file, the one gate that
//! decides every request's tenant, and per-tenant limits on ingest and queries.
//!
//! Authentication is off unless `--auth-file` names a file; the file is read again
//! on SIGHUP, and a file that does not read keeps the previous one in force.

mod admission;
mod auth;
pub mod authfile;
mod bucket;
mod gate;
mod limits;
pub mod routes;
pub mod scope;
mod series;

use std::path::PathBuf;
use std::sync::{Arc, RwLock};

pub use admission::{Admission, QueryPermit};
pub use auth::AuthError;
pub use authfile::{AuthFile, AuthFileError, Credentials};
pub use gate::{gate, has_admin_token};
pub use limits::{LimitExceeded, LimitName, Limits};

/// What `profiledb serve` says about tenants.
#[derive(Clone, Debug)]
pub struct TenancyOptions {
    /// Authentication on, with the tenants of this file.
    pub auth_file: Option<PathBuf>,
    /// Limits of every tenant the auth file does not override.
    pub limits: Limits,
    /// How long a series counts as active after its last write. Default 1 h.
    pub active_series_window_ms: i64,
}

impl Default for TenancyOptions {
    fn default() -> Self {
        TenancyOptions {
            auth_file: None,
            limits: Limits::default(),
            active_series_window_ms: 3_600_000,
        }
    }
}

pub struct Tenancy {
    options: TenancyOptions,
    credentials: RwLock<Option<Arc<Credentials>>>,
    admission: Arc<Admission>,
}

impl Tenancy {
    /// Reads the auth file, if any; a file that does not read stops the start.
    pub fn open(options: TenancyOptions) -> Result<Tenancy, AuthFileError> {
        let admission = Arc::new(Admission::new(
            options.limits.clone(),
            options.active_series_window_ms,
        ));
        let t = Tenancy {
            options,
            credentials: RwLock::new(None),
            admission,
        };
        t.reload()?;
        Ok(t)
    }

    /// The credentials in force, or `None` when authentication is off.
    pub fn credentials(&self) -> Option<Arc<Credentials>> {
        self.credentials
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn admission(&self) -> &Arc<Admission> {
        &self.admission
    }

    /// Reads the auth file again; on error the credentials in force stay. Returns
    /// the number of tenants now known.
    pub fn reload(&self) -> Result<usize, AuthFileError> {
        let Some(path) = &self.options.auth_file else {
            return Ok(0);
        };
        let creds = AuthFile::read(path)?.compile(&self.options.limits)?;
        let n = creds.tenants.len();
        self.admission.set_overrides(creds.limits.clone());
        *self.credentials.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(creds));
        Ok(n)
    }

    /// Reloads the auth file on every SIGHUP, for as long as the runtime runs.
    pub async fn reload_on_sighup(self: Arc<Self>) {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let Some(path) = self.options.auth_file.clone() else {
                return;
            };
            let mut hup = match signal(SignalKind::hangup()) {
                Ok(s) => s,
                Err(e) => {
                    tracing::error!(error = %e, "cannot listen for SIGHUP; the auth file will not reload");
                    return;
                }
            };
            while hup.recv().await.is_some() {
                match self.reload() {
                    Ok(n) => {
                        tracing::info!(file = %path.display(), tenants = n, "auth file reloaded")
                    }
                    Err(e) => tracing::error!(
                        error = %e,
                        "auth file not reloaded; the previous tenants and tokens stay in force"
                    ),
                }
            }
        }
    }
}
