//! The door a job's request came through, kept for the people who read the
//! job (its view, the console). Not part of the intent: a chat completion
//! and a `POST /v1/jobs` of the same key and body are one job, and the door
//! of the request that made it is the one kept.

use serde::Serialize;

use super::UnknownState;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Entrance {
    /// `POST /v1/jobs`, the native jobs API.
    Jobs,
    /// `POST /v1/chat/completions`.
    ChatCompletions,
    /// `POST /v1/responses`.
    Responses,
    /// `POST /v1/messages`.
    Messages,
    /// `POST /v1/embeddings`.
    Embeddings,
}

impl Entrance {
    pub const ALL: [Entrance; 5] = [
        Entrance::Jobs,
        Entrance::ChatCompletions,
        Entrance::Responses,
        Entrance::Messages,
        Entrance::Embeddings,
    ];

    /// The stored name, as the migrations' CHECK allows it.
    pub fn as_str(self) -> &'static str {
        match self {
            Entrance::Jobs => "jobs",
            Entrance::ChatCompletions => "chat-completions",
            Entrance::Responses => "responses",
            Entrance::Messages => "messages",
            Entrance::Embeddings => "embeddings",
        }
    }
}

impl std::str::FromStr for Entrance {
    type Err = UnknownState;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        UnknownState::parse("entrance", &Entrance::ALL, Entrance::as_str, s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_entrance_reads_back_from_its_stored_name() {
        for entrance in Entrance::ALL {
            assert_eq!(entrance.as_str().parse::<Entrance>().ok(), Some(entrance));
            assert_eq!(serde_json::to_value(entrance).ok(), Some(entrance.as_str().into()));
        }
        assert!("door".parse::<Entrance>().is_err());
    }
}
