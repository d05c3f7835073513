//! The tokenizer a provider declares (`tokenizer = "o200k_base"` in its
//! config), used to check that a suite's prompts survive *that* provider's
//! tokenization (R9 in `docs/design.md`): two providers behind the same API
//! can split the same prompt differently, and a special token in user text
//! is read as a control token by one and as text by another.
//!
//! The BPE tables ship inside tiktoken-rs (no download), but building one
//! takes a noticeable fraction of a second and tens of megabytes, so each
//! is built at most once per process and shared.

use std::fmt;
use std::sync::OnceLock;

use tiktoken_rs::CoreBPE;

/// ChatML control markers. They are not in the base vocabularies, but the
/// chat endpoints serving these vocabularies frame messages with them, so
/// user text carrying one can forge a message boundary all the same.
const CHAT_MARKERS: [&str; 3] = ["<|im_start|>", "<|im_end|>", "<|im_sep|>"];

/// The vocabularies tiktoken-rs carries that a provider may declare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Vocabulary {
    O200k,
    Cl100k,
}

impl Vocabulary {
    fn name(self) -> &'static str {
        match self {
            Vocabulary::O200k => "o200k_base",
            Vocabulary::Cl100k => "cl100k_base",
        }
    }

    /// The shared BPE, built on first use; a build failure is remembered.
    fn bpe(self) -> Result<&'static CoreBPE, UnusableTokenizer> {
        static O200K: OnceLock<Result<CoreBPE, String>> = OnceLock::new();
        static CL100K: OnceLock<Result<CoreBPE, String>> = OnceLock::new();
        let built = match self {
            Vocabulary::O200k => O200K.get_or_init(|| tiktoken_rs::o200k_base().map_err(|e| e.to_string())),
            Vocabulary::Cl100k => {
                CL100K.get_or_init(|| tiktoken_rs::cl100k_base().map_err(|e| e.to_string()))
            }
        };
        built
            .as_ref()
            .map_err(|message| UnusableTokenizer::Load { name: self.name(), message: message.clone() })
    }
}

/// Why a declared tokenizer cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnusableTokenizer {
    #[error("tokenizer `{0}` is not supported (expected o200k_base or cl100k_base)")]
    Unknown(String),
    #[error("tokenizer `{0}`: Hugging Face tokenizer files are not supported yet")]
    HuggingFace(String),
    #[error("tokenizer `{name}` cannot be built: {message}")]
    Load { name: &'static str, message: String },
}

/// A loaded tokenizer: cheap to copy, shared across threads.
#[derive(Clone, Copy)]
pub struct Tokenizer {
    vocabulary: Vocabulary,
    bpe: &'static CoreBPE,
}

impl fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Tokenizer").field(&self.vocabulary.name()).finish()
    }
}

impl Tokenizer {
    /// `o200k_base` or `cl100k_base`, as a provider's `tokenizer` config
    /// says. The first call per vocabulary builds it.
    pub fn from_spec(spec: &str) -> Result<Tokenizer, UnusableTokenizer> {
        let vocabulary = match spec {
            "o200k_base" => Vocabulary::O200k,
            "cl100k_base" => Vocabulary::Cl100k,
            other if other.starts_with("hf:") => {
                return Err(UnusableTokenizer::HuggingFace(other.to_owned()));
            }
            other => return Err(UnusableTokenizer::Unknown(other.to_owned())),
        };
        Ok(Tokenizer { vocabulary, bpe: vocabulary.bpe()? })
    }

    /// The spec it was built from, e.g. `o200k_base`.
    pub fn name(&self) -> &'static str {
        self.vocabulary.name()
    }

    /// Tokens of `text` encoded as ordinary text: special-token strings
    /// become plain tokens, exactly as a provider should treat user input.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        self.bpe.encode_ordinary(text)
    }

    pub fn count(&self, text: &str) -> usize {
        self.encode(text).len()
    }

    /// The bytes `tokens` stand for; `None` for a token id the vocabulary
    /// does not have.
    pub fn decode_bytes(&self, tokens: &[u32]) -> Option<Vec<u8>> {
        self.bpe.decode_bytes(tokens).ok()
    }

    /// The control-token strings user text must not carry: the
    /// vocabulary's special tokens plus the ChatML markers, sorted.
    pub fn special_tokens(&self) -> Vec<&'static str> {
        let mut tokens: Vec<&'static str> = self.bpe.special_tokens().into_iter().collect();
        tokens.extend(CHAT_MARKERS);
        tokens.sort_unstable();
        tokens.dedup();
        tokens
    }

    /// Every special-token string that occurs in `text`, sorted.
    pub fn special_tokens_in(&self, text: &str) -> Vec<&'static str> {
        if !text.contains("<|") {
            return Vec::new();
        }
        self.special_tokens().into_iter().filter(|token| text.contains(token)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_vocabularies_load_and_round_trip() {
        for spec in ["o200k_base", "cl100k_base"] {
            let tokenizer = Tokenizer::from_spec(spec).unwrap();
            assert_eq!(tokenizer.name(), spec);
            let text = "Grüße, 東京! {{x}} <|endoftext|>";
            let tokens = tokenizer.encode(text);
            assert_eq!(tokenizer.decode_bytes(&tokens).unwrap(), text.as_bytes());
            assert!(tokenizer.special_tokens().contains(&"<|endoftext|>"));
            assert_eq!(tokenizer.special_tokens_in(text), ["<|endoftext|>"]);
            assert_eq!(tokenizer.special_tokens_in("<|im_start|>system"), ["<|im_start|>"]);
            assert!(tokenizer.special_tokens_in("a <| b |> c").is_empty());
        }
    }

    #[test]
    fn vocabularies_differ() {
        let cl100k = Tokenizer::from_spec("cl100k_base").unwrap();
        let o200k = Tokenizer::from_spec("o200k_base").unwrap();
        assert!(cl100k.special_tokens().contains(&"<|fim_prefix|>"));
        assert!(!o200k.special_tokens().contains(&"<|fim_prefix|>"));
    }

    #[test]
    fn unknown_specs_are_errors() {
        assert_eq!(Tokenizer::from_spec("gpt2").unwrap_err(), UnusableTokenizer::Unknown("gpt2".into()));
        assert!(matches!(Tokenizer::from_spec("hf:tok.json"), Err(UnusableTokenizer::HuggingFace(_))));
    }
}
