//! The format a request asks its answer in: prose, any JSON object, or
//! JSON that validates against a schema — in each dialect's words.

use serde_json::Value;

/// What an answer in words must look like.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Format {
    Prose,
    /// JSON mode: OpenAI's `json_object`, a JSON `responseMimeType`
    /// without a schema, or a system prompt that mentions JSON.
    Json,
    /// Structured outputs: JSON that the schema accepts.
    Schema(Value),
}

impl Format {
    /// OpenAI's `response_format` (`json_schema` with its `schema`, or
    /// `json_object`); Anthropic's structured outputs, `output_config.format`
    /// (and the beta's top-level `output_format`) of type `json_schema`;
    /// Gemini's, which its view of the request writes as `response_format`.
    /// Without any, a system prompt that mentions JSON asks for JSON.
    pub(crate) fn read(body: &Value, system: &[String]) -> Format {
        let asked = body
            .get("response_format")
            .or_else(|| body.pointer("/output_config/format"))
            .or_else(|| body.get("output_format"));
        let kind = asked.and_then(|f| f.get("type")).and_then(Value::as_str);
        let schema = asked.and_then(|f| f.pointer("/json_schema/schema").or_else(|| f.get("schema")));
        match (kind, schema) {
            (Some("json_schema"), Some(schema)) => Format::Schema(schema.clone()),
            (Some("json_schema" | "json_object"), _) => Format::Json,
            _ if system.iter().any(|s| s.to_ascii_lowercase().contains("json")) => Format::Json,
            _ => Format::Prose,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn each_dialect_s_way_of_asking() {
        let schema = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        let openai = json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}});
        let anthropic = json!({"output_config": {"format": {"type": "json_schema", "schema": schema}}});
        let beta = json!({"output_format": {"type": "json_schema", "schema": schema}});
        for body in [openai, anthropic, beta] {
            assert_eq!(Format::read(&body, &[]), Format::Schema(schema.clone()), "{body}");
        }
        assert_eq!(Format::read(&json!({"response_format": {"type": "json_object"}}), &[]), Format::Json);
        assert_eq!(Format::read(&json!({}), &["Reply in JSON.".into()]), Format::Json);
        assert_eq!(Format::read(&json!({"response_format": {"type": "text"}}), &[]), Format::Prose);
    }
}
