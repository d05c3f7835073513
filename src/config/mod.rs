//! The gateway's configuration: one TOML file, unknown keys rejected.
//!
//! Loading is parse → environment overrides → validation, and every error
//! names the file, the key and what is wrong, so `intentgate config check`
//! is useful in CI before a bad file reaches production.

mod aws_credentials;
mod duration;
mod parse_error;
mod validate;
mod vertex;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

pub use duration::HumanDuration;

/// Overrides the `[server] listen` address.
pub const ENV_LISTEN: &str = "INTENTGATE_LISTEN";
/// Overrides the `[store] url`.
pub const ENV_DATABASE_URL: &str = "INTENTGATE_DATABASE_URL";
/// Overrides the `[store] direct_url`.
pub const ENV_DATABASE_DIRECT_URL: &str = "INTENTGATE_DATABASE_DIRECT_URL";
/// Overrides the `[simulator] listen` address, and moves the providers that
/// point at the file's simulator address with it (so a second gateway, or a
/// test, can run beside one already holding the default port).
pub const ENV_SIMULATOR_LISTEN: &str = "INTENTGATE_SIMULATOR_LISTEN";

pub const DEFAULT_CONFIG_PATH: &str = "config/gateway.toml";

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub server: ServerConfig,
    pub store: StoreConfig,
    #[serde(default)]
    pub engine: EngineConfig,
    /// The OpenAI doors' settings: chat completions, Responses, embeddings.
    #[serde(default)]
    pub openai: DoorConfig,
    /// The Anthropic Messages door's settings.
    #[serde(default)]
    pub anthropic: DoorConfig,
    #[serde(default)]
    pub contracts: ContractsConfig,
    #[serde(default)]
    pub simulator: SimulatorConfig,
    #[serde(default)]
    pub principals: Vec<PrincipalConfig>,
    #[serde(default)]
    pub providers: Vec<ProviderConfig>,
    #[serde(default)]
    pub routes: Vec<RouteConfig>,
    #[serde(default)]
    pub billing: BillingConfig,
    /// Spend budgets per owner (and route) and window.
    #[serde(default)]
    pub budgets: Vec<crate::budgets::BudgetRule>,
    /// Requests and tokens per minute per owner and/or route.
    #[serde(default)]
    pub rate_limits: Vec<crate::budgets::RateLimitRule>,
    /// Which configuration this is: the first 12 hex digits of the SHA-256
    /// of the file's text, as replicas report it (`/readyz`, `/metrics`),
    /// so a rollout shows which replica runs which file.
    #[serde(skip)]
    pub version: String,
    /// The file it was read from (by [`Config::load`]), which a reload
    /// reads again.
    #[serde(skip)]
    pub source: Option<PathBuf>,
}

/// How spend is counted (see `[[budgets]]` and the providers' `price`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BillingConfig {
    /// The currency of every `price` and budget `limit`, named once.
    #[serde(default = "default_currency")]
    pub currency: String,
    /// The completion tokens an attempt reserves when its request sets no
    /// `max_tokens` (or `max_completion_tokens`).
    #[serde(default = "default_max_tokens")]
    pub default_max_tokens: u64,
}

impl Default for BillingConfig {
    fn default() -> Self {
        BillingConfig { currency: default_currency(), default_max_tokens: default_max_tokens() }
    }
}

fn default_currency() -> String {
    "USD".to_owned()
}

fn default_max_tokens() -> u64 {
    4096
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// Largest request body accepted; bigger ones get 413 before anything is stored.
    #[serde(default = "default_max_body_bytes")]
    pub max_body_bytes: usize,
    /// How long a connection may take to send a request's headers, counted
    /// from when it starts waiting for them — so it also closes an idle
    /// keep-alive connection after this long. Without it a client that sends
    /// half a request line holds a connection (and a slot) forever.
    #[serde(default = "default_header_read_timeout")]
    pub header_read_timeout: HumanDuration,
    /// How long a request's body may take to arrive, from its headers; a
    /// body that stalls gets 408. Generous for slow uplinks, finite for
    /// clients that announce bytes they never send.
    #[serde(default = "default_body_read_timeout")]
    pub body_read_timeout: HumanDuration,
    /// Connections served at once; beyond it new ones wait in the kernel's
    /// accept queue until one closes (see `crate::server`).
    #[serde(default = "default_max_connections_served")]
    pub max_connections: usize,
    /// Connections one peer address may hold at once; past it a new one
    /// is closed at once. Default: three quarters of `max_connections`, so
    /// no one client can take every slot. Behind a load balancer (every
    /// connection from its address) set it to `max_connections`.
    #[serde(default)]
    pub max_connections_per_peer: Option<usize>,
    /// A connection whose answer makes no progress for this long (the
    /// client reads nothing) is closed, freeing its slot. Default 10s.
    #[serde(default = "default_write_stall_timeout")]
    pub write_stall_timeout: HumanDuration,
    /// On SIGTERM, how long `/readyz` answers 503 while the gateway still
    /// serves, so a load balancer's health check moves traffic away before
    /// the listener closes (a few check intervals). Default 0s.
    #[serde(default = "default_unready_delay")]
    pub unready_delay: HumanDuration,
    /// How long a shutdown waits for drives and late answers to settle
    /// before it hands what is open to the other replicas' recovery sweep.
    /// Default 30s.
    #[serde(default = "default_drain_timeout")]
    pub drain_timeout: HumanDuration,
    /// Bytes of provider answers the gateway holds at once, across every
    /// provider: past it a large answer waits, unread, until another gives
    /// its room back (see `intentgate_providers::AnswerBudget`). Read at
    /// start. Default 256 MiB.
    #[serde(default = "default_max_answer_bytes_held")]
    pub max_answer_bytes_held: usize,
}

impl ServerConfig {
    /// `max_connections_per_peer`, or its default.
    pub fn connections_per_peer(&self) -> usize {
        self.max_connections_per_peer
            .unwrap_or(self.max_connections - self.max_connections / 4)
            .clamp(1, self.max_connections.max(1))
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: default_listen(),
            max_body_bytes: default_max_body_bytes(),
            header_read_timeout: default_header_read_timeout(),
            body_read_timeout: default_body_read_timeout(),
            max_connections: default_max_connections_served(),
            max_connections_per_peer: None,
            write_stall_timeout: default_write_stall_timeout(),
            unready_delay: default_unready_delay(),
            drain_timeout: default_drain_timeout(),
            max_answer_bytes_held: default_max_answer_bytes_held(),
        }
    }
}

