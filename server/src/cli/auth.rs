//! `profiledb auth`: add a tenant or a token to the auth file, hash a token.

use std::path::PathBuf;

use anyhow::Context;

use crate::tenancy::authfile::{generate_token, hash_token, AuthFile};
use crate::tenancy::Limits;

/// `profiledb auth ...`.
#[derive(Clone, Debug, clap::Subcommand)]
pub enum AuthCommand {
    /// Add a tenant to the auth file (created if missing), or one more token to a
    /// tenant it has, and print the token. Only its SHA-256 digest is stored: keep
    /// the printed token, it cannot be shown again. Send SIGHUP to a running server
    /// to take it into account.
    ///
    /// Clients send it as HTTP basic auth (user: the tenant id, password: the token),
    /// as Grafana's Pyroscope datasource and the Pyroscope SDKs do, or as
    /// `Authorization: Bearer <token>`.
    #[command(verbatim_doc_comment)]
    AddTenant {
        /// The auth file.
        #[arg(long, value_name = "FILE")]
        auth_file: PathBuf,
        /// The tenant id (what X-Scope-OrgID would carry).
        #[arg(long)]
        tenant: String,
        /// Use this token instead of a new random one (at least 16 characters).
        #[arg(long)]
        token: Option<String>,
    },
    /// Print the digest of a token (`sha256:...`), as the auth file stores it.
    HashToken {
        /// The token; read from standard input when absent.
        #[arg(long)]
        token: Option<String>,
    },
}

impl AuthCommand {
    pub fn run(self) -> anyhow::Result<()> {
        match self {
            AuthCommand::AddTenant {
                auth_file,
                tenant,
                token,
            } => {
                let mut file = if auth_file.exists() {
                    AuthFile::read(&auth_file)?
                } else {
                    AuthFile::default()
                };
                let token = match token {
                    Some(t) => t,
                    None => generate_token().context("no random numbers for a token")?,
                };
                file.add_token(&tenant, hash_token(&token)?)?;
                // The whole file must still load as a server would read it.
                file.compile(&Limits::default())?;
                file.write(&auth_file)?;
                eprintln!(
                    "tenant {tenant} added to {}; send SIGHUP to a running server to load it",
                    auth_file.display()
                );
                println!("{token}");
                Ok(())
            }
            AuthCommand::HashToken { token } => {
                let token = match token {
                    Some(t) => t,
                    None => {
                        let mut line = String::new();
                        std::io::stdin()
                            .read_line(&mut line)
                            .context("cannot read the token from standard input")?;
                        line.trim_end_matches(['\r', '\n']).to_string()
                    }
                };
                println!("{}", hash_token(&token)?);
                Ok(())
            }
        }
    }
}
