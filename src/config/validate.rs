//! Cross-field checks serde cannot express. Each error is `(key, message)`,
//! the key written as a path into the file (`routes[1].chain[0]`).

use std::collections::HashSet;
use std::str::FromStr;

use super::{Config, HumanDuration, ProviderConfig, REMOTE_TOKENIZER};

type Invalid = (String, String);

pub(super) fn validate(config: &Config) -> Result<(), Invalid> {
    validate_durations(config)?;
    validate_server(config)?;
    validate_store(config)?;
    validate_principals(config)?;
    validate_providers(config)?;
    validate_routes(config)?;
    validate_limits(config)
}

/// Budgets and rate limits name owners and routes that exist: a typo
/// would otherwise be a limit that silently never applies.
fn validate_limits(config: &Config) -> Result<(), Invalid> {
    let owners: HashSet<&str> =
        config.principals.iter().map(|p| p.owner.as_deref().unwrap_or(&p.name)).collect();
    let routes: HashSet<&str> = config.routes.iter().map(|r| r.name.as_str()).collect();
    let check = |key: String, owner: Option<&str>, route: Option<&str>| -> Result<(), Invalid> {
        if let Some(owner) = owner.filter(|o| *o != "*" && !owners.contains(o)) {
            return Err((format!("{key}.owner"), format!("no principal has owner `{owner}`")));
        }
        if let Some(route) = route.filter(|r| *r != "*" && !routes.contains(r)) {
            return Err((format!("{key}.route"), format!("no route is named `{route}`")));
        }
        Ok(())
    };
    for (i, budget) in config.budgets.iter().enumerate() {
        check(format!("budgets[{i}]"), Some(&budget.owner), budget.route.as_deref())?;
    }
    for (i, rate) in config.rate_limits.iter().enumerate() {
        let key = format!("rate_limits[{i}]");
        check(key.clone(), rate.owner.as_deref(), rate.route.as_deref())?;
        if rate.requests_per_minute.is_none() && rate.tokens_per_minute.is_none() {
            return Err((key, "sets neither requests_per_minute nor tokens_per_minute".into()));
        }
        if rate.requests_per_minute == Some(0) || rate.tokens_per_minute == Some(0) {
            return Err((
                key,
                "a limit of zero per minute refuses everything; remove the route instead".into(),
            ));
        }
    }
    let currency = &config.billing.currency;
    if currency.is_empty() || currency.len() > 16 || !currency.chars().all(|c| c.is_ascii_alphanumeric()) {
        return Err(("billing.currency".into(), "must be a short code such as USD or EUR".into()));
    }
    Ok(())
}

/// Durations for which zero is no setting but a mistake: a timeout that
/// fires at once, a lease that is expired when taken, a sweep that spins.
/// (`retry_backoff = "0s"` and `max_retry_wait = "0s"` do mean something:
/// retry at once, and never wait for a `Retry-After`.)
fn validate_durations(config: &Config) -> Result<(), Invalid> {
    let mut positive: Vec<(String, HumanDuration)> = vec![
        ("store.acquire_timeout".into(), config.store.acquire_timeout),
        ("engine.lease_ttl".into(), config.engine.lease_ttl),
        ("engine.sweep_interval".into(), config.engine.sweep_interval),
    ];
    for (i, provider) in config.providers.iter().enumerate() {
        let key = |field: &str| format!("providers[{i}].{field}");
        positive.extend([
            (key("connect_timeout"), provider.connect_timeout),
            (key("first_byte_timeout"), provider.first_byte_timeout),
            (key("total_timeout"), provider.total_timeout),
            (key("stream_idle_timeout"), provider.stream_idle_timeout),
        ]);
        positive.extend(provider.max_execution.map(|d| (key("max_execution"), d)));
    }
    for (i, route) in config.routes.iter().enumerate() {
        positive.push((format!("routes[{i}].attempt_timeout"), route.attempt_timeout));
        positive.push((format!("routes[{i}].contract_max_age"), route.contract_max_age));
    }
    match positive.into_iter().find(|(_, duration)| duration.0.is_zero()) {
        Some((key, _)) => Err((key, "must be longer than zero".into())),
        None => Ok(()),
    }
}

