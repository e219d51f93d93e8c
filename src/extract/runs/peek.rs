//! The few fields of a record a run summary reads: its role, whether the
//! model speaks in it, its token usage, and what a reviewer reads first
//! (the task, model, tool calls and errors, outcome).
//!
//! A record read here is already known to be valid JSON, and most of its
//! bytes are text no summary needs. So it is not parsed: it is scanned,
//! key by key at the top level (and inside `message`, `payload`, `usage`
//! and `content`), every other value skipped whole (a string up to its
//! closing quote with one `memchr`, a container by counting brackets). A
//! record that is a whole ATIF trajectory is rare and small next to the
//! rest; it is parsed ([`super::atif`]).

use std::borrow::Cow;

use super::Tokens;
use super::atif;
use super::json::Scan;
use super::looked;
use crate::records::scan::Landmarks;
use crate::records::timestamp::Micros;

/// Which side of the conversation a record is on: a step is the model's
/// records from one input to the next (a response with its tool calls,
/// however many records it is written as).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) enum Turn {
    /// Neither (metadata, events): a step goes on across it.
    #[default]
    Neither,
    /// The model speaks: an assistant message, a Codex reasoning item or
    /// tool call.
    Model,
    /// What the model answers to: a user or tool message, a Codex tool
    /// output.
    Input,
}

/// What one record adds to its run.
#[derive(Default)]
pub(super) struct Seen<'a> {
    pub role: Option<Cow<'a, str>>,
    pub turn: Turn,
    /// Steps counted inside the record (an ATIF trajectory's agent
    /// steps); a line's step is counted from its [`Turn`].
    pub steps: u64,
    pub tokens: Option<Tokens>,
    /// The run's tokens so far, as a Codex `token_count` event counts
    /// them (`payload.info.total_token_usage`): the largest is the run's.
    pub so_far: Option<Tokens>,
    /// The earliest and latest time inside the record (an ATIF
    /// trajectory's steps), beside its own timestamp.
    pub span: Option<(Micros, Micros)>,
    /// `None` when the record says none of it (most records): kept apart
    /// so a record's summary stays small to hand around.
    pub review: Option<Box<Review<'a>>>,
}

/// What a reviewer reads first, as far as one record says it.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Review<'a> {
    /// A user message's text: the run's task when it is the first.
    pub asked: Option<Text<'a>>,
    pub model: Option<Cow<'a, str>>,
    pub agent: Option<Cow<'a, str>>,
    pub tool_calls: u64,
    pub tool_errors: u64,
    /// A top-level `reward` or `score`.
    pub score: Option<f64>,
    /// Why the model stopped (`stop_reason`, `finish_reason`).
    pub stop: Option<Cow<'a, str>>,
    pub cost_usd: Option<f64>,
}

/// A text value, decoded only when it is read: most user messages are
/// not a run's first, and their texts are long.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Text<'a> {
    /// A JSON string's bytes between its quotes, escapes as they are.
    Raw(&'a [u8]),
    Decoded(Cow<'a, str>),
}

impl<'a> Text<'a> {
    pub fn decode(self) -> Option<Cow<'a, str>> {
        match self {
            Text::Decoded(text) => Some(text),
            Text::Raw(raw) if !raw.contains(&b'\\') => {
                std::str::from_utf8(raw).ok().map(Cow::Borrowed)
            }
            Text::Raw(raw) => {
                let quoted = [b"\"", raw, b"\""].concat();
                serde_json::from_slice::<String>(&quoted)
                    .ok()
                    .map(Cow::Owned)
            }
        }
    }
}

/// What `record` adds to its run; `None` for a record that is not an
/// object.
/// `task`: a user message's text is wanted (its run has no task yet);
/// without, a `content` that is a text is skipped unread.
pub(super) fn seen(record: &[u8], task: bool) -> Option<Seen<'_>> {
    let mut scan = Scan::new(record, 0);
    let mut top = Fields {
        task,
        ..Fields::default()
    };
    scan.object(&mut |key, scan| top.take(key, scan, true))?;
    if top.atif {
        return atif::seen(record);
    }
    Some(top.seen())
}

