use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _};

use intentgate::cli::{Cli, LogFormat, run};
use intentgate::traces::Traces;

/// mimalloc rather than the system's: a request makes hundreds of small
/// allocations (headers, JSON values, SQL parameters), often freed on
/// another task; measured, a fifth less CPU per job for 13 MB more RSS
/// (docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = EnvFilter::try_from_env("INTENTGATE_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let logs = match cli.log_format {
        LogFormat::Text => logs.boxed(),
        LogFormat::Json => logs.json().boxed(),
    };
    // Exported traces, when OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT asks for them.
    let (traces, refused) = match Traces::from_env() {
        Ok(traces) => (traces, None),
        Err(err) => (None, Some(err)),
    };
    tracing_subscriber::registry()
        .with(logs.with_filter(filter))
        .with(traces.as_ref().map(Traces::layer))
        .init();
    if let Some(err) = refused {
        tracing::error!(error = %err, "traces are not exported");
    }
    let code = run(cli).await;
    if let Some(traces) = traces {
        // The batch's last spans are sent on this runtime: block elsewhere.
        let _ = tokio::task::spawn_blocking(move || traces.shutdown()).await;
    }
    code
}
