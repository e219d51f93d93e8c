//! A run read as its steps, to set two runs side by side: each step is a
//! model response with the tool calls it made and the results they got.
//! A step starts where the runs' tally counts one ([`Turn`]: the model
//! speaks after what it answers to), so a comparison and `/api/runs`
//! agree on how many steps a run has; an ATIF trajectory's agent steps
//! are its steps.
//!
//! Each text a step keeps (the model's words, a call's arguments, a
//! result's output) is cut at [`TEXT_CHARS_AT_MOST`] characters, and a
//! step lists at most [`LISTED_AT_MOST`] calls and results: a step of a
//! comparison is read next to its twin, not in full (the Run page shows
//! it whole).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use serde::Serialize;
use serde_json::{Map, Value};

use super::cut::{self, CUT_MARK};
use super::peek::{self, Turn, is_codex_call, is_codex_output};

/// Characters kept of each text of a step.
pub const TEXT_CHARS_AT_MOST: usize = 1000;
/// Calls (and results) a step lists; more are counted in
/// `unlisted_calls` (`unlisted_results`).
pub const LISTED_AT_MOST: usize = 16;
/// Records longer than this add no content to their step (each is parsed
/// whole to be read, and a parsed record is many times its size).
pub const CONTENT_BYTES_AT_MOST: usize = 1 << 20;

/// One step of a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Step {
    /// The run's record it starts at, counted from 1 in the order the Run
    /// page reads them (failed records included): `/run?…#L{record}`.
    pub record: u64,
    /// What the model said in it, its texts joined.
    pub said: Option<String>,
    pub calls: Vec<Call>,
    pub results: Vec<Answered>,
    /// Calls, and results, past [`LISTED_AT_MOST`]: counted, not listed.
    pub unlisted_calls: u64,
    pub unlisted_results: u64,
}

/// A tool call: the tool's name and its arguments as compact JSON (a
/// text that holds JSON is read as that JSON).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Call {
    pub name: String,
    pub arguments: String,
    /// A hash of the whole arguments: two calls are compared by it, not by
    /// what is kept of them.
    #[serde(skip)]
    pub whole: u64,
}

/// A tool result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Answered {
    /// The name of the call it answers, where the run names that call.
    pub call: Option<String>,
    /// Marked as failed (as the runs' `tool_errors` count it).
    pub error: bool,
    pub output: String,
    /// A hash of the whole output (see [`Call::whole`]).
    #[serde(skip)]
    pub whole: u64,
}

/// Reads a run's records in order and keeps its steps `from..from+limit`
/// (counted from 1), counting them all.
pub struct Stepper {
    from: u64,
    limit: u64,
    /// Records read, and steps begun.
    pub records: u64,
    pub steps: u64,
    kept: Vec<Step>,
    speaking: bool,
    /// The names of the listed calls of the step being read, by id.
    names: HashMap<String, String>,
}

impl Stepper {
    pub fn new(from: u64, limit: u64) -> Stepper {
        Stepper {
            from: from.max(1),
            limit,
            records: 0,
            steps: 0,
            kept: Vec::new(),
            speaking: false,
            names: HashMap::new(),
        }
    }

    /// The steps kept, in order.
    pub fn into_steps(self) -> Vec<Step> {
        self.kept
    }

    /// Counts a record that is in no step: failed, or too large to look
    /// into (as the tally counts them).
    pub fn skip(&mut self) {
        self.records += 1;
    }

    /// Takes in the run's next record, valid JSON.
    pub fn add(&mut self, bytes: &[u8]) {
        self.records += 1;
        let Some(seen) = peek::seen(bytes, false) else {
            return;
        };
        let (turn, agent_steps) = (seen.turn, seen.steps);
        if seen.role.as_deref() == Some("trajectory") {
            drop(seen);
            return self.add_atif(bytes, agent_steps);
        }
        drop(seen);
        match turn {
            Turn::Model if !self.speaking => {
                self.begin();
                self.speaking = true;
            }
            Turn::Input => self.speaking = false,
            _ => {}
        }
        if self.steps == 0 || !self.keeping() {
            return;
        }
        if let Some(Value::Object(object)) = content(bytes) {
            self.take(Parts::of(&object, turn));
        }
    }

