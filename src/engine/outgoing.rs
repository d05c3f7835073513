//! What one attempt sends its provider, worked out once before the
//! attempt's row is written: the job's work with the completion limit a
//! reserving attempt is given, the body rendered from it, and what that
//! body reserves. The reservation is read off this body and the call sends
//! it, so a body is rendered (and its prompt counted) once per attempt, and
//! what was reserved is what went out.

use intentgate_providers::{CallContext, Failure, Outcome, Provider, Rendered};

use super::{Engine, PreparedRequest, Work};
use crate::jobs::Payer;
use crate::store::Reservation;

/// One attempt's request as its provider is sent it.
#[derive(Debug)]
pub(super) struct Outgoing {
    /// The work as sent: a reserving chat attempt carries a completion limit.
    pub work: Work,
    /// Its body, or why it cannot be rendered (the attempt then ends unsent).
    pub body: Result<Rendered, Failure>,
    /// What the attempt reserves, read off `body` (see `spend.rs`).
    pub reservation: Reservation,
}

impl Outgoing {
    /// One plain (not streamed) call sending the body.
    pub async fn call(&self, provider: &Provider, context: &CallContext) -> Outcome {
        let body = self.body.as_ref().map_err(Clone::clone)?;
        self.work.call(provider, body, context).await
    }
}

impl Engine {
    /// What an attempt of `payer`'s job sends `provider`. A reserving attempt
    /// whose client set no completion limit is sent the one it reserves
    /// (`[billing] default_max_tokens`, within the provider's
    /// `context_window`): a reservation that the request does not carry
    /// would bound nothing.
    pub(super) fn outgoing(&self, payer: Payer<'_>, request: &PreparedRequest, provider: &str) -> Outgoing {
        let mut work = request.work.clone();
        let Some(entry) = self.provider(provider) else {
            let reason = format!("provider `{provider}` is not configured");
            let body = Err(Failure::NotSent { reason, local: true });
            return Outgoing { work, body, reservation: Reservation::default() };
        };
        let reserves = self.reserves(payer, &request.route, provider);
        let default_limit = self.configured().billing.default_max_tokens;
        let filled = reserves && unlimited(&work);
        if filled {
            set_completion_limit(&mut work, default_limit);
        }
        let mut body = work.render(&entry.provider, request.stream);
        let prompt_tokens = match &body {
            Ok(rendered) if reserves => Some(Self::prompt_tokens(&entry, rendered)),
            _ => None,
        };
        // What is left of the window after the prompt, so the filled-in
        // limit never makes the provider refuse the request. The prompt was
        // counted with the default limit in the body, whose digits are at
        // least the smaller limit's: still an upper bound.
        if filled && let (Some(window), Some(prompt)) = (entry.config.context_window, prompt_tokens) {
            let limit = u64::from(window).saturating_sub(prompt).max(1);
            if limit < default_limit {
                set_completion_limit(&mut work, limit);
                body = work.render(&entry.provider, request.stream);
            }
        }
        let reservation = match (&body, prompt_tokens) {
            (Ok(rendered), Some(prompt)) => self.reservation(payer, request, &entry, rendered, prompt),
            // Nothing meters it, or nothing can be sent: nothing to reserve.
            _ => Reservation::default(),
        };
        Outgoing { work, body, reservation }
    }
}

/// Whether `work` is a chat request whose client set no completion limit.
fn unlimited(work: &Work) -> bool {
    matches!(work, Work::Chat(chat) if chat.max_tokens.is_none() && !chat.extra.contains_key("max_completion_tokens"))
}

/// Sets a chat request's completion limit (embeddings complete nothing).
fn set_completion_limit(work: &mut Work, limit: u64) {
    if let Work::Chat(chat) = work {
        chat.max_tokens = Some(u32::try_from(limit).unwrap_or(u32::MAX));
    }
}
