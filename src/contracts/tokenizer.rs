//! The tokenizer a provider declares (`tokenizer = "o200k_base"` in its
//! config), used to check that a suite's prompts survive *that* provider's
//! tokenization (R9 in `docs/design.md`): two providers behind the same API
//! can split the same prompt differently, and a special token in user text
//! is read as a control token by one and as text by another.
//!
//! The BPE tables ship inside tiktoken-rs (no download), but building one
//! takes a noticeable fraction of a second and tens of megabytes, so each
//! is built at most once per process and shared.
//!
//! The same counts bound reservations and answer `count_tokens`, so any
//! client text reaches tiktoken, whose pre-tokenizing regex cannot take
//! every input: a run of a million whitespace characters overflows its
//! backtracking stack (`RuntimeError(StackOverflow)`), which tiktoken-rs
//! unwraps — a panic on the worker, and no answer for the client.
//! So text is never handed over whole: [`pieces`] cuts it into pieces of at
//! most [`MAX_PIECE_BYTES`], and each piece is encoded alone, under
//! `catch_unwind` as the last line (see [`Tokenizer::count`]).

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
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
    /// Encoded piece by piece ([`pieces`]); the same tokens as the whole
    /// text's unless a piece had to be cut where no word ends. `None` when
    /// tiktoken failed on a piece (it panicked; none is known to, since
    /// pieces are bounded).
    pub fn encode(&self, text: &str) -> Option<Vec<u32>> {
        let mut tokens = Vec::new();
        for piece in pieces(text) {
            tokens.extend(self.encode_piece(piece.text)?);
        }
        Some(tokens)
    }

    /// The tokens of `text`, never fewer than the provider plausibly counts:
    /// exact for text whose pieces all end where a word ends, one token
    /// more for each cut inside a run (the merge across the cut that the
    /// pieces may have lost), and a piece tiktoken fails on counts as its
    /// bytes (a byte-level BPE token is at least one byte). It feeds budget
    /// reservations, so an under-count would let a budget be passed.
    pub fn count(&self, text: &str) -> usize {
        pieces(text)
            .map(|piece| {
                let tokens = self.encode_piece(piece.text).map_or(piece.text.len(), |tokens| tokens.len());
                tokens + usize::from(piece.cut_inside_run)
            })
            .sum()
    }

    /// One bounded piece through tiktoken. Its encoder unwraps its regex's
    /// result; a piece of at most [`MAX_PIECE_BYTES`] is not known to make
    /// that fail, but a panic on a worker would leave its client without an
    /// answer, so it is caught here and the piece reported unencodable. The
    /// BPE is only read, so nothing is left half-changed by an unwind.
    fn encode_piece(&self, piece: &str) -> Option<Vec<u32>> {
        let encoded = catch_unwind(AssertUnwindSafe(|| self.bpe.encode_ordinary(piece)));
        if encoded.is_err() {
            tracing::warn!(
                tokenizer = self.name(),
                bytes = piece.len(),
                "the tokenizer failed on a piece of text"
            );
        }
        encoded.ok()
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

/// The longest piece of text handed to tiktoken at once, in bytes. Its
/// regex (fancy-regex's backtracking VM) keeps one stack entry per
/// character of a whitespace run (`\s+(?!\S)`) and fails past 1,000,000
/// of them — a request body of a megabyte of spaces. A kibibyte is far
/// below that, keeps each piece's BPE merge small, and is long enough that
/// cuts inside runs stay rare in real text.
pub const MAX_PIECE_BYTES: usize = 1024;

/// A piece of text that is encoded alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Piece<'a> {
    text: &'a str,
    /// Cut where no word ends (no word boundary within the bound): its
    /// count may differ from the same text's count in context.
    cut_inside_run: bool,
}

/// `text` in pieces of at most [`MAX_PIECE_BYTES`], each ending, when it
/// can, where a word ends: before a whitespace character other than `\r`
/// and `\n` that follows a non-whitespace one. No match of either
/// vocabulary's regex spans such a point (after a non-space, their
/// patterns continue only with letters, digits, marks, `'`, `\r`, `\n`,
/// `/`), and none looks behind, so the pieces encode to exactly the whole
/// text's tokens. Without such a point within the bound (a run of spaces,
/// one long word, a blob) the piece is cut at the bound.
fn pieces(text: &str) -> impl Iterator<Item = Piece<'_>> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        if rest.len() <= MAX_PIECE_BYTES {
            let piece = Piece { text: rest, cut_inside_run: false };
            rest = "";
            return Some(piece);
        }
        let bound = char_boundary_at_most(rest, MAX_PIECE_BYTES).max(first_char_len(rest));
        let (at, cut_inside_run) = match last_word_end(rest, bound) {
            Some(at) => (at, false),
            None => (bound, true),
        };
        let (piece, after) = rest.split_at(at);
        rest = after;
        Some(Piece { text: piece, cut_inside_run })
    })
}

/// The largest character boundary of `text` at or below `at` (the MSRV
/// predates `str::floor_char_boundary`).
fn char_boundary_at_most(text: &str, at: usize) -> usize {
    (0..=at.min(text.len())).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0)
}