    /// An ATIF trajectory: each of its `agent_steps` (as the tally counts
    /// them) is a step of its own; it is on neither side of the run's
    /// conversation.
    fn add_atif(&mut self, bytes: &[u8], agent_steps: u64) {
        let (first, last) = (self.steps + 1, self.steps + agent_steps);
        let wanted =
            agent_steps > 0 && last >= self.from && first < self.from.saturating_add(self.limit);
        let value = if wanted { content(bytes) } else { None };
        let steps = value
            .as_ref()
            .and_then(|v| v.as_object())
            .and_then(trajectory);
        let mut agents = steps
            .into_iter()
            .flatten()
            .filter_map(Value::as_object)
            .filter(|step| str_at(step, "source") == Some("agent"));
        for _ in 0..agent_steps {
            self.begin();
            let step = agents.next();
            if !self.keeping() {
                continue;
            }
            let Some(step) = step else {
                continue;
            };
            let mut parts = Parts::default();
            parts.said(step.get("message"));
            for call in step
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let name = call.get("function_name").and_then(Value::as_str);
                let id = call.get("tool_call_id").and_then(Value::as_str);
                parts.call(id, name, call.get("arguments"));
            }
            let results = step.get("observation").and_then(|o| o.get("results"));
            for result in results.and_then(Value::as_array).into_iter().flatten() {
                let error = result.get("is_error").and_then(Value::as_bool) == Some(true);
                let id = result.get("source_call_id").and_then(Value::as_str);
                parts.result(id, error, result.get("content"));
            }
            self.take(parts);
        }
    }

    fn begin(&mut self) {
        self.steps += 1;
        self.names.clear();
        if self.keeping() {
            self.kept.push(Step {
                record: self.records,
                ..Step::default()
            });
        }
    }

    fn keeping(&self) -> bool {
        self.steps >= self.from && self.steps - self.from < self.limit
    }

    /// Adds a record's parts to the step it falls in (none before the
    /// first, or outside those kept).
    fn take(&mut self, parts: Parts) {
        if self.steps == 0 || !self.keeping() {
            return;
        }
        let Some(step) = self.kept.last_mut() else {
            return;
        };
        if let Some(text) = parts.said {
            let joined = match step.said.take() {
                Some(before) => before + "\n" + &text,
                None => text,
            };
            step.said = Some(clip(&joined));
        }
        for (id, call) in parts.calls {
            if step.calls.len() >= LISTED_AT_MOST {
                step.unlisted_calls += 1;
                continue;
            }
            if let Some(id) = id {
                self.names.insert(id, call.name.clone());
            }
            step.calls.push(call);
        }
        for (id, mut result) in parts.results {
            if step.results.len() >= LISTED_AT_MOST {
                step.unlisted_results += 1;
                continue;
            }
            result.call = id.and_then(|id| self.names.get(&id).cloned());
            step.results.push(result);
        }
    }
}

/// The steps of an ATIF trajectory record.
fn trajectory(object: &Map<String, Value>) -> Option<&Vec<Value>> {
    let version = str_at(object, "schema_version")?;
    if !version.starts_with("ATIF-") {
        return None;
    }
    object.get("steps")?.as_array()
}

fn str_at<'a>(object: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    object.get(key).and_then(Value::as_str)
}

/// What one record says: its side, its texts, calls and results.
#[derive(Default)]
struct Parts {
    turn: Turn,
    said: Option<String>,
    calls: Vec<(Option<String>, Call)>,
    results: Vec<(Option<String>, Answered)>,
}

impl Parts {
    /// The parts of a chat message, an Anthropic message, a Claude Code
    /// line or a Codex rollout line.
    /// `turn`: its side, as the tally reads it.
    fn of(object: &Map<String, Value>, turn: Turn) -> Parts {
        let inner = ["message", "payload"]
            .iter()
            .find_map(|key| object.get(*key).and_then(Value::as_object));
        let inner_str = |key| inner.and_then(|inner| str_at(inner, key));
        let named = (str_at(object, "role").or(inner_str("role")))
            .or(str_at(object, "type"))
            .or(inner_str("type"));
        let payload = inner_str("type").unwrap_or("");
        let mut parts = Parts {
            turn,
            ..Parts::default()
        };
        for part in std::iter::once(object).chain(inner) {
            parts.message(part, named);
        }
        if let Some(inner) = inner {
            parts.codex(inner, payload);
        }
        parts
    }

