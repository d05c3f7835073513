//! `{{variable}}` prompt templates.
//!
//! A template is parsed once, when its suite loads, so a malformed
//! placeholder is a load error naming the file; rendering is then a single
//! pass over literal and placeholder segments. Substituted values are
//! copied as they are and never scanned again: a case whose input itself
//! contains `{{x}}` (a real failure mode — users paste templates) must
//! reach the provider with those braces intact, not expanded or rejected.

use std::collections::{BTreeMap, BTreeSet};

/// One piece of a parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Var(String),
}

/// A parsed template; renders against a case's variables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    source: String,
    segments: Vec<Segment>,
}

/// Why a template does not parse; `offset` is the byte offset of the `{{`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("at byte {offset}: {message}")]
pub struct TemplateSyntaxError {
    pub offset: usize,
    pub message: String,
}

/// A rendered string, and the placeholders no variable was given for
/// (rendered as they were written, so the text still shows the hole).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    pub text: String,
    pub unresolved: Vec<String>,
}

impl Template {
    /// Parses `{{name}}` placeholders (spaces inside the braces allowed;
    /// names are ASCII letters, digits and `_`, not starting with a digit).
    /// Every `{{` opens a placeholder; a single `{` or `}` is literal.
    pub fn parse(source: &str) -> Result<Template, TemplateSyntaxError> {
        let mut segments = Vec::new();
        let mut rest = source;
        let mut offset = 0;
        while let Some(open) = rest.find("{{") {
            if open > 0 {
                segments.push(Segment::Literal(rest[..open].to_owned()));
            }
            let after = &rest[open + 2..];
            let close = after.find("}}").ok_or_else(|| TemplateSyntaxError {
                offset: offset + open,
                message: "`{{` without a closing `}}`".to_owned(),
            })?;
            let name = after[..close].trim();
            if !is_name(name) {
                return Err(TemplateSyntaxError {
                    offset: offset + open,
                    message: format!(
                        "`{{{{{}}}}}` is not a placeholder: names are letters, digits and `_`",
                        &after[..close]
                    ),
                });
            }
            segments.push(Segment::Var(name.to_owned()));
            let consumed = open + 2 + close + 2;
            offset += consumed;
            rest = &rest[consumed..];
        }
        if !rest.is_empty() {
            segments.push(Segment::Literal(rest.to_owned()));
        }
        Ok(Template { source: source.to_owned(), segments })
    }

    /// The template as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The distinct placeholder names, sorted.
    pub fn placeholders(&self) -> BTreeSet<&str> {
        self.segments
            .iter()
            .filter_map(|segment| match segment {
                Segment::Var(name) => Some(name.as_str()),
                Segment::Literal(_) => None,
            })
            .collect()
    }

    /// The literal (non-placeholder) text, for checks on what the suite
    /// author wrote rather than what a case supplies.
    pub fn literals(&self) -> impl Iterator<Item = &str> {
        self.segments.iter().filter_map(|segment| match segment {
            Segment::Literal(text) => Some(text.as_str()),
            Segment::Var(_) => None,
        })
    }

    /// Substitutes every placeholder in one pass; values are never
    /// re-expanded.
    pub fn render(&self, vars: &BTreeMap<String, String>) -> Rendered {
        let mut text = String::with_capacity(self.source.len());
        let mut unresolved = Vec::new();
        for segment in &self.segments {
            match segment {
                Segment::Literal(literal) => text.push_str(literal),
                Segment::Var(name) => match vars.get(name) {
                    Some(value) => text.push_str(value),
                    None => {
                        text.push_str("{{");
                        text.push_str(name);
                        text.push_str("}}");
                        if !unresolved.contains(name) {
                            unresolved.push(name.clone());
                        }
                    }
                },
            }
        }
        Rendered { text, unresolved }
    }
}

fn is_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn renders_placeholders_with_and_without_spaces() {
        let template = Template::parse("Hi {{name}}, re: {{ topic }}. {json: 1}").unwrap();
        assert_eq!(template.placeholders().into_iter().collect::<Vec<_>>(), ["name", "topic"]);
        let rendered = template.render(&vars(&[("name", "Ann"), ("topic", "refund")]));
        assert_eq!(rendered, Rendered { text: "Hi Ann, re: refund. {json: 1}".into(), unresolved: vec![] });
    }

    #[test]
    fn braces_in_values_are_kept_literally() {
        let template = Template::parse("{{text}} / {{other}}").unwrap();
        let rendered = template.render(&vars(&[("text", "{{other}} and {{x}}"), ("other", "o")]));
        assert_eq!(rendered.text, "{{other}} and {{x}} / o");
        assert!(rendered.unresolved.is_empty());
    }

    #[test]
    fn unresolved_placeholders_are_listed_once() {
        let template = Template::parse("{{a}} {{b}} {{a}}").unwrap();
        let rendered = template.render(&vars(&[("b", "B")]));
        assert_eq!(rendered.text, "{{a}} B {{a}}");
        assert_eq!(rendered.unresolved, ["a"]);
    }

    #[test]
    fn malformed_placeholders_do_not_parse() {
        assert_eq!(Template::parse("ok {{ unterminated").unwrap_err().offset, 3);
        assert!(Template::parse("{{not valid}}").is_err());
        assert!(Template::parse("{{1x}}").is_err());
        assert!(Template::parse("{{}}").is_err());
        assert!(Template::parse("é {{ x-y }}").is_err());
        assert!(Template::parse("single { and } braces are fine").is_ok());
    }
}