fn default_max_answer_bytes_held() -> usize {
    256 * 1024 * 1024
}

fn default_write_stall_timeout() -> HumanDuration {
    HumanDuration::secs(10)
}

fn default_unready_delay() -> HumanDuration {
    HumanDuration::secs(0)
}

fn default_drain_timeout() -> HumanDuration {
    HumanDuration::secs(30)
}

fn default_header_read_timeout() -> HumanDuration {
    HumanDuration::secs(10)
}

fn default_body_read_timeout() -> HumanDuration {
    HumanDuration::secs(30)
}

fn default_max_connections_served() -> usize {
    1024
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8080))
}

fn default_max_body_bytes() -> usize {
    1024 * 1024
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// `sqlite://path/to/file.db` or `postgres://user@host:port/db`.
    pub url: String,
    #[serde(default = "default_max_connections")]
    pub max_connections: u32,
    /// How long a request waits for a database connection before it gets
    /// 503; on SQLite also how long `/readyz` waits for the writer thread.
    #[serde(default = "default_acquire_timeout")]
    pub acquire_timeout: HumanDuration,
    /// SQLite only: how long a writer waits for the file lock.
    #[serde(default = "default_busy_timeout")]
    pub busy_timeout: HumanDuration,
    /// SQLite only: `normal` (WAL; a commit survives a process crash) or
    /// `full` (also survives power loss, at an fsync per commit).
    #[serde(default)]
    pub sqlite_synchronous: SqliteSynchronous,
    /// PostgreSQL only: `url` reaches the database through a pooler in
    /// transaction mode (PgBouncer `pool_mode = transaction`), which hands
    /// each transaction to whichever server connection is free. So no
    /// statement is named (prepared) on a connection, every statement runs
    /// inside a transaction of its own, and what needs a session of its
    /// own (`LISTEN`, the migrations' advisory lock) goes to `direct_url`.
    #[serde(default)]
    pub transaction_pooling: bool,
    /// PostgreSQL only: the database itself, not through a pooler, for
    /// `LISTEN` and the migrations; `url` when absent. Required with
    /// `transaction_pooling`.
    pub direct_url: Option<String>,
    /// Record when each attempt's request leaves (a committed mark before
    /// the send), so that recovery can send a never-sent attempt again on
    /// its provider instead of calling it `unknown` and failing over. Off:
    /// attempts are written "not recorded" (every one may have been sent),
    /// one write less per attempt (about a tenth of a job's CPU).
    #[serde(default = "default_true")]
    pub record_sends: bool,
    /// Whether `url` came from `INTENTGATE_DATABASE_URL` rather than the
    /// file: errors about it must name what the operator actually set.
    #[serde(skip)]
    pub url_from_env: bool,
    /// The same for `direct_url` and `INTENTGATE_DATABASE_DIRECT_URL`.
    #[serde(skip)]
    pub direct_url_from_env: bool,
}

impl StoreConfig {
    /// The file a `sqlite:` URL names: `sqlite://data/x.db` (relative to
    /// the working directory), `sqlite:///var/lib/x.db` (absolute), or
    /// `sqlite:x.db`. An in-memory database and URL parameters are refused:
    /// the store is one file that outlives the process.
    pub fn sqlite_path(url: &str) -> Result<std::path::PathBuf, String> {
        let path = url.strip_prefix("sqlite://").or_else(|| url.strip_prefix("sqlite:"));
        match path {
            None => Err("is not a sqlite: URL".into()),
            Some("") => Err("names no file (e.g. sqlite://data/intentgate.db)".into()),
            Some(path) if path.contains("memory:") || path.starts_with("file::memory") => {
                Err("names an in-memory database: the store must be a file that outlives the process".into())
            }
            Some(path) if path.contains('?') => {
                Err("has parameters (`?…`): none are read; the store sets its own (WAL, synchronous)".into())
            }
            Some(path) => Ok(std::path::PathBuf::from(path)),
        }
    }

    /// Where `url` was set, for error messages: the file's key, or the
    /// environment variable that overrode it.
    pub fn url_key(&self) -> String {
        if self.url_from_env {
            format!("{ENV_DATABASE_URL} (overrides store.url)")
        } else {
            "store.url".to_owned()
        }
    }

    /// Where `direct_url` was set, for error messages.
    pub fn direct_url_key(&self) -> String {
        if self.direct_url_from_env {
            format!("{ENV_DATABASE_DIRECT_URL} (overrides store.direct_url)")
        } else {
            "store.direct_url".to_owned()
        }
    }

    /// The URL for `LISTEN` and the migrations, and where it was set:
    /// `direct_url`, else `url`.
    pub fn session_url(&self) -> (&str, String) {
        match &self.direct_url {
            Some(url) => (url, self.direct_url_key()),
            None => (&self.url, self.url_key()),
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SqliteSynchronous {
    #[default]
    Normal,
    Full,
}

fn default_max_connections() -> u32 {
    8
}

fn default_acquire_timeout() -> HumanDuration {
    HumanDuration::secs(3)
}

fn default_busy_timeout() -> HumanDuration {
    HumanDuration::secs(5)
}

/// How this gateway instance drives jobs.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineConfig {
    /// Name of this instance in job leases; defaults to a fresh UUID per process.
    pub instance_id: Option<String>,
    /// How long a driver's lease lasts without renewal. A crashed instance's
    /// jobs are taken over this long after its last renewal.
    #[serde(default = "default_lease_ttl")]
    pub lease_ttl: HumanDuration,
    /// How often the recovery sweep looks for expired leases and overdue
    /// unknown attempts.
    #[serde(default = "default_sweep_interval")]
    pub sweep_interval: HumanDuration,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            instance_id: None,
            lease_ttl: default_lease_ttl(),
            sweep_interval: default_sweep_interval(),
        }
    }
}

