//! `profiledb debuginfo upload FILE…`: sends debug files to a running server's
//! `POST /api/v1/debuginfo`, one by one, and says what became of each.

use std::path::PathBuf;

use anyhow::Context;
use clap::Subcommand;

use super::client::{agent, read_answer};

#[derive(Debug, Subcommand)]
pub enum DebuginfoCommand {
    /// Upload ELF debug files (a binary with its symbols, or the output of
    /// `objcopy --only-keep-debug`); each is named by its own GNU build id.
    Upload {
        /// Server to send them to.
        #[arg(long, default_value = "http://127.0.0.1:4040")]
        server: String,
        /// Bearer token, when the server requires authentication.
        #[arg(long)]
        token: Option<String>,
        /// The files.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
}

impl DebuginfoCommand {
    pub fn run(self) -> anyhow::Result<()> {
        match self {
            DebuginfoCommand::Upload {
                server,
                token,
                files,
            } => upload(&server, token.as_deref(), &files),
        }
    }
}

fn upload(server: &str, token: Option<&str>, files: &[PathBuf]) -> anyhow::Result<()> {
    let url = format!("{}/api/v1/debuginfo", server.trim_end_matches('/'));
    let client = agent();
    let mut failed = 0;
    for (i, path) in files.iter().enumerate() {
        let bytes =
            std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        let mut req = client
            .post(&url)
            .header("content-type", "application/octet-stream");
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let resp = req
            .send(&bytes[..])
            .with_context(|| format!("cannot reach {url}"))?;
        match read_answer(&url, resp) {
            Ok(v) => println!(
                "[{}/{}] {}: build id {}, {} bytes{}",
                i + 1,
                files.len(),
                path.display(),
                v["build_id"].as_str().unwrap_or("?"),
                v["bytes"],
                if v["replaced"] == true {
                    " (replaced)"
                } else {
                    ""
                }
            ),
            Err(e) => {
                failed += 1;
                eprintln!("[{}/{}] {}: {e:#}", i + 1, files.len(), path.display());
            }
        }
    }
    anyhow::ensure!(failed == 0, "{failed} of {} files refused", files.len());
    Ok(())
}