fn validate_server(config: &Config) -> Result<(), Invalid> {
    let server = &config.server;
    if server.max_connections == 0 {
        return Err(("server.max_connections".into(), "must be at least 1".into()));
    }
    if server.max_connections_per_peer == Some(0) {
        return Err(("server.max_connections_per_peer".into(), "must be at least 1".into()));
    }
    if server.header_read_timeout.0.is_zero() {
        return Err(("server.header_read_timeout".into(), "must be longer than zero".into()));
    }
    if server.body_read_timeout.0.is_zero() {
        return Err(("server.body_read_timeout".into(), "must be longer than zero".into()));
    }
    Ok(())
}

fn validate_store(config: &Config) -> Result<(), Invalid> {
    let store = &config.store;
    let url = &store.url;
    let key = store.url_key();
    if url.starts_with("sqlite:") {
        super::StoreConfig::sqlite_path(url).map_err(|why| (key.clone(), why))?;
    }
    let parsed = if url.starts_with("sqlite:") {
        Ok(())
    } else if is_postgres_url(url) {
        sqlx::postgres::PgConnectOptions::from_str(url).map(drop)
    } else {
        // Not echoed: a URL may carry a password.
        return Err((key, "is neither a sqlite: nor a postgres:// URL".into()));
    };
    // The driver's own parser: what it refuses here, `serve` would refuse.
    if let Err(err) = parsed {
        // Not echoed: a URL may carry a password.
        return Err((key, format!("not a valid database URL: {err}")));
    }
    if store.max_connections == 0 {
        return Err(("store.max_connections".into(), "must be at least 1".into()));
    }
    let postgres = is_postgres_url(url);
    if store.transaction_pooling && !postgres {
        return Err(("store.transaction_pooling".into(), "applies to a postgres:// url only".into()));
    }
    if let Some(direct) = &store.direct_url {
        let key = store.direct_url_key();
        if !postgres {
            return Err((key, "applies to a postgres:// url only".into()));
        }
        if !is_postgres_url(direct) {
            return Err((key, "must be a postgres:// URL".into()));
        }
        if let Err(err) = sqlx::postgres::PgConnectOptions::from_str(direct) {
            return Err((key, format!("not a valid database URL: {err}")));
        }
    } else if store.transaction_pooling {
        return Err((
            "store.transaction_pooling".into(),
            "needs store.direct_url, the database itself: LISTEN and the migrations' advisory lock \
             hold a session, which a pooler in transaction mode does not keep"
                .into(),
        ));
    }
    Ok(())
}

fn is_postgres_url(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

fn validate_principals(config: &Config) -> Result<(), Invalid> {
    let mut names = HashSet::new();
    for (i, principal) in config.principals.iter().enumerate() {
        let key = |field: &str| format!("principals[{i}].{field}");
        if principal.name.is_empty() {
            return Err((key("name"), "must not be empty".into()));
        }
        if !names.insert(principal.name.as_str()) {
            return Err((key("name"), format!("`{}` is declared twice", principal.name)));
        }
        if principal.owner.as_deref() == Some("") {
            return Err((key("owner"), "must not be empty".into()));
        }
        if principal.team.as_deref() == Some("") {
            return Err((key("team"), "must not be empty".into()));
        }
        if principal.role == super::Role::TeamAdmin && principal.team.is_none() {
            return Err((key("team"), "a team_admin manages a team: name it".into()));
        }
        match (&principal.key_sha256, &principal.key_env) {
            (Some(hash), None) => {
                if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err((
                        key("key_sha256"),
                        "must be 64 hex characters (use `intentgate keys hash`)".into(),
                    ));
                }
            }
            (None, Some(var)) => {
                if std::env::var(var).map(|v| v.is_empty()).unwrap_or(true) {
                    return Err((key("key_env"), format!("environment variable `{var}` is not set")));
                }
            }
            _ => {
                return Err((key("key_sha256"), "set exactly one of key_sha256 and key_env".into()));
            }
        }
    }
    Ok(())
}