fn default_lease_ttl() -> HumanDuration {
    HumanDuration::secs(15)
}

fn default_sweep_interval() -> HumanDuration {
    HumanDuration::secs(5)
}

/// Provider contract suites (R9).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContractsConfig {
    /// Where the suites are: one `<route>.toml` per route.
    #[serde(default = "default_contracts_dir")]
    pub dir: std::path::PathBuf,
    /// Run every suite against every provider of its route's chain when the
    /// gateway starts, and record the results. Meant for the simulator
    /// demo; platform teams run `intentgate contract run` instead.
    #[serde(default)]
    pub run_on_start: bool,
}

impl Default for ContractsConfig {
    fn default() -> Self {
        ContractsConfig { dir: default_contracts_dir(), run_on_start: false }
    }
}

fn default_contracts_dir() -> std::path::PathBuf {
    std::path::PathBuf::from("contract-tests")
}

/// A compatible door's settings, per protocol: `[openai]` for the OpenAI
/// doors (chat completions, Responses, embeddings), `[anthropic]` for
/// Messages; each door reads its own (see `Door::settings`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DoorConfig {
    /// Mint an `Idempotency-Key` when a request has none, instead of
    /// answering 400. This gives up deduplication for such requests: every
    /// one becomes a new job.
    #[serde(default)]
    pub mint_idempotency_keys: bool,
    /// How long a request waits for its job (or a duplicate for the running
    /// job) before answering 409 with `Retry-After`.
    #[serde(default = "default_door_wait")]
    pub wait: HumanDuration,
}

impl Default for DoorConfig {
    fn default() -> Self {
        DoorConfig { mint_idempotency_keys: false, wait: default_door_wait() }
    }
}

fn default_door_wait() -> HumanDuration {
    HumanDuration::secs(60)
}

/// The provider simulator, started in-process so the default config needs no
/// API key and no network.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimulatorConfig {
    #[serde(default)]
    pub enabled: bool,
    #[serde(default = "default_simulator_listen")]
    pub listen: SocketAddr,
    #[serde(default)]
    pub seed: u64,
    /// Keep request bodies (the prompts) for `GET /sim/requests/{key}`. Off by
    /// default: the simulator's routes are unauthenticated, so any local
    /// process could read every prompt sent through the demo.
    #[serde(default)]
    pub record_bodies: bool,
    /// Request bodies past this many bytes are refused (413), as a provider
    /// does. Unset: twice `[server] max_body_bytes`, room for what the
    /// gateway renders from the largest request its doors take; its own
    /// port (which needs no key) takes no more.
    pub max_body_bytes: Option<usize>,
}

impl Default for SimulatorConfig {
    fn default() -> Self {
        SimulatorConfig {
            enabled: false,
            listen: default_simulator_listen(),
            seed: 0,
            record_bodies: false,
            max_body_bytes: None,
        }
    }
}

fn default_simulator_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 9101))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Creates and reads its own jobs.
    User,
    /// Also reads every owner's jobs, settles unknown attempts and manages keys.
    Admin,
    /// A user that also manages the user keys of its own team and reads its
    /// team's spend; it has a team.
    TeamAdmin,
}

