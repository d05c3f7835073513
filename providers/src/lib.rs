//! Provider adapters, outcome classes and the provider simulator of intentgate.
//!
//! The gateway talks to every provider through [`Provider::render`] and
//! [`Provider::call`] / [`Provider::call_stream`] (or [`Provider::chat`]
//! and [`Provider::chat_stream`], which render and call at once). Whatever happens on the wire ends up in exactly
//! one [`OutcomeClass`], because the job/attempt state machine (R5 in
//! `docs/design.md`) only needs to know one thing: did the call *prove* that
//! no usable work was done (`not_sent`, `rejected`, `bad_output` — fail over
//! at once), or may the provider still be working on it (`unknown` — block
//! until settled)?
//!
//! The [`sim`] module is a real HTTP server speaking every dialect, scripted
//! per request, so all of this can be tested over loopback sockets.

mod answer_budget;
mod anthropic;
mod authorize;
pub mod bedrock;
mod config;
mod converse;
mod decoded;
mod dialect;
mod embeddings;
mod gemini;
mod native;
mod openai;
mod outcome;
mod overrides;
mod provider;
mod redact;
mod rendered;
mod responses;
mod retry_after;
mod secret;
mod sse;
mod stream;
mod tokenize;
mod transport;
mod types;
mod vertex;

mod assemble;
pub mod sim;

pub use answer_budget::{AnswerBudget, COPIES, Held, Room, UNCOUNTED};
pub use assemble::assemble;
pub use config::{AnswerLimits, AzureAddress, BedrockAddress, ProviderSettings, SettingsError, Timeouts};
pub use dialect::{Dialect, UnknownDialect};
pub use embeddings::EmbeddingRequest;
pub use native::{Native, Protocol, assemble as assemble_native};
pub use outcome::{Failure, Outcome, OutcomeClass, ParseOutcomeClassError, class_of};
pub use provider::{Anthropic, Converse, Gemini, OpenAi, Provider, Responses};
pub use rendered::Rendered;
pub use secret::Secret;
pub use stream::ChunkStream;
pub use tokenize::{DEFAULT_DETOKENIZE_PATH, DEFAULT_TOKENIZE_PATH, RemoteTokenizer, TokenizeError};
pub use transport::{ATTEMPT_HEADER, IDEMPOTENCY_KEY_HEADER, TRACEPARENT_HEADER};
pub use types::{CallContext, ChatRequest, ChatResponse, Content, Message, StreamChunk, TraceParent, Usage};
pub use vertex::address::{Publisher, VertexAddress, VertexCredentials};
