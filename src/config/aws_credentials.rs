//! AWS's shared credentials file (`~/.aws/credentials`, INI): the way AWS
//! keys are kept in a file rather than the environment, which is where a
//! Bedrock provider's `aws_credentials_file` points. Only its `[default]`
//! profile is read. A reason never quotes a value: they are secrets.

use std::path::Path;

/// The keys of the `[default]` profile.
pub(super) struct AwsKeys {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
}

/// The `[default]` profile of the file at `path`, or why it cannot be used.
pub(super) fn read(path: &Path) -> Result<AwsKeys, String> {
    let text =
        std::fs::read_to_string(path).map_err(|err| format!("{}: cannot read it: {err}", path.display()))?;
    parse(&text).map_err(|why| format!("{}: {why}", path.display()))
}

fn parse(text: &str) -> Result<AwsKeys, String> {
    let (mut section, mut id, mut secret, mut token) = (None, None, None, None);
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|rest| rest.strip_suffix(']')) {
            section = Some(name.trim().to_owned());
            continue;
        }
        if section.as_deref() != Some("default") {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else { continue };
        let value = Some(value.trim().to_owned()).filter(|value| !value.is_empty());
        match key.trim() {
            "aws_access_key_id" => id = value,
            "aws_secret_access_key" => secret = value,
            "aws_session_token" => token = value,
            _ => {}
        }
    }
    match (id, secret) {
        (Some(access_key_id), Some(secret_access_key)) => {
            Ok(AwsKeys { access_key_id, secret_access_key, session_token: token })
        }
        _ => Err("its [default] profile needs aws_access_key_id and aws_secret_access_key".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_profile_is_read_and_others_ignored() {
        let text = "[other]\naws_access_key_id = NO\n\n[default]\n# comment\naws_access_key_id = AKID\n\
                    aws_secret_access_key = s/e=cret\naws_session_token = tok\n[next]\naws_secret_access_key = NO\n";
        let keys = parse(text).expect("a default profile");
        assert_eq!(keys.access_key_id, "AKID");
        assert_eq!(keys.secret_access_key, "s/e=cret");
        assert_eq!(keys.session_token.as_deref(), Some("tok"));
    }

    #[test]
    fn a_missing_key_is_named_without_quoting_a_value() {
        let why = parse("[default]\naws_access_key_id = AKIDSECRETISH\n").err().expect("refused");
        assert!(why.contains("aws_secret_access_key"), "{why}");
        assert!(!why.contains("AKIDSECRETISH"), "{why}");
    }

    #[test]
    fn the_simulators_file_is_readable() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/providers/src/sim/bedrock/test_credentials");
        let keys = read(Path::new(path)).expect("the simulator's credentials");
        assert_eq!(keys.access_key_id, intentgate_providers::sim::BEDROCK_ACCESS_KEY_ID);
        assert_eq!(keys.secret_access_key, intentgate_providers::sim::BEDROCK_SECRET_ACCESS_KEY);
    }
}