impl Role {
    /// The name the config file, the API and the store use.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Admin => "admin",
            Role::TeamAdmin => "team_admin",
        }
    }

    /// The role `name` names, as [`Role::as_str`] writes it.
    pub fn named(name: &str) -> Option<Role> {
        match name {
            "user" => Some(Role::User),
            "admin" => Some(Role::Admin),
            "team_admin" => Some(Role::TeamAdmin),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrincipalConfig {
    pub name: String,
    /// The owner its jobs belong to; defaults to `name`.
    pub owner: Option<String>,
    /// The team its jobs' spend also counts against.
    pub team: Option<String>,
    #[serde(default = "default_role")]
    pub role: Role,
    /// SHA-256 (hex) of the API key, as `intentgate keys hash` prints it.
    pub key_sha256: Option<String>,
    /// Name of an environment variable holding the API key itself.
    pub key_env: Option<String>,
}

fn default_role() -> Role {
    Role::User
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DialectConfig {
    Openai,
    Anthropic,
    /// Azure OpenAI: OpenAI's body at a deployment's URL
    /// (`{base_url}/openai/deployments/{deployment}/chat/completions?api-version=…`),
    /// the key in `api-key`.
    Azure,
    /// Google's Gemini API: the request translated into a
    /// `GenerateContentRequest` at `{base_url}/v1beta/models/{model}:generateContent`
    /// (`:streamGenerateContent?alt=sse` streamed), the key in `x-goog-api-key`.
    Gemini,
    /// Google Vertex AI: Claude (`:rawPredict`, Anthropic's body) or Gemini
    /// (`:generateContent`) under `project` and `location`, with an OAuth
    /// access token from a service-account key or the environment
    /// (docs/vertex.md).
    Vertex,
    /// Amazon Bedrock: Claude's Messages body at
    /// `{base_url}/model/{model}/invoke` (`/invoke-with-response-stream`
    /// streamed), signed with SigV4 for `region`, or a Bedrock API key as a
    /// bearer token (docs/bedrock.md).
    Bedrock,
    /// OpenAI's Responses API: `{base_url}/responses`, bearer auth; the
    /// Responses door's requests pass through as sent (docs/responses.md).
    #[serde(rename = "openai-responses")]
    OpenaiResponses,
    /// Azure OpenAI's Responses API: `{base_url}/openai/responses?api-version=…`,
    /// the deployment named by `model`, the key in `api-key`.
    #[serde(rename = "azure-responses")]
    AzureResponses,
}

impl DialectConfig {
    /// Azure OpenAI's addressing (`api_version`, the `api-key` header).
    pub fn is_azure(self) -> bool {
        matches!(self, DialectConfig::Azure | DialectConfig::AzureResponses)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            DialectConfig::Openai => "openai",
            DialectConfig::OpenaiResponses => "openai-responses",
            DialectConfig::AzureResponses => "azure-responses",
            DialectConfig::Anthropic => "anthropic",
            DialectConfig::Azure => "azure",
            DialectConfig::Gemini => "gemini",
            DialectConfig::Vertex => "vertex",
            DialectConfig::Bedrock => "bedrock",
        }
    }
}

pub use vertex::PublisherConfig;

/// The Bedrock API a `dialect = "bedrock"` provider calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BedrockApi {
    /// `InvokeModel` with Claude's Messages body: Claude only, and what a
    /// Messages request carries (thinking, cache breakpoints, betas)
    /// passes through as sent.
    Invoke,
    /// `Converse`, the request translated into Bedrock's one shape for
    /// every model it hosts (Llama, Mistral, Amazon Nova, Claude…).
    Converse,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    pub name: String,
    pub dialect: DialectConfig,
    /// Required but with `dialect = "vertex"` or `"bedrock"`, whose
    /// default is the location's or the region's endpoint (see
    /// [`ProviderConfig::endpoint_url`]).
    #[serde(default)]
    pub base_url: String,
    pub model: String,
    /// `dialect = "azure"`: the deployment the URL names (the model's name
    /// when absent).
    pub deployment: Option<String>,
    /// `dialect = "azure"`: the `api-version` every request carries (required).
    pub api_version: Option<String>,
    /// Environment variable holding the provider's API key; never the key itself.
    /// With `dialect = "bedrock"`: a Bedrock API key, sent as a bearer
    /// token instead of signing with AWS keys.
    pub api_key_env: Option<String>,
    /// `dialect = "vertex"`: the Google Cloud project (required).
    pub project: Option<String>,
    /// `dialect = "vertex"`: the location, a region (`us-east5`) or
    /// `global` (required).
    pub location: Option<String>,
    /// `dialect = "vertex"`: whose model it is, `anthropic` or `google`;
    /// by default what the model's name says (`claude-…`, `gemini-…`).
    pub publisher: Option<PublisherConfig>,
    /// `dialect = "vertex"`: the path of a service-account key file (JSON).
    /// Without it and `access_token_env`, `GOOGLE_APPLICATION_CREDENTIALS` names it.
    pub credentials_file: Option<PathBuf>,
    /// `dialect = "vertex"`: where the key file's assertions are traded for
    /// access tokens, instead of its own `token_uri`.
    pub token_uri: Option<String>,
    /// `dialect = "vertex"`: environment variable holding an access token
    /// minted elsewhere (`gcloud auth print-access-token`), sent as it is.
    pub access_token_env: Option<String>,
    /// `dialect = "bedrock"`: the AWS region requests are signed for and,
    /// without `base_url`, sent to (required).
    pub region: Option<String>,
    /// `dialect = "bedrock"`: which of Bedrock's APIs is called (see
    /// [`BedrockApi`]); default `invoke` for Claude, `converse` otherwise.
    pub bedrock_api: Option<BedrockApi>,
    /// `dialect = "bedrock"`, signing with AWS keys: the environment
    /// variables holding the access key id (default `AWS_ACCESS_KEY_ID`),
    /// the secret (default `AWS_SECRET_ACCESS_KEY`) and, when that variable
    /// is set, the session token (default `AWS_SESSION_TOKEN`).
    pub access_key_env: Option<String>,
    pub secret_key_env: Option<String>,
    pub session_token_env: Option<String>,
    /// `dialect = "bedrock"`: the path of an AWS shared credentials file
    /// (`~/.aws/credentials` format, its `[default]` profile), read instead
    /// of the environment.
    pub aws_credentials_file: Option<PathBuf>,
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout: HumanDuration,
    #[serde(default = "default_first_byte_timeout")]
    pub first_byte_timeout: HumanDuration,
    #[serde(default = "default_total_timeout")]
    pub total_timeout: HumanDuration,
    #[serde(default = "default_stream_idle_timeout")]
    pub stream_idle_timeout: HumanDuration,
    /// The longest this provider can still be working once a request was
    /// sent. Past it, an unknown attempt may be settled as abandoned; unset
    /// means only an operator settles it.
    pub max_execution: Option<HumanDuration>,
    /// The tokenizer the contract suites render prompts through:
    /// `o200k_base`, `cl100k_base` (vocabularies carried by tiktoken-rs), or
    /// `remote`: the provider's own tokenize/detokenize endpoints.
    pub tokenizer: Option<String>,
    /// With `tokenizer = "remote"`: where the provider tokenizes, relative
    /// to the origin of `base_url` (or an absolute URL). Default
    /// llama-cpp-python's `/extras/tokenize`; vLLM and llama.cpp's server
    /// use `/tokenize`.
    pub tokenize_path: Option<String>,
    /// With `tokenizer = "remote"`: default `/extras/detokenize`
    /// (llama-cpp-python); vLLM and llama.cpp's server use `/detokenize`.
    pub detokenize_path: Option<String>,
    /// The provider's context window in tokens; prompt plus `max_tokens`
    /// must fit.
    pub context_window: Option<u32>,
    /// Extra headers sent on every request to this provider.
    #[serde(default)]
    pub headers: std::collections::BTreeMap<String, String>,
    /// Top-level fields merged into every request body sent to this
    /// provider — gateway calls and contract runs alike — replacing the
    /// caller's field of the same name whole: `request = { response_format =
    /// { type = "json_object" }, temperature = 0 }`. Part of the provider's
    /// contract fingerprint.
    #[serde(default)]
    pub request: serde_json::Map<String, serde_json::Value>,
    /// The highest `temperature` this provider is sent: a caller's higher
    /// one, or none, is sent as this. Part of the contract fingerprint.
    pub max_temperature: Option<f64>,
    /// Send an assistant message's `content: null` (it only calls tools)
    /// as `""`, for servers that refuse null (llama-cpp-python 0.3). Part of
    /// the contract fingerprint.
    #[serde(default)]
    pub null_content_as_empty: bool,
    /// A streamed event this provider sends that cannot be read is skipped
    /// (counted in `intentgate_stream_events_skipped_total`, and named in
    /// the stored answer's `skipped_events`) instead of ending the attempt
    /// `bad_output`. Off by default: the answer then lacks what that event
    /// said, which only a route that prefers a partial answer to a failed
    /// one should accept.
    #[serde(default)]
    pub skip_malformed_events: bool,
    /// The largest answer accepted from this provider, in bytes: a whole
    /// body, or all of a stream. Past it the answer is refused unread as
    /// `bad_output` (charged its reservation; the chain may fail over).
    /// Default 16 MiB.
    pub max_response_bytes: Option<usize>,
    /// The largest single stream event, in bytes. Default 1 MiB.
    pub max_event_bytes: Option<usize>,
    /// The chat template the model server runs with, for servers where it
    /// is a start-up flag (llama-cpp-python's `--chat_format`, e.g.
    /// `chatml-function-calling`, which is what makes it answer tool
    /// calls). Not sent; it names how the server behaves, so it is part of
    /// the contract fingerprint, and `scripts/local-model start` is given it.
    pub chat_format: Option<String>,
    /// What the provider charges, per million tokens in `[billing]
    /// currency`: `price = { input_per_mtok = 0.15, output_per_mtok = 0.60,
    /// cached_input_per_mtok = 0.075 }`. Unset: its attempts cost nothing.
    pub price: Option<crate::budgets::Price>,
    /// When the provider is passed over for failing (`engine::health`).
    #[serde(default)]
    pub health: HealthConfig,
}

/// `health = { failures = 5, cooldown = "30s" }` on a provider: after
/// `failures` signs of trouble in a row (0: never) it is passed over for
/// `cooldown`, then probed with one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HealthConfig {
    #[serde(default = "default_health_failures")]
    pub failures: u32,
    #[serde(default = "default_health_cooldown")]
    pub cooldown: HumanDuration,
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig { failures: default_health_failures(), cooldown: default_health_cooldown() }
    }
}