/// [`seen`] of a record whose top-level fields the read's scan found
/// already: only their values are read (a `message` or `payload` object
/// walked, `usage` summed), never the rest of the record; one with a
/// rarer field is walked as [`seen`] walks it.
pub(super) fn seen_at<'a>(record: &'a [u8], marks: &Landmarks, task: bool) -> Option<Seen<'a>> {
    if marks.rare() {
        return seen(record, task);
    }
    let at = |start: Option<u32>| start.map(|i| Scan::new(record, i as usize));
    if let Some(mut scan) = at(marks.schema_version()) {
        if scan.text().is_some_and(|v| v.starts_with("ATIF-")) {
            return atif::seen(record);
        }
    }
    let mut top = Fields {
        role: at(marks.role()).and_then(|mut s| s.text()),
        kind: at(marks.kind()).and_then(|mut s| s.text()),
        usage: at(marks.usage()).and_then(|mut s| usage(&mut s)),
        // A text is read only when wanted; parts are always looked into.
        content: at(marks.content())
            .filter(|s| task || s.b.get(s.i) != Some(&b'"'))
            .map(|mut s| content(&mut s, task))
            .unwrap_or_default(),
        task,
        ..Fields::default()
    };
    if let Some(mut scan) = at(marks.inner()) {
        if scan.at(b'{') {
            let mut inner = Fields {
                task,
                ..Fields::default()
            };
            scan.object(&mut |key, scan| inner.take(key, scan, false))?;
            top.inner = Some(Box::new(inner));
        }
    }
    Some(top.seen())
}

/// What a `content` value holds: its first text, tool calls and failed
/// tool results (Anthropic's parts; a plain string is all text).
#[derive(Default)]
struct Content<'a> {
    text: Option<&'a [u8]>,
    tool_uses: u64,
    errors: u64,
}

/// The fields found in one object.
#[derive(Default)]
struct Fields<'a> {
    role: Option<Cow<'a, str>>,
    kind: Option<Cow<'a, str>>,
    usage: Option<Tokens>,
    /// `info.total_token_usage` (a Codex `token_count` event's payload).
    so_far: Option<Tokens>,
    content: Content<'a>,
    /// Elements of `tool_calls` (OpenAI chat).
    tool_calls: u64,
    model: Option<Cow<'a, str>>,
    score: Option<f64>,
    stop: Option<Cow<'a, str>>,
    cost_usd: Option<f64>,
    /// A Codex tool output whose `metadata.exit_code` is not 0.
    failed_output: bool,
    /// A Codex `session_meta`'s writer.
    originator: Option<Cow<'a, str>>,
    /// `message` (chat lines) or `payload` (Codex rollout lines).
    inner: Option<Box<Fields<'a>>>,
    atif: bool,
    /// A text `content` is wanted (see [`seen`]).
    task: bool,
}

/// Codex payload types in which the model speaks, and those that call a
/// tool.
const CODEX_MODEL: [&str; 5] = [
    "reasoning",
    "function_call",
    "custom_tool_call",
    "local_shell_call",
    "web_search_call",
];
const CODEX_OUTPUT: [&str; 2] = ["function_call_output", "custom_tool_call_output"];

/// Whether a Codex payload of this type is a tool's output whose exit
/// code can fail it.
pub(super) fn is_codex_output(payload: &str) -> bool {
    CODEX_OUTPUT.contains(&payload)
}

/// Whether a Codex payload of this type calls a tool.
pub(super) fn is_codex_call(payload: &str) -> bool {
    CODEX_MODEL[1..].contains(&payload)
}