    /// A message's `content` and `tool_calls`; `role` says whose it is.
    fn message(&mut self, object: &Map<String, Value>, role: Option<&str>) {
        let content = object.get("content");
        if matches!(role, Some("tool" | "function")) {
            if let Some(content) = content {
                let id = str_at(object, "tool_call_id");
                self.result(id, false, Some(content));
            }
        } else if content.is_some_and(Value::is_string) {
            if self.turn == Turn::Model {
                self.said(content);
            }
        } else if let Some(Value::Array(items)) = content {
            for item in items {
                self.content_part(item);
            }
        }
        for call in object
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let function = call.get("function").unwrap_or(call);
            let name = function.get("name").and_then(Value::as_str);
            let id = call.get("id").and_then(Value::as_str);
            self.call(id, name, function.get("arguments"));
        }
    }

    /// One part of a `content` array.
    fn content_part(&mut self, item: &Value) {
        let kind = item.get("type").and_then(Value::as_str).unwrap_or("");
        let id = |key| item.get(key).and_then(Value::as_str);
        match kind {
            "text" | "output_text" if self.turn == Turn::Model => self.said(item.get("text")),
            "tool_use" | "server_tool_use" => {
                let name = item.get("name").and_then(Value::as_str);
                self.call(id("id"), name, item.get("input"));
            }
            "tool_result" => {
                let error = item.get("is_error").and_then(Value::as_bool) == Some(true);
                self.result(id("tool_use_id"), error, item.get("content"));
            }
            _ => {}
        }
    }

    /// A Codex rollout line's call or output (its `payload`).
    fn codex(&mut self, payload: &Map<String, Value>, kind: &str) {
        let id = str_at(payload, "call_id").or(str_at(payload, "id"));
        if is_codex_call(kind) {
            let name = match kind {
                "local_shell_call" => Some("local_shell"),
                "web_search_call" => Some("web_search"),
                _ => str_at(payload, "name"),
            };
            let arguments = ["arguments", "input", "action"]
                .iter()
                .find_map(|key| payload.get(*key));
            self.call(id, name, arguments);
        } else if kind.ends_with("_call_output") {
            // An exit code fails only the outputs the tally counts so.
            let (error, output) = codex_output(payload.get("output"));
            self.result(id, error && is_codex_output(kind), output.as_ref());
        } else if kind == "reasoning" {
            let summary = payload.get("summary").and_then(Value::as_array);
            for item in summary.into_iter().flatten() {
                self.said(item.get("text"));
            }
        }
    }

    fn said(&mut self, text: Option<&Value>) {
        let text = match text {
            Some(Value::String(text)) => text.clone(),
            Some(Value::Array(parts)) => {
                let texts = parts.iter().filter_map(|p| p.get("text")?.as_str());
                texts.collect::<Vec<_>>().join("\n")
            }
            _ => return,
        };
        if text.trim().is_empty() {
            return;
        }
        self.said = Some(match self.said.take() {
            Some(before) => before + "\n" + &text,
            None => text,
        });
    }

    fn call(&mut self, id: Option<&str>, name: Option<&str>, arguments: Option<&Value>) {
        let arguments = compact(arguments);
        let call = Call {
            name: cut::key(name.unwrap_or("?")).into_owned(),
            whole: hash(&arguments),
            arguments: clip(&arguments),
        };
        self.calls.push((id_of(id), call));
    }

    fn result(&mut self, id: Option<&str>, error: bool, content: Option<&Value>) {
        let output = output_text(content);
        let answered = Answered {
            call: None,
            error,
            whole: hash(&output),
            output: clip(&output),
        };
        self.results.push((id_of(id), answered));
    }
}

/// A Codex output: often JSON text (`{"output": …, "metadata":
/// {"exit_code": N}}`), failed when its exit code is not 0.
fn codex_output(output: Option<&Value>) -> (bool, Option<Value>) {
    let Some(Value::String(text)) = output else {
        return (false, output.cloned());
    };
    if let Ok(Value::Object(inner)) = serde_json::from_str::<Value>(text) {
        let code = inner.get("metadata").and_then(|m| m.get("exit_code"));
        let error = code.and_then(Value::as_i64).is_some_and(|c| c != 0);
        if let Some(output) = inner.get("output") {
            return (error, Some(output.clone()));
        }
        return (error, Some(Value::String(text.clone())));
    }
    (false, Some(Value::String(text.clone())))
}