fn default_health_failures() -> u32 {
    5
}

fn default_health_cooldown() -> HumanDuration {
    HumanDuration::secs(30)
}

/// Why a provider's settings cannot be built when it is about to be used
/// (validation cannot see the environment the gateway will run in). Its
/// own type so that config depends on nothing above it; the engine and the
/// contract runner wrap it.
#[derive(Debug, thiserror::Error)]
pub enum ProviderSettingsError {
    #[error("provider `{provider}`: environment variable `{var}` (api_key_env) is not set")]
    ApiKeyMissing { provider: String, var: String },
    #[error("provider `{provider}`: environment variable `{var}` (access_token_env) is not set")]
    AccessTokenMissing { provider: String, var: String },
    #[error(
        "provider `{0}`: no Vertex AI credentials: set credentials_file (a service-account key file), \
         access_token_env, or the environment variable GOOGLE_APPLICATION_CREDENTIALS"
    )]
    CredentialsMissing(String),
    #[error(
        "provider `{provider}`: environment variable `{var}` ({field}) is not set: a Bedrock provider signs \
         with AWS keys unless api_key_env names a Bedrock API key"
    )]
    AwsKeyMissing { provider: String, var: String, field: &'static str },
    #[error("provider `{provider}`: aws_credentials_file {why}")]
    AwsCredentialsFile { provider: String, why: String },
}

/// `tokenizer = "remote"`: the provider's own tokenize/detokenize endpoints.
pub const REMOTE_TOKENIZER: &str = "remote";

impl ProviderConfig {
    /// The provider crate's view of this provider, with its API key read
    /// from the environment now (it is never stored anywhere else).
    pub fn to_settings(&self) -> Result<intentgate_providers::ProviderSettings, ProviderSettingsError> {
        let vertex = match self.dialect {
            DialectConfig::Vertex => Some(vertex::address(self)?),
            _ => None,
        };
        let dialect = match (self.dialect, &vertex) {
            (_, Some(address)) => address.publisher.dialect(),
            (DialectConfig::Openai | DialectConfig::Azure, _) => intentgate_providers::Dialect::OpenAi,
            (DialectConfig::Anthropic, _) => intentgate_providers::Dialect::Anthropic,
            (DialectConfig::Gemini | DialectConfig::Vertex, _) => intentgate_providers::Dialect::Gemini,
            (DialectConfig::Bedrock, _) => match self.bedrock_api() {
                BedrockApi::Invoke => intentgate_providers::Dialect::Bedrock,
                BedrockApi::Converse => intentgate_providers::Dialect::BedrockConverse,
            },
            (DialectConfig::OpenaiResponses | DialectConfig::AzureResponses, _) => {
                intentgate_providers::Dialect::OpenAiResponses
            }
        };
        let mut config = intentgate_providers::ProviderSettings::new(
            &self.name,
            dialect,
            &self.endpoint_url(),
            &self.model,
        );
        config.vertex = vertex;
        if self.dialect.is_azure() {
            config.azure = Some(intentgate_providers::AzureAddress {
                deployment: self.deployment.clone().unwrap_or_else(|| self.model.clone()),
                api_version: self.api_version.clone().unwrap_or_default(),
            });
        }
        config.timeouts = intentgate_providers::Timeouts {
            connect: self.connect_timeout.into(),
            first_byte: self.first_byte_timeout.into(),
            total: self.total_timeout.into(),
            stream_idle: self.stream_idle_timeout.into(),
        };
        if let Some(var) = &self.api_key_env {
            let key = std::env::var(var).map_err(|_| ProviderSettingsError::ApiKeyMissing {
                provider: self.name.clone(),
                var: var.clone(),
            })?;
            config.api_key = Some(intentgate_providers::Secret::new(key));
        }
        if self.dialect == DialectConfig::Bedrock {
            config.bedrock = Some(self.bedrock_address()?);
        }
        config.extra_headers = self.headers.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        config.request_overrides = self.request.clone();
        config.max_temperature = self.max_temperature;
        config.null_content_as_empty = self.null_content_as_empty;
        config.skip_malformed_events = self.skip_malformed_events;
        let defaults = intentgate_providers::AnswerLimits::default();
        config.answer_limits = intentgate_providers::AnswerLimits {
            max_response_bytes: self.max_response_bytes.unwrap_or(defaults.max_response_bytes),
            max_event_bytes: self.max_event_bytes.unwrap_or(defaults.max_event_bytes),
        };
        Ok(config)
    }

