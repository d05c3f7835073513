//! Parses the script grammar documented on the [`sim`](super) module.

use std::str::FromStr;
use std::time::Duration;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Script {
    pub(crate) waits: Vec<Wait>,
    pub(crate) end: End,
    pub(crate) output: Output,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Wait {
    Delay(Duration),
    Hold(String),
    Hang,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) enum End {
    #[default]
    Reply,
    Status {
        code: u16,
        retry_after: Option<String>,
    },
    ResetBeforeBody,
    ResetAfterBody,
    /// A 400 refusal by the provider's content policy, in its dialect's words.
    ContentPolicy,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Output {
    pub(crate) malformed_json: bool,
    pub(crate) invent_key: bool,
    pub(crate) ignore_format: bool,
    pub(crate) fault: Fault,
    /// Answer with a tool call instead of text.
    pub(crate) tool_call: bool,
    /// The tool to call, whatever the request offers (`tool=NAME`).
    pub(crate) tool_name: Option<String>,
    /// Tool arguments that violate the tool's schema (`tool_args=bad`).
    pub(crate) bad_tool_args: bool,
    /// Words even when `tool_choice` forces a call (`ignore-tools`): a
    /// model that breaks a tool contract, for contract tests.
    pub(crate) ignore_tools: bool,
    /// Answer with the request's auth header value (`echo-auth`): a
    /// provider that echoes its API key, for redaction tests.
    pub(crate) echo_auth: bool,
    /// A safety filter stops the answer (`safety-stop`): half of it said
    /// (Gemini: nothing, unless streamed), then `content_filter`
    /// (Gemini's `SAFETY`, Anthropic's `refusal`).
    pub(crate) safety_stop: bool,
    /// Report this many output tokens whatever was said (`usage=N`): a
    /// provider that bills more than the request allowed, for budget tests.
    pub(crate) reported_output: Option<u64>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Fault {
    #[default]
    None,
    Stall,
    Cut,
    NoDone,
    /// Half the stream, then a clean end of the body: no terminator, no error.
    Truncated,
    /// Bedrock: half the stream, then a `modelStreamErrorException` frame.
    Exception,
    /// Bedrock: a frame whose message CRC is wrong, half way.
    BadCrc,
}

/// A script the simulator cannot run, with the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad sim script `{script}`: {reason}")]
pub struct ScriptError {
    script: String,
    reason: String,
}

impl ScriptError {
    pub(crate) fn new(script: &str, reason: impl Into<String>) -> Self {
        ScriptError { script: script.to_owned(), reason: reason.into() }
    }
}

impl FromStr for Script {
    type Err = ScriptError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let fail = |reason: String| ScriptError { script: text.to_owned(), reason };
        let mut script = Script::default();
        let mut retry_after = None;
        for step in text.split(';').map(str::trim).filter(|s| !s.is_empty()) {
            let (name, arg) = match step.split_once('=') {
                Some((name, arg)) => (name.trim(), Some(arg.trim())),
                None => (step, None),
            };
            let twice = |what: &str| fail(format!("`{step}`: only one {what} per script"));
            let end = |slot: &mut End, end: End| set_once(slot, end).map_err(|()| twice("status / reset-*"));
            let fault =
                |slot: &mut Fault, fault: Fault| set_once(slot, fault).map_err(|()| twice("stream-* fault"));
            match (name, arg) {
                ("ok", None) => {}
                ("hang", None) => script.waits.push(Wait::Hang),
                ("delay", Some(arg)) => {
                    let delay = duration(arg)
                        .ok_or_else(|| fail(format!("`{arg}` is not a duration like 200ms or 2s")))?;
                    script.waits.push(Wait::Delay(delay));
                }
                ("hold", Some(tag)) if is_tag(tag) => script.waits.push(Wait::Hold(tag.to_owned())),
                ("status", Some(code)) => match code.parse::<u16>() {
                    Ok(code) if (400..600).contains(&code) => {
                        end(&mut script.end, End::Status { code, retry_after: None })?
                    }
                    _ => return Err(fail(format!("`{code}` is not an error status (400-599)"))),
                },
                ("retry_after", Some(value))
                    if !value.is_empty() && value.bytes().all(|b| (b' '..=b'~').contains(&b)) =>
                {
                    retry_after = Some(value.to_owned());
                }
                ("reset-before-body", None) => end(&mut script.end, End::ResetBeforeBody)?,
                ("reset-after-body", None) => end(&mut script.end, End::ResetAfterBody)?,
                ("content-policy", None) => end(&mut script.end, End::ContentPolicy)?,
                ("malformed-json", None) => script.output.malformed_json = true,
                ("invent-key", None) => script.output.invent_key = true,
                ("echo-auth", None) => script.output.echo_auth = true,
                ("safety-stop", None) => script.output.safety_stop = true,
                ("ignore-format", None) => script.output.ignore_format = true,
                ("ignore-tools", None) => script.output.ignore_tools = true,
                ("tool_call", None) | ("tool_args", Some("good")) => script.output.tool_call = true,
                ("tool", Some(name)) if is_tag(name) => {
                    script.output.tool_call = true;
                    script.output.tool_name = Some(name.to_owned());
                }
                ("tool_args", Some("bad")) => {
                    script.output.tool_call = true;
                    script.output.bad_tool_args = true;
                }
                ("stream-stall", None) => fault(&mut script.output.fault, Fault::Stall)?,
                ("stream-cut", None) => fault(&mut script.output.fault, Fault::Cut)?,
                ("stream-no-done", None) => fault(&mut script.output.fault, Fault::NoDone)?,
                ("stream-truncated", None) => fault(&mut script.output.fault, Fault::Truncated)?,
                ("stream-exception", None) => fault(&mut script.output.fault, Fault::Exception)?,
                ("bad-crc", None) => fault(&mut script.output.fault, Fault::BadCrc)?,
                ("usage", Some(tokens)) => match tokens.parse::<u64>() {
                    Ok(tokens) => script.output.reported_output = Some(tokens),
                    Err(_) => return Err(fail(format!("`{tokens}` is not a number of tokens"))),
                },
                _ => return Err(fail(format!("unknown or malformed step `{step}`"))),
            }
        }
        if let Some(value) = retry_after {
            match &mut script.end {
                End::Status { retry_after, .. } => *retry_after = Some(value),
                _ => return Err(fail("retry_after needs a status step".into())),
            }
        }
        Ok(script)
    }
}

/// Fills a slot that must be set at most once (its default means unset).
fn set_once<T: Default + PartialEq>(slot: &mut T, value: T) -> Result<(), ()> {
    if *slot != T::default() {
        return Err(());
    }
    *slot = value;
    Ok(())
}

fn duration(text: &str) -> Option<Duration> {
    if let Some(ms) = text.strip_suffix("ms") {
        return ms.trim().parse().ok().map(Duration::from_millis);
    }
    if let Some(secs) = text.strip_suffix('s') {
        return secs.trim().parse().ok().map(Duration::from_secs);
    }
    text.parse().ok().map(Duration::from_millis)
}

fn is_tag(tag: &str) -> bool {
    !tag.is_empty() && tag.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Script, ScriptError> {
        text.parse()
    }

    #[test]
    fn parses_waits_in_order_and_one_ending() -> Result<(), ScriptError> {
        let script = parse(" hold=a ; delay=20ms;delay=1s; status=429; retry_after=1 ")?;
        assert_eq!(
            script.waits,
            [
                Wait::Hold("a".into()),
                Wait::Delay(Duration::from_millis(20)),
                Wait::Delay(Duration::from_secs(1))
            ]
        );
        assert_eq!(script.end, End::Status { code: 429, retry_after: Some("1".into()) });
        assert_eq!(parse("")?, Script::default());
        assert_eq!(parse("ok")?, Script::default());
        let script = parse("invent-key;stream-cut")?;
        assert!(script.output.invent_key);
        assert_eq!(script.output.fault, Fault::Cut);
        let script = parse("tool=get_weather;tool_args=bad")?;
        assert!(script.output.tool_call && script.output.bad_tool_args);
        assert_eq!(script.output.tool_name.as_deref(), Some("get_weather"));
        assert!(parse("tool_call")?.output.tool_call);
        assert!(parse("safety-stop")?.output.safety_stop);
        assert!(parse("ignore-tools")?.output.ignore_tools);
        assert_eq!(parse("stream-exception")?.output.fault, Fault::Exception);
        assert_eq!(parse("bad-crc")?.output.fault, Fault::BadCrc);
        Ok(())
    }

    #[test]
    fn rejects_nonsense() {
        for bad in [
            "status=200",
            "status=503;reset-after-body",
            "retry_after=1",
            "delay=soon",
            "hold=",
            "stream-cut;stream-stall",
            "explode",
            "hang=1",
            "tool=",
            "tool_args=maybe",
            "tool_call=1",
        ] {
            assert!(parse(bad).is_err(), "{bad} should not parse");
        }
    }
}