/// Azure's addressing: `api_version` is required there and a name made of
/// URL-safe characters, as is `deployment`; neither means anything on
/// another dialect.
fn validate_azure(provider: &ProviderConfig) -> Result<(), Invalid> {
    let url_safe = |text: &str| {
        !text.is_empty() && text.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    };
    if !provider.dialect.is_azure() {
        for (field, value) in [("deployment", &provider.deployment), ("api_version", &provider.api_version)] {
            if value.is_some() {
                return Err((field.into(), "is for dialect = \"azure\" or \"azure-responses\" only".into()));
            }
        }
        return Ok(());
    }
    if provider.dialect == super::DialectConfig::AzureResponses && provider.deployment.is_some() {
        return Err(("deployment".into(), "is `model` with dialect = \"azure-responses\"".into()));
    }
    match provider.api_version.as_deref() {
        None => {
            return Err((
                "api_version".into(),
                match provider.dialect {
                    super::DialectConfig::AzureResponses => {
                        "is required with dialect = \"azure-responses\" (e.g. \"2025-04-01-preview\")".into()
                    }
                    _ => "is required with dialect = \"azure\" (e.g. \"2024-10-21\")".into(),
                },
            ));
        }
        Some(version) if !url_safe(version) => {
            return Err(("api_version".into(), format!("`{version}` is not an API version")));
        }
        Some(_) => {}
    }
    let deployment = provider.deployment.as_deref().unwrap_or(&provider.model);
    if !url_safe(deployment) {
        return Err(("deployment".into(), format!("`{deployment}` cannot be a deployment name in a URL")));
    }
    Ok(())
}

/// Bedrock's addressing: a region (what requests are signed for, and
/// where they go without `base_url`), AWS key variables only with a
/// Bedrock provider, and `InvokeModel` only for Claude.
fn validate_bedrock(provider: &ProviderConfig) -> Result<(), Invalid> {
    let fields = [
        ("region", &provider.region),
        ("access_key_env", &provider.access_key_env),
        ("secret_key_env", &provider.secret_key_env),
        ("session_token_env", &provider.session_token_env),
    ];
    if provider.dialect != super::DialectConfig::Bedrock {
        let file = ("aws_credentials_file", provider.aws_credentials_file.is_some());
        let api = ("bedrock_api", provider.bedrock_api.is_some());
        for (field, set) in fields.iter().map(|(field, value)| (*field, value.is_some())).chain([file, api]) {
            if set {
                return Err((field.into(), "is for dialect = \"bedrock\" only".into()));
            }
        }
        return Ok(());
    }
    let from_env = fields[1..].iter().any(|(_, value)| value.is_some());
    if provider.aws_credentials_file.is_some() && (from_env || provider.api_key_env.is_some()) {
        let why = "reads the AWS keys from a file: leave out api_key_env and the *_key_env fields";
        return Err(("aws_credentials_file".into(), why.into()));
    }
    match provider.region.as_deref() {
        None => {
            let why = "is required with dialect = \"bedrock\": the AWS region requests are signed for (e.g. \
                       \"us-east-1\")";
            return Err(("region".into(), why.into()));
        }
        Some(region)
            if region.is_empty() || !region.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') =>
        {
            return Err(("region".into(), format!("`{region}` is not an AWS region")));
        }
        Some(_) => {}
    }
    for (field, value) in &fields[1..] {
        if value.as_deref() == Some("") {
            return Err(((*field).into(), "must name an environment variable".into()));
        }
    }
    if provider.model.is_empty() {
        return Err(("model".into(), "must name a Bedrock model id".into()));
    }
    let claude = provider.model.contains("anthropic.") || provider.model.starts_with("sim:");
    if provider.bedrock_api() == super::BedrockApi::Invoke && !claude {
        return Err((
            "model".into(),
            format!(
                "`{}` is not an Anthropic model: bedrock_api = \"invoke\" sends Claude's Messages body \
                 (e.g. \"anthropic.claude-sonnet-4-5-20250929-v1:0\"); other models take bedrock_api = \"converse\" \
                 (docs/bedrock.md)",
                provider.model
            ),
        ));
    }
    Ok(())
}

