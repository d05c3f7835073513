//! `Intentgate-Tags`: the labels a caller gives a request, on every door.
//! Spend is reported per tag and may be limited per tag; tags are not part
//! of the intent (see [`crate::jobs::Attribution`]).

use axum::http::HeaderMap;

use super::{Problem, ProblemType};
use crate::jobs::Tags;

/// The header, comma-separated, possibly repeated.
pub const TAGS_HEADER: &str = "intentgate-tags";

/// The tags of a request; none when it sent no header.
pub fn request_tags(headers: &HeaderMap) -> Result<Tags, Problem> {
    let values: Result<Vec<&str>, _> =
        headers.get_all(TAGS_HEADER).iter().map(|value| value.to_str()).collect();
    let values =
        values.map_err(|_| Problem::new(ProblemType::InvalidTags, "`Intentgate-Tags` is not ASCII"))?;
    Tags::parse(values).map_err(|err| Problem::new(ProblemType::InvalidTags, err.to_string()))
}