    /// Where the provider is called: `base_url`, or when it has none a
    /// Bedrock provider's regional runtime endpoint, a Vertex provider's
    /// location's endpoint.
    pub fn endpoint_url(&self) -> String {
        match (self.dialect, &self.region, &self.location) {
            _ if !self.base_url.is_empty() => self.base_url.clone(),
            (DialectConfig::Bedrock, Some(region), _) => {
                intentgate_providers::bedrock::default_base_url(region)
            }
            (DialectConfig::Vertex, _, Some(location)) => {
                intentgate_providers::VertexAddress::default_base_url(location)
            }
            _ => self.base_url.clone(),
        }
    }

    /// The Bedrock API this provider calls: as configured, else `invoke`
    /// for an Anthropic model id (and the simulator's `sim:` models),
    /// `converse` for any other.
    pub fn bedrock_api(&self) -> BedrockApi {
        self.bedrock_api.unwrap_or(if self.model.contains("anthropic.") || self.model.starts_with("sim:") {
            BedrockApi::Invoke
        } else {
            BedrockApi::Converse
        })
    }

    /// A Bedrock provider's region, and its AWS keys: none with a Bedrock
    /// API key (`api_key_env`), else from `aws_credentials_file`, else from
    /// the environment.
    fn bedrock_address(&self) -> Result<intentgate_providers::BedrockAddress, ProviderSettingsError> {
        let region = self.region.clone().unwrap_or_default();
        if self.api_key_env.is_some() {
            return Ok(intentgate_providers::BedrockAddress { region, credentials: None });
        }
        if let Some(path) = &self.aws_credentials_file {
            let keys = aws_credentials::read(path).map_err(|why| {
                ProviderSettingsError::AwsCredentialsFile { provider: self.name.clone(), why }
            })?;
            return Ok(intentgate_providers::BedrockAddress {
                region,
                credentials: Some(intentgate_providers::bedrock::sigv4::Credentials {
                    access_key_id: keys.access_key_id,
                    secret_access_key: intentgate_providers::Secret::new(keys.secret_access_key),
                    session_token: keys.session_token.map(intentgate_providers::Secret::new),
                }),
            });
        }
        let read = |field: &'static str, configured: &Option<String>, default: &str| {
            let var = configured.as_deref().unwrap_or(default);
            std::env::var(var).map_err(|_| ProviderSettingsError::AwsKeyMissing {
                provider: self.name.clone(),
                var: var.to_owned(),
                field,
            })
        };
        let access_key_id = read("access_key_env", &self.access_key_env, "AWS_ACCESS_KEY_ID")?;
        let secret = read("secret_key_env", &self.secret_key_env, "AWS_SECRET_ACCESS_KEY")?;
        let token = read("session_token_env", &self.session_token_env, "AWS_SESSION_TOKEN").ok();
        Ok(intentgate_providers::BedrockAddress {
            region,
            credentials: Some(intentgate_providers::bedrock::sigv4::Credentials {
                access_key_id,
                secret_access_key: intentgate_providers::Secret::new(secret),
                session_token: token.map(intentgate_providers::Secret::new),
            }),
        })
    }

    /// The tokenize endpoint's path (meaningful with `tokenizer = "remote"`).
    pub fn tokenize_path(&self) -> &str {
        self.tokenize_path.as_deref().unwrap_or(intentgate_providers::DEFAULT_TOKENIZE_PATH)
    }

    /// The detokenize endpoint's path (meaningful with `tokenizer = "remote"`).
    pub fn detokenize_path(&self) -> &str {
        self.detokenize_path.as_deref().unwrap_or(intentgate_providers::DEFAULT_DETOKENIZE_PATH)
    }
}

fn default_connect_timeout() -> HumanDuration {
    HumanDuration::secs(2)
}

fn default_first_byte_timeout() -> HumanDuration {
    HumanDuration::secs(60)
}

fn default_total_timeout() -> HumanDuration {
    HumanDuration::secs(120)
}

fn default_stream_idle_timeout() -> HumanDuration {
    HumanDuration::secs(30)
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    pub name: String,
    /// Providers in order: the primary, then its fallbacks.
    pub chain: Vec<String>,
    /// After this long without an answer an attempt is declared `unknown`.
    #[serde(default = "default_attempt_timeout")]
    pub attempt_timeout: HumanDuration,
    /// Retries of the same provider after a proven failure of a retry
    /// class (`retry_statuses`, `retry_connect_errors`), each a new
    /// attempt, before failing over.
    #[serde(default = "default_retries")]
    pub retries: u32,
    /// Statuses that retry the same provider (after a jittered, doubling
    /// backoff, or its `Retry-After`): a provider's passing overload or
    /// hiccup. Any other proven failure fails over at once.
    #[serde(default = "default_retry_statuses")]
    pub retry_statuses: Vec<u16>,
    /// A connection that could not be made (refused, DNS, connect timeout:
    /// the request provably never left) retries the same provider too.
    #[serde(default = "default_true")]
    pub retry_connect_errors: bool,
    /// A provider's content-policy refusal (a 400 saying so) ends the job
    /// with the reason by default: it is a verdict on the request, and
    /// trying the next provider would shop for a laxer policy. `true`
    /// fails over instead.
    #[serde(default)]
    pub fail_over_content_refusals: bool,
    /// First backoff between retries; doubles each time.
    #[serde(default = "default_retry_backoff")]
    pub retry_backoff: HumanDuration,
    /// Longest wait honoured, from backoff or a provider's `Retry-After`;
    /// a longer `Retry-After` fails over instead of waiting.
    #[serde(default = "default_max_retry_wait")]
    pub max_retry_wait: HumanDuration,
    /// A contract record older than this no longer makes a provider eligible.
    #[serde(default = "default_contract_max_age")]
    pub contract_max_age: HumanDuration,
    /// The primary needs a passing, current contract record too.
    #[serde(default = "default_true")]
    pub require_contract_for_primary: bool,
    /// Fallbacks need a passing, current contract record (R9). Turning this
    /// off gives up R9 for the route: it fails over to whatever comes next.
    #[serde(default = "default_true")]
    pub require_contract_for_fallback: bool,
    /// What a compatible door (chat completions, Responses, Messages,
    /// embeddings) does with a request on this route that carries no
    /// `Idempotency-Key`. Unset: `mint` where the door's section says
    /// `mint_idempotency_keys = true`, else `derive` (see
    /// [`Config::keyless`]). The jobs API always requires the header.
    pub keyless: Option<Keyless>,
    /// Other names a client may use for this route as `model` (some only
    /// accept names they know, such as `gpt-4o-mini`); `GET /v1/models`
    /// lists them. An alias ending in `*` is a prefix (`claude-*`): agents
    /// ask for each new model by its new name. A job asked under an alias
    /// is stored under the route's name, so the alias and the name are the
    /// same intent.
    #[serde(default)]
    pub aliases: Vec<String>,
    /// With `keyless = "derive"`: how long the same caller's same request
    /// names the same job.
    #[serde(default = "default_keyless_window")]
    pub keyless_window: HumanDuration,
    /// Steps of the chain that are pools of equivalent providers: the
    /// members are consecutive in `chain`, and each job starts on one of
    /// them chosen by the pool's `balance`, failing over to the others
    /// before the next step.
    #[serde(default)]
    pub pools: Vec<PoolConfig>,
    /// Off unless set: availability bought with a possible second
    /// execution, for a route whose requests are harmless to run twice.
    pub hedge: Option<HedgeConfig>,
    /// A stream that broke after part of it reached the client is
    /// continued by the chain's next eligible provider, so the client
    /// receives one answer (`engine::continuation`). Off by default: the
    /// cut attempt may have run to its end, so the intent may run twice.
    #[serde(default)]
    pub continue_cut_streams: bool,
}