/// OpenAI's generation parameters, which Gemini takes in `generationConfig`:
/// at the top of a Gemini provider's `request` they would be refused by
/// Gemini (overrides are merged into the body in the provider's own terms).
const OPENAI_GENERATION: [&str; 10] = [
    "temperature",
    "max_tokens",
    "max_completion_tokens",
    "top_p",
    "top_k",
    "stop",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "response_format",
];

/// Gemini's addressing and terms: the model is a path segment, the API
/// needs a key, `base_url` is the API's origin (the dialect adds
/// `/v1beta/…`), its tokenizer has no tokenize endpoint, and overrides are
/// written as Gemini's fields.
fn validate_gemini(provider: &ProviderConfig) -> Result<(), Invalid> {
    if provider.dialect != super::DialectConfig::Gemini {
        return Ok(());
    }
    let model = provider.model.as_str();
    if model.is_empty() || model.chars().any(|c| c.is_whitespace() || c.is_control() || "/?#%".contains(c)) {
        let hint = if model.starts_with("models/") { " (write it without `models/`)" } else { "" };
        return Err(("model".into(), format!("`{model}` cannot be a Gemini model name in a URL{hint}")));
    }
    if provider.api_key_env.is_none() {
        let why = "is required with dialect = \"gemini\": Gemini's API refuses a call without a key (name \
                   the environment variable holding it, e.g. \"GEMINI_API_KEY\")";
        return Err(("api_key_env".into(), why.into()));
    }
    let path = provider.base_url.split("://").nth(1).and_then(|rest| rest.find('/').map(|at| &rest[at..]));
    if let Some(version) =
        path.map(|p| p.trim_end_matches('/')).filter(|p| p.ends_with("/v1beta") || p.ends_with("/v1"))
    {
        return Err((
            "base_url".into(),
            format!(
                "ends in `{version}`: give the API's origin (e.g. \"https://generativelanguage.googleapis.com\"); \
                 the dialect adds /v1beta/models/{{model}}:generateContent"
            ),
        ));
    }
    if provider.tokenizer.as_deref() == Some(REMOTE_TOKENIZER) {
        return Err((
            "tokenizer".into(),
            "`remote` asks a server's tokenize/detokenize endpoints; Gemini's API only counts tokens. Declare \
             \"o200k_base\" or \"cl100k_base\" as an approximation (docs/gemini.md)"
                .into(),
        ));
    }
    if provider.null_content_as_empty {
        return Err(("null_content_as_empty".into(), "means nothing with dialect = \"gemini\"".into()));
    }
    validate_gemini_request(provider)
}

/// A Gemini provider's `request` overrides: Gemini's fields, not OpenAI's,
/// never the conversation, and a fixed temperature within the cap.
fn validate_gemini_request(provider: &ProviderConfig) -> Result<(), Invalid> {
    for field in OPENAI_GENERATION {
        if provider.request.contains_key(field) {
            return Err((
                format!("request.{field}"),
                "is OpenAI's name: a Gemini provider's overrides are Gemini's fields (generation parameters go \
                 in `generationConfig`, e.g. request = { generationConfig = { temperature = 0 } })"
                    .into(),
            ));
        }
    }
    for field in ["contents", "systemInstruction"] {
        if provider.request.contains_key(field) {
            return Err((
                format!("request.{field}"),
                "cannot be overridden: the messages are the caller's".into(),
            ));
        }
    }
    let fixed = provider
        .request
        .get("generationConfig")
        .and_then(|c| c.get("temperature"))
        .and_then(serde_json::Value::as_f64);
    if let (Some(fixed), Some(cap)) = (fixed, provider.max_temperature)
        && fixed > cap
    {
        return Err((
            "request.generationConfig.temperature".into(),
            format!("{fixed} is above this provider's max_temperature {cap}"),
        ));
    }
    Ok(())
}