impl Turn {
    /// The side of a record: `role` is its `role` (or `message`'s or
    /// `payload`'s), else its `type`; `top_assistant` says its own
    /// `type` is `assistant` (Claude Code); `payload` is a Codex line's
    /// `payload.type`.
    pub(super) fn of(role: Option<&str>, top_assistant: bool, payload: &str) -> Turn {
        match role {
            _ if top_assistant => Turn::Model,
            Some("assistant") => Turn::Model,
            Some("user" | "tool" | "function") => Turn::Input,
            _ if CODEX_MODEL.contains(&payload) => Turn::Model,
            _ if CODEX_OUTPUT.contains(&payload) => Turn::Input,
            _ => Turn::Neither,
        }
    }
}

impl<'a> Fields<'a> {
    /// What the top-level fields (and `message`'s or `payload`'s) add up
    /// to.
    fn seen(mut self) -> Seen<'a> {
        let inner = self.inner.take().unwrap_or_default();
        let top_assistant = self.kind.as_deref() == Some("assistant");
        let so_far = match inner.kind.as_deref() {
            Some("token_count") => inner.so_far,
            _ => None,
        };
        let payload = inner.kind.as_deref().unwrap_or("");
        let codex_call = is_codex_call(payload);
        // Only a tool output's exit code is a tool error.
        let codex_output = CODEX_OUTPUT.contains(&payload);
        let named = (self.role.as_deref().or(inner.role.as_deref()))
            .or(self.kind.as_deref())
            .or(inner.kind.as_deref());
        let turn = Turn::of(named, top_assistant, payload);
        let role = self.role.or(inner.role).or(self.kind).or(inner.kind);
        let asked = match role.as_deref() {
            Some("user") => self.content.text.or(inner.content.text).map(Text::Raw),
            _ => None,
        };
        let review = Review {
            asked,
            model: self.model.or(inner.model),
            agent: inner.originator,
            tool_calls: self.tool_calls
                + inner.tool_calls
                + self.content.tool_uses
                + inner.content.tool_uses
                + u64::from(codex_call),
            tool_errors: self.content.errors
                + inner.content.errors
                + u64::from(inner.failed_output && codex_output),
            score: self.score,
            stop: self.stop.or(inner.stop),
            cost_usd: self.cost_usd,
        };
        Seen {
            role,
            turn,
            steps: 0,
            tokens: self.usage.or(inner.usage),
            so_far,
            span: None,
            review: (review != Review::default()).then(|| Box::new(review)),
        }
    }

    /// Reads or skips the value of `key` (its raw bytes: a key written with
    /// escapes is decoded first, as the read's scan decodes it).
    fn take(&mut self, key: &[u8], scan: &mut Scan<'a>, top: bool) -> Option<()> {
        let decoded;
        let key = if key.contains(&b'\\') {
            let quoted = [b"\"", key, b"\""].concat();
            decoded = serde_json::from_slice::<String>(&quoted).unwrap_or_default();
            decoded.as_bytes()
        } else {
            key
        };
        match key {
            b"role" => self.role = scan.text(),
            b"type" => self.kind = scan.text(),
            b"usage" => self.usage = usage(scan),
            b"content" => self.content = content(scan, self.task),
            b"tool_calls" => self.tool_calls = elements(scan),
            b"model" => self.model = scan.text(),
            // A key that holds no number leaves another's in place.
            b"reward" | b"score" => self.score = scan.float().or(self.score),
            b"stop_reason" | b"finish_reason" => self.stop = scan.text(),
            b"total_cost_usd" => self.cost_usd = scan.float(),
            b"message" | b"payload" if top && scan.at(b'{') => {
                let mut inner = Fields {
                    task: self.task,
                    ..Fields::default()
                };
                scan.object(&mut |key, scan| inner.take(key, scan, false))?;
                self.inner = Some(Box::new(inner));
            }
            b"info" if !top && scan.at(b'{') => {
                scan.object(&mut |key, scan| {
                    match key {
                        b"total_token_usage" => self.so_far = usage(scan),
                        _ => scan.skip()?,
                    }
                    Some(())
                })?;
            }
            b"output" if !top => self.failed_output = failed_output(scan),
            b"originator" if !top => self.originator = scan.text(),
            b"schema_version" if top => {
                self.atif = scan.text().is_some_and(|v| v.starts_with("ATIF-"));
            }
            _ => scan.skip()?,
        }
        Some(())
    }
}