/// Open attempts a job of a route with `continue_cut_streams` may have:
/// the cut one, its continuation, and a continuation of that.
const CONTINUATION_LANES: i32 = 3;

/// A route's hedge (see [`RouteConfig::hedge`] and `engine::hedge`): when an
/// attempt has been silent for `after` (or its connection broke after the
/// request was sent), it stays open — not failed, not cancelled, not sent
/// again — and the chain's next eligible provider starts beside it. The
/// first to finish wins the compare-and-swap; the other is `superseded`,
/// its answer kept, and both are charged. A streamed request only with
/// `streams`: the first attempt to produce a chunk claims the client's
/// stream (`engine::stream_hedge`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HedgeConfig {
    /// Silence that starts the next attempt; shorter than `attempt_timeout`.
    pub after: HumanDuration,
    /// The most attempts of one job open at once, the first included: 2
    /// or 3. The job carries it from its creation and the schema enforces
    /// it (`attempts_one_open_per_lane`).
    #[serde(default = "default_open_attempts")]
    pub open_attempts: u8,
    /// Hedge streamed requests too, before their first chunk. Off by
    /// default: a streamed request then goes to one provider at a time.
    #[serde(default)]
    pub streams: bool,
}

fn default_open_attempts() -> u8 {
    2
}

/// One pool of a route's chain (see [`RouteConfig::pools`]).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolConfig {
    /// Providers of the chain, consecutive there, at least two.
    pub members: Vec<String>,
    #[serde(default)]
    pub balance: Balance,
    /// With `balance = "weighted"`: one positive weight per member (all
    /// equal when absent).
    pub weights: Option<Vec<u32>>,
}

/// How a pool chooses the member a job starts on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Balance {
    /// At random, in proportion to `weights`.
    #[default]
    Weighted,
    /// The faster of two members taken at random (power of two choices),
    /// by a peak-weighted moving average of each one's time to first byte.
    LeastLatency,
}

impl RouteConfig {
    /// The bound on open attempts a job of this route is created with.
    pub fn open_attempts(&self) -> i32 {
        let hedged = self.hedge.map_or(1, |hedge| i32::from(hedge.open_attempts));
        if self.continue_cut_streams { hedged.max(CONTINUATION_LANES) } else { hedged }
    }

    /// The positions of `chain` that make the step `index` is in: its
    /// pool's members, or `index` alone.
    pub fn step(&self, index: usize) -> std::ops::Range<usize> {
        let Some(name) = self.chain.get(index) else { return index..index };
        for pool in &self.pools {
            if pool.members.contains(name) {
                let positions = pool.members.iter().filter_map(|m| self.chain.iter().position(|c| c == m));
                let (low, high) = positions.fold((usize::MAX, 0), |(low, high), p| (low.min(p), high.max(p)));
                return low..high + 1;
            }
        }
        index..index + 1
    }

    /// The pool `index` is a member of, if any.
    pub fn pool_of(&self, index: usize) -> Option<&PoolConfig> {
        let name = self.chain.get(index)?;
        self.pools.iter().find(|pool| pool.members.contains(name))
    }
}

/// A route's answer to a request without an `Idempotency-Key`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Keyless {
    /// `400 idempotency-key-missing`.
    Refuse,
    /// A fresh key: every such request is a new job, never deduplicated.
    Mint,
    /// A key made of the caller and the canonical request: the same request
    /// again within `keyless_window` (an SDK's retry after a timeout) is
    /// the same job; a different one (an agent's next step) is a new job.
    /// Two deliberate identical requests inside the window are one job.
    Derive,
}

fn default_keyless_window() -> HumanDuration {
    HumanDuration::secs(600)
}

fn default_contract_max_age() -> HumanDuration {
    HumanDuration::secs(30 * 24 * 3600)
}

fn default_true() -> bool {
    true
}

fn default_retry_statuses() -> Vec<u16> {
    vec![429, 500, 502, 503, 529]
}

fn default_retries() -> u32 {
    2
}

fn default_retry_backoff() -> HumanDuration {
    HumanDuration::millis(200)
}

fn default_max_retry_wait() -> HumanDuration {
    HumanDuration::secs(10)
}

fn default_attempt_timeout() -> HumanDuration {
    HumanDuration::secs(60)
}

/// A config error that names the file, the key and what is wrong — never
/// the text of a line or a value that may hold a secret (see
/// `parse_error.rs`).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: cannot read: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    /// `message` says where (line, column, key) and what, not the line.
    #[error("{path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{path}: {key}: {message}")]
    Invalid { path: PathBuf, key: String, message: String },
}