fn validate_providers(config: &Config) -> Result<(), Invalid> {
    let mut names = HashSet::new();
    for (i, provider) in config.providers.iter().enumerate() {
        let key = |field: &str| format!("providers[{i}].{field}");
        if provider.name.is_empty() {
            return Err((key("name"), "must not be empty".into()));
        }
        if !names.insert(provider.name.as_str()) {
            return Err((key("name"), format!("`{}` is declared twice", provider.name)));
        }
        // A Bedrock or Vertex provider without one is sent to its region's
        // (its location's) endpoint.
        let url = provider.base_url.as_str();
        let defaults =
            matches!(provider.dialect, super::DialectConfig::Bedrock | super::DialectConfig::Vertex);
        match (url.is_empty(), defaults) {
            (true, true) => {}
            (true, false) => return Err((key("base_url"), "is required".into())),
            (false, _) if !(url.starts_with("http://") || url.starts_with("https://")) => {
                return Err((key("base_url"), format!("`{url}` is not an http(s) URL")));
            }
            (false, _) => {}
        }
        validate_azure(provider).map_err(|(field, why)| (key(&field), why))?;
        validate_gemini(provider).map_err(|(field, why)| (key(&field), why))?;
        validate_bedrock(provider).map_err(|(field, why)| (key(&field), why))?;
        super::vertex::validate(provider).map_err(|(field, why)| (key(&field), why))?;
        if provider.dialect == super::DialectConfig::Vertex
            && provider.publisher() == Some(intentgate_providers::Publisher::Google)
        {
            validate_gemini_request(provider).map_err(|(field, why)| (key(&field), why))?;
        }
        if provider.api_key_env.as_deref() == Some("") {
            return Err((key("api_key_env"), "must name an environment variable".into()));
        }
        validate_request_options(provider, &key)?;
    }
    Ok(())
}

/// `request`, `max_temperature` and the remote tokenizer's paths.
fn validate_request_options(provider: &ProviderConfig, key: &dyn Fn(&str) -> String) -> Result<(), Invalid> {
    for field in ["model", "stream", "messages"] {
        if provider.request.contains_key(field) {
            let why = match field {
                "model" => "the provider's `model` is sent; set that instead",
                "stream" => "the gateway decides whether a call streams",
                _ => "the messages are the caller's",
            };
            return Err((format!("{}.{field}", key("request")), format!("cannot be overridden: {why}")));
        }
    }
    if let Some(cap) = provider.max_temperature {
        if !(0.0..=2.0).contains(&cap) {
            return Err((key("max_temperature"), format!("{cap} is not between 0 and 2")));
        }
        let fixed = provider.request.get("temperature").and_then(serde_json::Value::as_f64);
        if let Some(fixed) = fixed.filter(|&t| t > cap) {
            return Err((
                format!("{}.temperature", key("request")),
                format!("{fixed} is above this provider's max_temperature {cap}"),
            ));
        }
    }
    let remote = provider.tokenizer.as_deref() == Some(REMOTE_TOKENIZER);
    for (field, path) in
        [("tokenize_path", &provider.tokenize_path), ("detokenize_path", &provider.detokenize_path)]
    {
        let Some(path) = path else { continue };
        if !remote {
            return Err((key(field), format!("is only used with tokenizer = \"{REMOTE_TOKENIZER}\"")));
        }
        if !(path.starts_with('/') || path.starts_with("http://") || path.starts_with("https://")) {
            return Err((key(field), format!("`{path}` must start with `/` or be an http(s) URL")));
        }
    }
    Ok(())
}

/// Each pool: two or more members of the chain, consecutive there, in no
/// other pool, with one positive weight per member when weighted.
fn validate_pools(route: &crate::config::RouteConfig) -> Result<(), Invalid> {
    let mut pooled = HashSet::new();
    for (i, pool) in route.pools.iter().enumerate() {
        let key = |field: &str| format!("pools[{i}].{field}");
        if pool.members.len() < 2 {
            return Err((key("members"), "a pool needs at least two providers".into()));
        }
        let mut positions = Vec::with_capacity(pool.members.len());
        for (j, member) in pool.members.iter().enumerate() {
            let Some(position) = route.chain.iter().position(|name| name == member) else {
                return Err((format!("pools[{i}].members[{j}]"), format!("`{member}` is not in the chain")));
            };
            if !pooled.insert(member.as_str()) {
                return Err((
                    format!("pools[{i}].members[{j}]"),
                    format!("`{member}` is in two pools, or twice"),
                ));
            }
            positions.push(position);
        }
        positions.sort_unstable();
        if positions.windows(2).any(|pair| pair[1] != pair[0] + 1) {
            return Err((
                key("members"),
                "a pool's members must be consecutive in the chain: one step of it".into(),
            ));
        }
        if let Some(weights) = &pool.weights {
            if pool.balance != crate::config::Balance::Weighted {
                return Err((key("weights"), "weights are for balance = \"weighted\"".into()));
            }
            if weights.len() != pool.members.len() || weights.contains(&0) {
                return Err((key("weights"), "one positive weight per member".into()));
            }
        }
    }
    Ok(())
}

