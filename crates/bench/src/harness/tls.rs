//! TLS for a benchmark run (`--tls`): a CA made for the run and one certificate it signed,
//! which every device of the run presents and checks its peers' against (mutual TLS, as a
//! node and its tenants run it; one certificate for all is enough to measure what TLS costs).

use anyhow::{Context as _, Result};
use rnic::soft::TlsOptions;

/// Mutual-TLS options valid for devices on 127.0.0.1, from a CA made now.
pub fn ephemeral() -> Result<TlsOptions> {
    TlsOptions::ephemeral("patronus-bench device").context("TLS options for the run")
}