/// A result's content as text: a text as it is, parts' texts joined, any
/// other value as compact JSON.
fn output_text(content: Option<&Value>) -> String {
    match content {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts))
            if parts
                .iter()
                .all(|p| p.get("text").is_some_and(Value::is_string) || p.is_string()) =>
        {
            let texts = parts
                .iter()
                .filter_map(|p| p.as_str().or_else(|| p.get("text")?.as_str()));
            texts.collect::<Vec<_>>().join("\n")
        }
        Some(other) => other.to_string(),
    }
}

/// Arguments as compact JSON: a text that holds JSON is that JSON (so two
/// runs that wrote the same arguments differently read the same).
fn compact(arguments: Option<&Value>) -> String {
    match arguments {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(text)) => match serde_json::from_str::<Value>(text) {
            Ok(value @ (Value::Object(_) | Value::Array(_))) => value.to_string(),
            _ => text.clone(),
        },
        Some(other) => other.to_string(),
    }
}

/// A record's JSON, when it is short enough to read for content (and
/// `serde_json` reads it: a record the tally reads may hold what it does
/// not, such as a lone surrogate escape).
fn content(bytes: &[u8]) -> Option<Value> {
    if bytes.len() > CONTENT_BYTES_AT_MOST {
        return None;
    }
    serde_json::from_slice(bytes).ok()
}

/// A call id, when it is short enough to be one.
fn id_of(id: Option<&str>) -> Option<String> {
    id.filter(|id| id.len() <= cut::KEY_CHARS_AT_MOST)
        .map(str::to_string)
}

fn hash(text: &str) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut hasher);
    hasher.finish()
}