/// A hedge (or a continuation) that could never start, or more open
/// attempts than the schema's lanes (`migrations/*/0006_hedged_attempts.sql`)
/// allow.
fn validate_hedge(route: &crate::config::RouteConfig) -> Result<(), Invalid> {
    if route.continue_cut_streams && route.chain.len() < 2 {
        let why = "needs a chain of at least two providers: the next one continues a cut stream";
        return Err(("continue_cut_streams".into(), why.into()));
    }
    let Some(hedge) = route.hedge else { return Ok(()) };
    if !(2..=3).contains(&hedge.open_attempts) {
        return Err(("hedge.open_attempts".into(), "must be 2 or 3".into()));
    }
    if hedge.after.0.is_zero() || hedge.after.0 >= route.attempt_timeout.0 {
        let why =
            format!("must be longer than zero and shorter than attempt_timeout ({})", route.attempt_timeout);
        return Err(("hedge.after".into(), why));
    }
    if route.chain.len() < 2 {
        return Err(("hedge".into(), "needs a chain of at least two providers to hedge on".into()));
    }
    Ok(())
}

fn validate_routes(config: &Config) -> Result<(), Invalid> {
    let mut names = HashSet::new();
    let mut aliases = HashSet::new();
    for (i, route) in config.routes.iter().enumerate() {
        let key = |field: &str| format!("routes[{i}].{field}");
        if route.name.is_empty() {
            return Err((key("name"), "must not be empty".into()));
        }
        if !names.insert(route.name.as_str()) {
            return Err((key("name"), format!("`{}` is declared twice", route.name)));
        }
        for (j, alias) in route.aliases.iter().enumerate() {
            let a_route_name = config.routes.iter().any(|other| other.name == *alias);
            if alias.is_empty() || a_route_name || !aliases.insert(alias.as_str()) {
                let why = format!("`{alias}` is empty, a route's name, or another alias already");
                return Err((format!("routes[{i}].aliases[{j}]"), why));
            }
            if alias.trim_end_matches('*').is_empty() || alias.trim_end_matches('*').contains('*') {
                let why = format!("`{alias}`: `*` may only end an alias, after a prefix (`claude-*`)");
                return Err((format!("routes[{i}].aliases[{j}]"), why));
            }
        }
        if route.chain.is_empty() {
            return Err((key("chain"), "needs at least one provider".into()));
        }
        for (j, provider) in route.chain.iter().enumerate() {
            if route.chain[..j].contains(provider) {
                return Err((
                    format!("routes[{i}].chain[{j}]"),
                    format!("provider `{provider}` is listed twice"),
                ));
            }
            if !config.providers.iter().any(|p| &p.name == provider) {
                return Err((
                    format!("routes[{i}].chain[{j}]"),
                    format!("provider `{provider}` is not declared in [[providers]]"),
                ));
            }
        }
        validate_pools(route).map_err(|(field, why)| (key(&field), why))?;
        validate_hedge(route).map_err(|(field, why)| (key(&field), why))?;
        for (j, status) in route.retry_statuses.iter().enumerate() {
            // A 2xx or 3xx is never a rejection, and a 4xx other than 429
            // is the request's fault: the same provider would refuse it again.
            if !(*status == 429 || (500..=599).contains(status)) {
                return Err((
                    format!("routes[{i}].retry_statuses[{j}]"),
                    format!("{status} cannot be a retry class: use 429 or a 5xx status"),
                ));
            }
        }
    }
    Ok(())
}
