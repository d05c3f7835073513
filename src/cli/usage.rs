//! `intentgate usage`: an owner's budgets and rate limits in their current
//! windows, read from the configured database (what `GET /v1/usage` says).

use std::process::ExitCode;

use super::contract::print_table;
use crate::budgets::{LimitKind, nanos_to_decimal};
use crate::config::Config;
use crate::engine::Engine;
use crate::jobs::rfc3339;
use crate::store::Store;

pub async fn show(config: &Config, store: Store, owner: &str, json: bool) -> ExitCode {
    let engine = match Engine::operator(config, store) {
        Ok(engine) => engine,
        Err(err) => return fail(&err.to_string()),
    };
    if let Err(err) = engine.load_spend_limits().await {
        return fail(&err.to_string());
    }
    let attribution = crate::jobs::Attribution::default();
    let meters = match engine.usage(crate::jobs::Payer { owner, attribution: &attribution }).await {
        Ok(meters) => meters,
        Err(err) => return fail(&err.to_string()),
    };
    if json {
        println!("{}", crate::api::usage_body(owner, &engine.currency(), &meters));
        return ExitCode::SUCCESS;
    }
    if meters.is_empty() {
        println!("no budget or rate limit applies to `{owner}`");
        return ExitCode::SUCCESS;
    }
    let currency = engine.currency();
    let amount = |kind: LimitKind, value: i64| match kind {
        LimitKind::Budget => format!("{} {currency}", nanos_to_decimal(value)),
        LimitKind::Requests => format!("{value} requests"),
        LimitKind::Tokens => format!("{value} tokens"),
    };
    let rows: Vec<[String; 6]> = meters
        .iter()
        .map(|m| {
            [
                m.meter.clone(),
                m.window.to_owned(),
                amount(m.kind, m.limit),
                amount(m.kind, m.used),
                amount(m.kind, m.held),
                rfc3339(m.window_end_ms),
            ]
        })
        .collect();
    print_table(&["METER", "WINDOW", "LIMIT", "USED", "RESERVED", "RESETS AT"], &rows);
    ExitCode::SUCCESS
}

fn fail(message: &str) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::FAILURE
}