/// `text` cut to [`TEXT_CHARS_AT_MOST`] characters and [`CUT_MARK`].
fn clip(text: &str) -> String {
    match text.char_indices().nth(TEXT_CHARS_AT_MOST) {
        Some((at, _)) => {
            let mut cut = text[..at].to_string();
            cut.push(CUT_MARK);
            cut
        }
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steps_of(lines: &[&str]) -> (Stepper, Vec<Step>) {
        let mut stepper = Stepper::new(1, 100);
        for line in lines {
            match serde_json::from_str::<Value>(line) {
                Ok(_) => stepper.add(line.as_bytes()),
                Err(_) => stepper.skip(),
            }
        }
        let kept = stepper.kept.clone();
        (stepper, kept)
    }

    #[test]
    fn every_shape_reads_as_steps_with_their_calls_and_results() {
        // Anthropic messages: two calls in one response, one failed.
        let (_, steps) = steps_of(&[
            r#"{"role":"user","content":"fix it"}"#,
            r#"{"role":"assistant","content":[{"type":"text","text":"Looking."},{"type":"tool_use","id":"t1","name":"bash","input":{"cmd":"ls"}},{"type":"tool_use","id":"t2","name":"read","input":{"path":"a"}}]}"#,
            r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"a b"},{"type":"tool_result","tool_use_id":"t2","is_error":true,"content":[{"type":"text","text":"no such file"}]}]}"#,
            r#"{"role":"assistant","content":"Done."}"#,
        ]);
        assert_eq!(steps.len(), 2);
        assert_eq!(steps[0].record, 2);
        assert_eq!(steps[0].said.as_deref(), Some("Looking."));
        assert_eq!(steps[0].calls[0].name, "bash");
        assert_eq!(steps[0].calls[0].arguments, r#"{"cmd":"ls"}"#);
        assert_eq!(steps[0].results[1].call.as_deref(), Some("read"));
        assert!(steps[0].results[1].error);
        assert_eq!(steps[0].results[1].output, "no such file");
        assert_eq!(steps[1].said.as_deref(), Some("Done."));

        // OpenAI chat: arguments as JSON text read as that JSON.
        let (_, steps) = steps_of(&[
            r#"{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"grep","arguments":"{\"q\": \"x\"}"}}]}"#,
            r#"{"role":"tool","tool_call_id":"c1","content":"3 matches"}"#,
        ]);
        assert_eq!(steps[0].calls[0].arguments, r#"{"q":"x"}"#);
        assert_eq!(steps[0].results[0].call.as_deref(), Some("grep"));
        assert_eq!(steps[0].results[0].output, "3 matches");

        // Claude Code: a response written as two records is one step.
        let (_, steps) = steps_of(&[
            r#"{"type":"user","message":{"role":"user","content":"go"}}"#,
            r#"{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"ok"}]}}"#,
            r#"{"type":"assistant","message":{"role":"assistant","content":[{"type":"tool_use","id":"u","name":"Edit","input":{}}]}}"#,
            r#"{"type":"system","content":"hook ran"}"#,
            r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"u","content":"edited"}]}}"#,
        ]);
        assert_eq!(steps.len(), 1);
        assert_eq!(steps[0].calls[0].name, "Edit");
        assert_eq!(steps[0].results[0].output, "edited");

        // Codex: each answered call is a step; a non-zero exit code fails.
        let (_, steps) = steps_of(&[
            r#"{"type":"session_meta","payload":{"originator":"codex"}}"#,
            r#"{"type":"response_item","payload":{"type":"function_call","name":"shell","arguments":"{\"command\":[\"ls\"]}","call_id":"k1"}}"#,
            r#"{"type":"response_item","payload":{"type":"function_call_output","call_id":"k1","output":"{\"output\":\"boom\",\"metadata\":{\"exit_code\":2}}"}}"#,
            r#"{"type":"event_msg","payload":{"type":"token_count"}}"#,
            r#"{"type":"response_item","payload":{"type":"reasoning","summary":[{"type":"summary_text","text":"think"}]}}"#,
            r#"{"type":"response_item","payload":{"type":"message","role":"assistant","content":[{"type":"output_text","text":"fixed"}]}}"#,
        ]);
        assert_eq!(steps.len(), 2);
        assert_eq!(steps[0].calls[0].arguments, r#"{"command":["ls"]}"#);
        assert!(steps[0].results[0].error);
        assert_eq!(steps[0].results[0].output, "boom");
        assert_eq!(steps[0].results[0].call.as_deref(), Some("shell"));
        assert_eq!(steps[1].said.as_deref(), Some("think\nfixed"));

        // ATIF: each agent step of the trajectory is a step.
        let (stepper, steps) = steps_of(&[
            r#"not json"#,
            r#"{"schema_version":"ATIF-v1.4","steps":[{"source":"user","message":"hi"},{"source":"agent","message":"running","tool_calls":[{"tool_call_id":"a","function_name":"run","arguments":{"x":1}}],"observation":{"results":[{"source_call_id":"a","content":"ok","is_error":true}]}},{"source":"agent","message":"bye"}]}"#,
        ]);
        assert_eq!((stepper.records, stepper.steps), (2, 2));
        assert_eq!(steps[0].record, 2);
        assert_eq!(steps[0].calls[0].name, "run");
        assert!(steps[0].results[0].error);
        assert_eq!(steps[0].results[0].call.as_deref(), Some("run"));
        assert_eq!(steps[1].said.as_deref(), Some("bye"));
    }

    #[test]
    fn a_record_serde_json_refuses_still_starts_its_step_as_the_tally_counts_it() {
        let mut stepper = Stepper::new(1, 10);
        stepper.add(br#"{"role":"user","content":"go"}"#);
        stepper.add(br#"{"role":"assistant","content":"cut emoji \ud83d"}"#);
        stepper.add(br#"{"role":"user","content":"again"}"#);
        stepper.add(br#"{"role":"assistant","content":"ok"}"#);
        assert_eq!((stepper.records, stepper.steps), (4, 2));
        let steps = stepper.into_steps();
        assert_eq!((steps[0].record, steps[0].said.as_deref()), (2, None));
        assert_eq!((steps[1].record, steps[1].said.as_deref()), (4, Some("ok")));
    }

    #[test]
    fn only_the_steps_asked_for_are_kept_and_long_texts_are_cut() {
        let long = "x".repeat(TEXT_CHARS_AT_MOST + 5);
        let mut stepper = Stepper::new(2, 1);
        for i in 0..4 {
            let said = if i == 1 {
                long.clone()
            } else {
                format!("turn {i}")
            };
            let said = serde_json::json!({"role": "assistant", "content": said}).to_string();
            stepper.add(said.as_bytes());
            stepper.add(br#"{"role": "user", "content": "go on"}"#);
        }
        assert_eq!((stepper.records, stepper.steps), (8, 4));
        let steps = stepper.into_steps();
        assert_eq!(steps.len(), 1);
        assert_eq!(steps[0].record, 3);
        let said = steps[0].said.as_deref().unwrap();
        assert_eq!(said.chars().count(), TEXT_CHARS_AT_MOST + 1);
        assert!(said.ends_with(CUT_MARK));
    }
}