/// The elements of an array value (0 for any other value).
fn elements(scan: &mut Scan<'_>) -> u64 {
    let mut n = 0;
    let _ = scan.array(&mut |scan| {
        n += 1;
        scan.skip()
    });
    n
}

/// What a `content` value holds (see [`Content`]).
fn content<'a>(scan: &mut Scan<'a>, task: bool) -> Content<'a> {
    let mut found = Content::default();
    if scan.at(b'"') {
        match task {
            true => found.text = scan.raw_string(),
            false => {
                let _ = scan.skip();
            }
        }
        return found;
    }
    let _ = scan.array(&mut |scan| {
        if !scan.at(b'{') {
            return scan.skip();
        }
        let (mut kind, mut text, mut error) = (None, None, false);
        scan.object(&mut |key, scan| {
            match key {
                b"type" => kind = scan.text(),
                b"text" if scan.at(b'"') => text = scan.raw_string(),
                b"is_error" => error = scan.truth(),
                _ => scan.skip()?,
            }
            Some(())
        })?;
        match kind.as_deref() {
            // A part that is an agent's context is not what was asked.
            Some("text" | "input_text") if found.text.is_none() => {
                found.text = text.filter(|raw| !looked::is_context_raw(raw));
            }
            Some("tool_use" | "server_tool_use") => found.tool_uses += 1,
            Some("tool_result") => found.errors += u64::from(error),
            _ => {}
        }
        Some(())
    });
    found
}

/// Whether a Codex tool output says its command failed: the output is
/// JSON text (`{"output": …, "metadata": {"exit_code": N}}`) with a
/// non-zero `exit_code`.
fn failed_output(scan: &mut Scan<'_>) -> bool {
    let Some(text) = scan.text() else {
        return false;
    };
    let text = text.trim_start();
    if !text.starts_with('{') || !text.contains("exit_code") {
        return false;
    }
    #[derive(serde::Deserialize)]
    struct Output {
        metadata: Option<Metadata>,
    }
    #[derive(serde::Deserialize)]
    struct Metadata {
        exit_code: Option<i64>,
    }
    serde_json::from_str::<Output>(text)
        .ok()
        .and_then(|o| o.metadata)
        .and_then(|m| m.exit_code)
        .is_some_and(|code| code != 0)
}

/// Token totals of a `usage` object (input: `input_tokens` or
/// `prompt_tokens`; output: `output_tokens` or `completion_tokens`; total:
/// `total_tokens`, else their sum).
fn usage(scan: &mut Scan<'_>) -> Option<Tokens> {
    if !scan.at(b'{') {
        scan.skip()?;
        return None;
    }
    let (mut input, mut output, mut total) = (None, None, None);
    scan.object(&mut |key, scan| {
        match key {
            b"input_tokens" | b"prompt_tokens" => input = input.or(scan.number()),
            b"output_tokens" | b"completion_tokens" => output = output.or(scan.number()),
            b"total_tokens" => total = scan.number(),
            _ => scan.skip()?,
        }
        Some(())
    })?;
    let (input, output) = (input.unwrap_or(0), output.unwrap_or(0));
    Some(Tokens {
        input,
        output,
        total: total.unwrap_or(input.saturating_add(output)),
    })
}
#[cfg(test)]
mod tests {
    use super::*;

    fn look(json: &str) -> (Option<String>, Turn, Option<Tokens>) {
        let s = seen(json.as_bytes(), true).unwrap();
        (s.role.map(Cow::into_owned), s.turn, s.tokens)
    }