/// The byte length of `text`'s first character (a piece is never empty).
fn first_char_len(text: &str) -> usize {
    text.chars().next().map_or(0, char::len_utf8)
}

/// The last offset in `1..=bound` where a word ends in `text` (see
/// [`pieces`]), if any.
fn last_word_end(text: &str, bound: usize) -> Option<usize> {
    let mut last = None;
    let mut previous: Option<char> = None;
    for (at, c) in text.char_indices() {
        if at > bound {
            break;
        }
        let word_ends = c.is_whitespace() && c != '\r' && c != '\n';
        if word_ends && previous.is_some_and(|p| !p.is_whitespace()) {
            last = Some(at);
        }
        previous = Some(c);
    }
    last
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
            let tokens = tokenizer.encode(text).unwrap();
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

    /// Inputs that make tiktoken's regex or BPE misbehave when whole.
    fn pathological(len: usize) -> Vec<(&'static str, String)> {
        let mixed: String = [" \n\t", "a", "\u{a0}\u{3000}", "東京", "!!", "\r\n", "🙂", "   9999"]
            .iter()
            .cycle()
            .scan(0, |total, part| {
                (*total < len).then(|| {
                    *total += part.len();
                    *part
                })
            })
            .collect();
        vec![
            ("spaces", " ".repeat(len)),
            ("one repeated letter", "a".repeat(len)),
            ("newlines", "\n".repeat(len)),
            ("mixed", mixed),
        ]
    }

    /// Past a million spaces tiktoken alone fails (and its encoder panics);
    /// in pieces, every such input is counted, and a count is at least a
    /// token per 4 KiB (the longest whitespace token is far shorter).
    #[test]
    fn a_megabyte_of_pathological_text_is_counted() {
        let tokenizer = Tokenizer::from_spec("o200k_base").unwrap();
        let spaces = " ".repeat(1_010_000);
        assert!(tokenizer.encode_piece(&spaces).is_none(), "tiktoken alone fails on it");
        for spec in ["o200k_base", "cl100k_base"] {
            let tokenizer = Tokenizer::from_spec(spec).unwrap();
            for (name, text) in pathological(1 << 20) {
                let count = tokenizer.count(&text);
                assert!(count >= text.len() / 4096, "{spec} {name}: {count}");
            }
        }
    }

    #[test]
    fn pathological_text_encodes_and_decodes_back() {
        for spec in ["o200k_base", "cl100k_base"] {
            let tokenizer = Tokenizer::from_spec(spec).unwrap();
            for (name, text) in pathological(64 * 1024) {
                let tokens = tokenizer.encode(&text).unwrap_or_else(|| panic!("{spec} {name}"));
                assert_eq!(tokenizer.decode_bytes(&tokens).unwrap(), text.as_bytes(), "{spec} {name}");
                assert!(tokenizer.count(&text) >= tokens.len(), "{spec} {name}");
            }
        }
    }

    #[test]
    fn counts_are_never_below_tiktokens_own_where_it_copes() {
        for spec in ["o200k_base", "cl100k_base"] {
            let tokenizer = Tokenizer::from_spec(spec).unwrap();
            for (name, text) in pathological(16 * 1024) {
                let exact = tokenizer.bpe.encode_ordinary(&text).len();
                let count = tokenizer.count(&text);
                assert!(count >= exact, "{spec} {name}: {count} < {exact}");
                assert!(
                    count <= exact + text.len() / MAX_PIECE_BYTES + 1,
                    "{spec} {name}: {count} vs {exact}"
                );
            }
        }
    }

    #[test]
    fn text_cut_where_words_end_counts_exactly() {
        let sentence =
            "Grüße aus 東京! It's 2025-01-01, \"quoted\" text;\n\tindented   spaced  <|endoftext|> 🙂\r\n";
        let text = sentence.repeat(2000);
        for spec in ["o200k_base", "cl100k_base"] {
            let tokenizer = Tokenizer::from_spec(spec).unwrap();
            let exact = tokenizer.bpe.encode_ordinary(&text);
            assert_eq!(tokenizer.encode(&text).unwrap(), exact, "{spec}");
            assert_eq!(tokenizer.count(&text), exact.len(), "{spec}");
        }
    }

    #[test]
    fn pieces_are_bounded_and_rebuild_the_text() {
        let mut inputs = pathological(10_000);
        inputs.push(("four-byte characters", "🙂".repeat(3000)));
        inputs.push(("words", "word ".repeat(3000)));
        inputs.push(("empty", String::new()));
        for (name, text) in inputs {
            let pieces: Vec<Piece<'_>> = pieces(&text).collect();
            assert!(pieces.iter().all(|p| !p.text.is_empty() && p.text.len() <= MAX_PIECE_BYTES), "{name}");
            assert_eq!(pieces.iter().map(|p| p.text).collect::<String>(), text, "{name}");
        }
        let words = "word ".repeat(3000);
        assert!(pieces(&words).all(|p| !p.cut_inside_run));
    }
}
