//! Whom a job's spend counts against besides its owner: the stored key
//! that created it, that key's team, and the tags its caller gave it.
//!
//! An attribution is not part of the intent: the same request under the
//! same idempotency key with other tags is the same job (its first
//! attribution stays). It is stored with the job and never changes, so a
//! retry, a failover or a sweep on another replica books the same meters
//! as the first attempt did, and the spend report groups every charge by it.

use serde::Serialize;
use uuid::Uuid;

/// A job's key, team and tags.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Attribution {
    /// The stored key that created the job; `None` for a config principal.
    pub key_id: Option<Uuid>,
    /// The team of that key (or of the config principal).
    pub team: Option<String>,
    pub tags: Tags,
}

/// Whom a job's attempts are charged to: its owner and its attribution.
#[derive(Debug, Clone, Copy)]
pub struct Payer<'a> {
    pub owner: &'a str,
    pub attribution: &'a Attribution,
}

/// A job's tags: distinct, sorted, at most [`Tags::MAX`], each 1 to
/// [`Tags::MAX_LEN`] characters of letters, digits and `-_.:/=@`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Tags(Vec<String>);

/// Why tags were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidTags {
    #[error("at most {max} tags may be given, not {0}", max = Tags::MAX)]
    TooMany(usize),
    #[error("tag `{0}` is not 1 to {max} characters of letters, digits and `-_.:/=@`", max = Tags::MAX_LEN)]
    Malformed(String),
}

impl Tags {
    pub const MAX: usize = 16;
    pub const MAX_LEN: usize = 64;

    /// Tags from values that each hold one or more comma-separated tags
    /// (the `Intentgate-Tags` header, possibly repeated). Blank items are
    /// ignored; repeats count once.
    pub fn parse<'a>(values: impl IntoIterator<Item = &'a str>) -> Result<Tags, InvalidTags> {
        let mut tags: Vec<String> = Vec::new();
        for tag in values.into_iter().flat_map(|value| value.split(',')).map(str::trim) {
            if tag.is_empty() {
                continue;
            }
            if !Self::well_formed(tag) {
                return Err(InvalidTags::Malformed(tag.chars().take(80).collect()));
            }
            tags.push(tag.to_owned());
        }
        tags.sort_unstable();
        tags.dedup();
        if tags.len() > Self::MAX {
            return Err(InvalidTags::TooMany(tags.len()));
        }
        Ok(Tags(tags))
    }

    fn well_formed(tag: &str) -> bool {
        tag.len() <= Self::MAX_LEN && tag.chars().all(|c| c.is_ascii_alphanumeric() || "-_.:/=@".contains(c))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(String::as_str)
    }

    /// The stored form: a JSON array, `None` when there are no tags.
    pub fn to_stored(&self) -> Option<String> {
        (!self.0.is_empty()).then(|| serde_json::Value::from(self.0.clone()).to_string())
    }

    /// Reads [`Tags::to_stored`]'s form back.
    pub fn from_stored(stored: Option<&str>) -> Result<Tags, serde_json::Error> {
        stored.map_or(Ok(Tags::default()), |text| serde_json::from_str(text).map(Tags))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_split_trimmed_sorted_and_distinct() {
        let tags = Tags::parse(["support-bot, env=prod", "env=prod,,feature:search"]).unwrap();
        assert_eq!(tags.iter().collect::<Vec<_>>(), ["env=prod", "feature:search", "support-bot"]);
        assert_eq!(tags.to_stored().as_deref(), Some(r#"["env=prod","feature:search","support-bot"]"#));
        assert_eq!(Tags::from_stored(tags.to_stored().as_deref()).unwrap(), tags);
        assert_eq!(Tags::parse([" , "]).unwrap().to_stored(), None);
    }

    #[test]
    fn malformed_or_too_many_tags_are_refused() {
        assert!(matches!(Tags::parse(["a b"]), Err(InvalidTags::Malformed(_))));
        assert!(matches!(Tags::parse([&"x".repeat(65) as &str]), Err(InvalidTags::Malformed(_))));
        let many: Vec<String> = (0..17).map(|i| format!("t{i}")).collect();
        assert_eq!(Tags::parse(many.iter().map(String::as_str)), Err(InvalidTags::TooMany(17)));
    }
}