/// A file's version: the first 12 hex digits of the SHA-256 of its text.
fn version_of(text: &str) -> String {
    crate::jobs::sha256_hex(text.as_bytes()).chars().take(12).collect()
}

impl Config {
    /// Reads the file, applies the `INTENTGATE_*` environment overrides,
    /// and validates.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfigError::Read { path: path.to_owned(), source })?;
        let mut config = Config::parse(path, &text)?;
        config.apply_env_overrides(path)?;
        config.validate(path)?;
        config.version = version_of(&text);
        config.source = Some(path.to_owned());
        Ok(config)
    }

    /// Parses and validates `text` as if read from `path`, without looking
    /// at the environment.
    pub fn from_toml(path: &Path, text: &str) -> Result<Config, ConfigError> {
        let mut config = Config::parse(path, text)?;
        config.validate(path)?;
        config.version = version_of(text);
        Ok(config)
    }

    fn parse(path: &Path, text: &str) -> Result<Config, ConfigError> {
        toml::from_str(text).map_err(|err| ConfigError::Parse {
            path: path.to_owned(),
            message: parse_error::describe(text, &err),
        })
    }

    fn validate(&self, path: &Path) -> Result<(), ConfigError> {
        validate::validate(self).map_err(|(key, message)| ConfigError::Invalid {
            path: path.to_owned(),
            key,
            message,
        })
    }

    fn apply_env_overrides(&mut self, path: &Path) -> Result<(), ConfigError> {
        if let Some(listen) = non_empty_env(ENV_LISTEN) {
            self.server.listen = listen.parse().map_err(|err| ConfigError::Invalid {
                path: path.to_owned(),
                key: format!("{ENV_LISTEN} (overrides server.listen)"),
                message: format!("`{listen}` is not a socket address: {err}"),
            })?;
        }
        if let Some(url) = non_empty_env(ENV_DATABASE_URL) {
            self.store.url = url;
            self.store.url_from_env = true;
        }
        if let Some(url) = non_empty_env(ENV_DATABASE_DIRECT_URL) {
            self.store.direct_url = Some(url);
            self.store.direct_url_from_env = true;
        }
        if let Some(listen) = non_empty_env(ENV_SIMULATOR_LISTEN) {
            let addr: SocketAddr = listen.parse().map_err(|err| ConfigError::Invalid {
                path: path.to_owned(),
                key: format!("{ENV_SIMULATOR_LISTEN} (overrides simulator.listen)"),
                message: format!("`{listen}` is not a socket address: {err}"),
            })?;
            self.move_simulator(addr);
        }
        Ok(())
    }

    /// Moves the simulator to `addr`, and every provider whose `base_url`
    /// points at its old address along with it: those providers are the
    /// simulator's, and would otherwise call whatever holds the old port.
    /// A Vertex provider's tokens then come from the moved simulator too.
    fn move_simulator(&mut self, addr: SocketAddr) {
        let old = format!("http://{}", self.simulator.listen);
        let new = format!("http://{addr}");
        for provider in &mut self.providers {
            if let Some(rest) = provider.base_url.strip_prefix(&old)
                && (rest.is_empty() || rest.starts_with('/'))
            {
                provider.base_url = format!("{new}{rest}");
                if provider.dialect == DialectConfig::Vertex && provider.credentials_file.is_some() {
                    provider.token_uri = Some(format!("{new}/token"));
                }
            }
        }
        self.simulator.listen = addr;
    }

    /// The budgets and rate limits, as the engine applies them.
    pub fn limits(&self) -> crate::budgets::Limits {
        crate::budgets::Limits { budgets: self.budgets.clone(), rate_limits: self.rate_limits.clone() }
    }

    pub fn route(&self, name: &str) -> Option<&RouteConfig> {
        self.routes.iter().find(|route| route.name == name)
    }

    /// The route `name` names: its own name or one of its aliases.
    pub fn route_named(&self, name: &str) -> Option<&RouteConfig> {
        self.route(name)
            .or_else(|| self.routes.iter().find(|route| route.aliases.iter().any(|a| a == name)))
            .or_else(|| {
                // The longest prefix alias that matches wins.
                let prefixes = self.routes.iter().flat_map(|route| {
                    route.aliases.iter().filter_map(move |a| Some((a.strip_suffix('*')?, route)))
                });
                prefixes
                    .filter(|(prefix, _)| name.starts_with(prefix))
                    .max_by_key(|(p, _)| p.len())
                    .map(|(_, r)| r)
            })
    }

    /// What a compatible door does with a keyless request on `route`: the
    /// route's `keyless`, else `mint` where the door's section (`door`:
    /// `[openai]`, `[anthropic]`) asks for it, else `derive`. Derivation is the
    /// default because no SDK or agent sends a key of its own: refusing
    /// them would refuse every client that only changed its base URL, and
    /// minting would turn each of their retries into a second execution.
    pub fn keyless(&self, route: Option<&RouteConfig>, door: &DoorConfig) -> Keyless {
        match route.and_then(|route| route.keyless) {
            Some(policy) => policy,
            None if door.mint_idempotency_keys => Keyless::Mint,
            None => Keyless::Derive,
        }
    }
}

fn non_empty_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|value| !value.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exact_name_wins_over_a_prefix_alias_and_the_longest_prefix_wins() -> Result<(), ConfigError> {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/config/gateway.toml"))
            .map_err(|source| ConfigError::Read { path: "gateway.toml".into(), source })?;
        let mut config = Config::from_toml(Path::new("gateway.toml"), &text)?;
        let named = |config: &Config, model: &str| config.route_named(model).map(|route| route.name.clone());
        assert_eq!(named(&config, "claude-opus-5-5").as_deref(), Some("claude"), "a new model name");
        assert_eq!(named(&config, "gpt-5.1-codex-max").as_deref(), Some("codex"));
        assert_eq!(named(&config, "gpt-5").as_deref(), Some("chat"), "exact");
        assert_eq!(named(&config, "gpt-6"), None);
        if let Some(chat) = config.routes.iter_mut().find(|route| route.name == "chat") {
            chat.aliases.push("claude-opus-*".into());
        }
        assert_eq!(named(&config, "claude-opus-5-5").as_deref(), Some("chat"), "the longer prefix");
        Ok(())
    }
}
