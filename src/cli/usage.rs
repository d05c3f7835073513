//! `intentgate usage`: an owner's budgets and rate limits in their current
//! windows, read from the configured database (what `GET /v1/usage` says);
//! `intentgate spend`: the spend report (`GET /v1/usage/spend`).

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

/// What `intentgate spend` reports on.
pub struct SpendArgs {
    pub from: Option<String>,
    pub to: Option<String>,
    pub group_by: String,
    pub owner: Option<String>,
    pub team: Option<String>,
}

/// How it prints: a table unless one of these.
pub struct Print {
    pub csv: bool,
    pub json: bool,
}

pub async fn spend(config: &Config, store: Store, args: SpendArgs, print: Print) -> ExitCode {
    let ask = match spend_ask(args) {
        Ok(ask) => ask,
        Err(err) => return fail(&err),
    };
    let report = match crate::api::spend_report(&store, config, config.billing.currency.clone(), &ask).await {
        Ok(report) => report,
        Err(err) => return fail(&err.to_string()),
    };
    if print.csv {
        print!("{}", crate::api::spend_csv(&report));
    } else if print.json {
        println!("{}", serde_json::to_string_pretty(&report).unwrap_or_default());
    } else {
        let mut header: Vec<&str> = report.group_by.clone();
        if header.is_empty() {
            header.push("");
        }
        header.extend(["COST", "TOKENS", "ATTEMPTS"]);
        let mut rows: Vec<Vec<String>> =
            report.rows.iter().map(|row| spend_line(&report.group_by, row)).collect();
        rows.push(spend_line(&report.group_by, &report.total));
        if let Some(total) = rows.last_mut().and_then(|line| line.first_mut()) {
            *total = "(total)".to_owned();
        }
        super::contract::print_rows(&header, &rows);
    }
    ExitCode::SUCCESS
}

fn spend_ask(args: SpendArgs) -> Result<crate::api::SpendAsk, String> {
    let to = args.to.as_deref().map(|to| crate::api::instant("--to", to)).transpose()?;
    let from = args.from.as_deref().map(|from| crate::api::instant("--from", from)).transpose()?;
    let to = to.unwrap_or_else(crate::jobs::now_ms);
    Ok(crate::api::SpendAsk {
        from_ms: from.unwrap_or(to - 30 * crate::api::DAY_MS),
        to_ms: to,
        dimensions: crate::api::dimensions(&args.group_by)?,
        owner: args.owner,
        team: args.team,
    })
}

fn spend_line(group_by: &[&str], row: &crate::api::SpendRow) -> Vec<String> {
    let mut line: Vec<String> = group_by
        .iter()
        .map(|name| row.group.get(*name).and_then(serde_json::Value::as_str).unwrap_or("-").to_owned())
        .collect();
    if line.is_empty() {
        line.push(String::new());
    }
    line.extend([format!("{:.9}", row.cost), row.tokens.to_string(), row.attempts.to_string()]);
    line
}