    #[test]
    fn a_codex_token_count_is_the_runs_tokens_so_far_and_atif_steps_carry_times() {
        let event = r#"{"timestamp":"2026-01-01T00:00:05Z","type":"event_msg","payload":{"type":"token_count","info":{"total_token_usage":{"input_tokens":120,"cached_input_tokens":100,"output_tokens":30,"reasoning_output_tokens":4,"total_tokens":150},"last_token_usage":{"input_tokens":1,"output_tokens":1,"total_tokens":2}},"rate_limits":null}}"#;
        let s = seen(event.as_bytes(), true).unwrap();
        let want = Tokens {
            input: 120,
            output: 30,
            total: 150,
        };
        assert_eq!((s.tokens, s.so_far), (None, Some(want)));
        // Only a token_count event's info counts.
        let other = r#"{"type":"event_msg","payload":{"type":"agent_message","info":{"total_token_usage":{"total_tokens":9}}}}"#;
        assert_eq!(seen(other.as_bytes(), true).unwrap().so_far, None);
        let atif = r#"{"schema_version":"ATIF-v1.2","steps":[{"source":"user","timestamp":"2026-01-01T00:00:10Z"},{"source":"agent","timestamp":"2026-01-01T00:00:04Z"},{"source":"agent","timestamp":7},{"source":"agent"}]}"#;
        let span = seen(atif.as_bytes(), true).unwrap().span.unwrap();
        let at = |t| crate::records::timestamp::parse_rfc3339(t).unwrap();
        assert_eq!(
            span,
            (at("2026-01-01T00:00:04Z"), at("2026-01-01T00:00:10Z"))
        );
    }

