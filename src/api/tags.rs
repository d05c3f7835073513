//! A request's tags: the `Intentgate-Tags` header, on every door, and a
//! `tags` string in the OpenAI doors' `metadata` (`{"tags": "a,b"}`: the
//! values of OpenAI's metadata are strings), which SDKs without a way to
//! set a header can send. Spend is reported per tag and may be limited per
//! tag; the header is not part of the intent, the metadata is part of the
//! body it came in (see [`crate::jobs::Attribution`]).

use axum::http::HeaderMap;
use serde_json::{Map, Value};

use super::{Problem, ProblemType};
use crate::jobs::Tags;

/// The header, comma-separated, possibly repeated.
pub const TAGS_HEADER: &str = "intentgate-tags";

/// The tags of a request: its headers' and its `metadata.tags`.
pub fn request_tags(headers: &HeaderMap, params: &Map<String, Value>) -> Result<Tags, Problem> {
    let values: Result<Vec<&str>, _> =
        headers.get_all(TAGS_HEADER).iter().map(|value| value.to_str()).collect();
    let mut values =
        values.map_err(|_| Problem::new(ProblemType::InvalidTags, "`Intentgate-Tags` is not ASCII"))?;
    match params.get("metadata").and_then(|metadata| metadata.get("tags")) {
        Some(Value::String(tags)) => values.push(tags),
        Some(_) => {
            let detail = "`metadata.tags` must be a comma-separated string";
            return Err(Problem::new(ProblemType::InvalidTags, detail).with("path", "/metadata/tags"));
        }
        None => {}
    }
    Tags::parse(values).map_err(|err| Problem::new(ProblemType::InvalidTags, err.to_string()))
}
