//! `intentgate contract run` and `intentgate contract status`: the platform
//! team's side of R9.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use crate::config::Config;
use crate::contract_runs::run_and_record;
use crate::contracts::{Progress, Suite, pairs};
use crate::engine::Gate;
use crate::store::Store;

/// Runs the suites, printing progress (a live line on a terminal, plain
/// lines otherwise) and a table; fails when any pair failed.
pub async fn run(
    config: &Config,
    store: &Store,
    route: Option<&str>,
    provider: Option<&str>,
) -> Result<bool, String> {
    let suites = Suite::load_dir(&config.contracts.dir).map_err(|err| err.to_string())?;
    let pairs = pairs(config, &suites, route, provider);
    if pairs.is_empty() {
        return Err(format!(
            "nothing to run: no route{} with a suite in {} has provider{} in its chain",
            route.map(|r| format!(" `{r}`")).unwrap_or_default(),
            config.contracts.dir.display(),
            provider.map(|p| format!(" `{p}`")).unwrap_or_default(),
        ));
    }
    let live = std::io::stderr().is_terminal();
    let mut rows = Vec::new();
    for (suite, provider) in pairs {
        let label = format!("{}/{}", suite.route(), provider.name);
        let mut on_progress = |progress: Progress| print_progress(&label, &progress, live);
        let report =
            run_and_record(store, suite, provider, &mut on_progress).await.map_err(|err| err.to_string())?;
        if live {
            eprint!("\r\x1b[2K");
        }
        let passed = report.cases.iter().filter(|c| c.passed).count();
        rows.push([
            report.route.clone(),
            report.provider.clone(),
            if report.passed { "pass".into() } else { "FAIL".into() },
            format!("{passed}/{}", report.cases.len()),
            format!("{:.1}s", report.duration_ms as f64 / 1000.0),
            report.failures().next().unwrap_or_default(),
        ]);
    }
    let all_passed = rows.iter().all(|row| row[2] == "pass");
    print_table(&["ROUTE", "PROVIDER", "RESULT", "CASES", "TIME", "FIRST FAILURE"], &rows);
    Ok(all_passed)
}

fn print_progress(label: &str, progress: &Progress, live: bool) {
    let line = match progress {
        Progress::CaseStarted { case, index, total } => format!("{label}: case {}/{total} {case}", index + 1),
        Progress::RoundTrip { case, repeat, repeats, ok } => {
            format!("{label}: {case} round trip {repeat}/{repeats} {}", if *ok { "ok" } else { "failed" })
        }
        Progress::CaseFinished { case, passed, duration_ms } => {
            format!("{label}: {case} {} ({duration_ms} ms)", if *passed { "passed" } else { "FAILED" })
        }
    };
    let line = super::terminal::printable(&line);
    if live {
        eprint!("\r\x1b[2K{line}");
        let _ = std::io::stderr().flush();
    } else if matches!(progress, Progress::CaseFinished { .. }) {
        eprintln!("{line}");
    }
}

/// Each (route, provider) of the config with its latest record and whether
/// the gate lets it serve the route, and why.
pub async fn status(config: &Config, store: &Store) -> Result<(), String> {
    let gate = Gate::load(config)?;
    gate.reload(store).await.map_err(|err| err.to_string())?;
    let mut rows = Vec::new();
    for route in &config.routes {
        for (index, provider) in route.chain.iter().enumerate() {
            let verdict = gate.verdict(route, provider);
            let role = if index == 0 { "primary" } else { "fallback" };
            let required = gate.check(route, provider, index).is_some();
            let eligible = match (verdict.is_eligible(), required) {
                (true, _) => "yes",
                (false, true) => "NO",
                (false, false) => "not required",
            };
            rows.push([
                route.name.clone(),
                provider.clone(),
                role.into(),
                eligible.into(),
                verdict.reason().to_owned(),
            ]);
        }
    }
    print_table(&["ROUTE", "PROVIDER", "ROLE", "ELIGIBLE", "WHY"], &rows);
    Ok(())
}

/// A plain, aligned table on stdout.
pub fn print_table<const N: usize>(header: &[&str; N], rows: &[[String; N]]) {
    let rows: Vec<Vec<String>> = rows.iter().map(|row| row.to_vec()).collect();
    print_rows(header, &rows);
}

/// A table of any width: `header`, then each row, columns padded.
pub fn print_rows(header: &[&str], rows: &[Vec<String>]) {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|row| row.iter().map(|cell| super::terminal::printable(cell).into_owned()).collect())
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> =
            cells.iter().zip(&widths).map(|(cell, width)| format!("{cell:<width$}")).collect();
        // Widths above count the escaped form's characters too.
        println!("{}", padded.join("  ").trim_end());
    };
    line(header.to_vec());
    for row in &rows {
        line(row.iter().map(String::as_str).collect());
    }
}

pub fn exit(result: Result<bool, String>) -> ExitCode {
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(err) => {
            eprintln!("error: {}", super::terminal::printable(&err));
            ExitCode::FAILURE
        }
    }
}