    #[test]
    fn roles_steps_and_tokens_of_the_common_shapes() {
        // OpenAI chat
        let (role, steps, tokens) = look(
            r#"{"role":"assistant","content":"hi \"role\":\"user\" {[","usage":{"prompt_tokens":10,"completion_tokens":5}}"#,
        );
        assert_eq!(role.as_deref(), Some("assistant"));
        assert_eq!(steps, Turn::Model);
        let want = Tokens {
            input: 10,
            output: 5,
            total: 15,
        };
        assert_eq!(tokens, Some(want));
        // Claude Code: the role under `message`, usage there too.
        let (role, steps, tokens) = look(
            r#"{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"x"}],"usage":{"input_tokens":3,"output_tokens":4,"total_tokens":9}}}"#,
        );
        assert_eq!((role.as_deref(), steps), (Some("assistant"), Turn::Model));
        assert_eq!(tokens.unwrap().total, 9);
        // Codex, wrapped
        let (role, steps, tokens) =
            look(r#"{"type":"response_item","payload":{"type":"function_call","name":"sh"}}"#);
        assert_eq!(
            (role.as_deref(), steps, tokens),
            (Some("response_item"), Turn::Model, None)
        );
        // An escaped role, nested values of every kind skipped
        let (role, _, _) =
            look(r#" { "a" : [1, {"b": [true, null, -1.5e3]}], "role" : "us\u0065r" } "#);
        assert_eq!(role.as_deref(), Some("user"));
        // ATIF
        let atif = r#"{"schema_version":"ATIF-v1.4","steps":[{"source":"user"},{"source":"agent","metrics":{"prompt_tokens":7,"completion_tokens":2}},{"source":"agent"}]}"#;
        assert_eq!(seen(atif.as_bytes(), true).unwrap().steps, 2);
        let (role, steps, tokens) = look(atif);
        assert_eq!(
            (role.as_deref(), steps),
            (Some("trajectory"), Turn::Neither)
        );
        assert_eq!(tokens.unwrap().total, 9);
        // Not an object at all, and odd values where strings were expected
        assert!(seen(b"[1,2]", true).is_none());
        let (role, _, tokens) = look(r#"{"role":{"x":1},"usage":"none","type":7}"#);
        assert_eq!((role, tokens), (None, None));
    }

    /// What a record adds, however it was found.
    fn effect(seen: Option<Seen<'_>>) -> String {
        let s = seen.unwrap_or_default();
        format!(
            "{:?} {:?} {} {:?} {:?} {:?}",
            s.role, s.turn, s.steps, s.tokens, s.so_far, s.review
        )
    }

    #[test]
    fn landmarks_from_the_scan_give_what_a_walk_of_the_record_gives() {
        let records = [
            r#"{"role":"assistant","content":"hi \"role\":\"user\" {[","usage":{"prompt_tokens":10,"completion_tokens":5}}"#,
            r#"{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"x"}],"usage":{"input_tokens":3,"output_tokens":4,"total_tokens":9}}}"#,
            r#"{"type":"response_item","payload":{"type":"function_call","name":"sh"}}"#,
            r#" { "a" : [1, {"b": [true, null, -1.5e3]}], "role" : "us\u0065r" } "#,
            r#"{"schema_version":"ATIF-v1.4","steps":[{"source":"agent","metrics":{"prompt_tokens":7}}]}"#,
            r#"{"schema_version":"ATIF-v1.4","schema_version":"other","role":"user"}"#,
            r#"{"role":{"x":1},"usage":"none","type":7}"#,
            r#"{"message":{"role":"user"},"message":"text","usage":{"total_tokens":4}}"#,
            r#"{"message":"text","payload":{"role":"tool"}}"#,
            r#"{"payload":{"role":"tool"},"message":{"type":"assistant"}}"#,
            r#"{"role":"user","role":"assistant","usage":{"input_tokens":1},"usage":{"output_tokens":2}}"#,
            r#"{"message":{},"type":"user"}"#,
            r#"{"message":{"usage":{"prompt_tokens":"x","completion_tokens":2}}}"#,
            r#"{"ts":"2026-01-01T00:00:00Z","role":"tool","content":"wwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwww"}"#,
            r#"[{"role":"user"}]"#,
            r#"{"rol\u0065":"assistant","mess\u0061ge":{"usage":{"total_tokens":3}}}"#,
            r#""a string""#,
            r#"{}"#,
            r#"{"type":"event_msg","payload":{"type":"token_count","info":{"total_token_usage":{"input_tokens":5,"output_tokens":2}}}}"#,
            r#"{"payload":{"info":{"total_token_usage":{"total_tokens":3}},"type":"token_count"},"type":"event_msg"}"#,
            r#"{"info":{"total_token_usage":{"total_tokens":3}},"type":"token_count"}"#,
            r#"{"role":"user","content":[{"type":"tool_result","is_error":true,"content":[{"type":"text","text":"no"}]},{"type":"text","text":"go on"}],"model":"m","score":1,"reward":0.5}"#,
            r#"{"role":"assistant","content":null,"tool_calls":[{"id":"1"},{"id":"2"}],"finish_reason":"tool_calls","total_cost_usd":0.25,"score":"high"}"#,
            r#"{"type":"response_item","payload":{"type":"function_call_output","call_id":"c","output":"{\"output\":\"x\",\"metadata\":{\"exit_code\":2}}"}}"#,
            r#"{"type":"session_meta","payload":{"id":"s","originator":"codex_cli_rs","model":"gpt-5"}}"#,
            r#"{"type":"assistant","message":{"role":"assistant","model":"claude","stop_reason":"end_turn","content":[{"type":"tool_use","id":"t"}]},"content":"top"}"#,
        ];
        let deep = format!(
            r#"{{"deep":{}1{},"role":"user"}}"#,
            "[".repeat(300),
            "]".repeat(300)
        );
        let mut scanner = crate::records::scan::RecordScanner::default();
        for record in records.iter().copied().chain([deep.as_str()]) {
            let bytes = record.as_bytes();
            let facts = scanner
                .facts(bytes)
                .unwrap_or_else(|| panic!("valid: {record}"));
            assert_eq!(
                effect(seen_at(bytes, &facts.landmarks(), true)),
                effect(seen(bytes, true)),
                "{record}"
            );
        }
    }
}
