//! What looking into a run's records finds, record by record in the
//! run's order: roles, steps, tokens, and what a reviewer reads first.

use std::collections::BTreeMap;

use serde::Serialize;

use super::cut;
use super::peek::{self, Review, Seen, Text, Turn};
use super::{RunSummary, Tokens};
use crate::records::scan::Landmarks;
use crate::records::timestamp::Micros;

/// A run's task is cut at this many characters.
pub const TASK_CHARS_AT_MOST: usize = 200;

/// How a run ended, where a record says it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Outcome {
    /// The last top-level `reward` or `score` (ATIF: the trajectory's).
    pub score: Option<f64>,
    /// Why the model stopped in its last turn that says so.
    pub stop: Option<String>,
    /// `total_cost_usd` (ATIF: `final_metrics.total_cost_usd`).
    pub cost_usd: Option<f64>,
}

impl Outcome {
    /// Each of its figures, else `other`'s.
    pub(super) fn or(self, other: Outcome) -> Outcome {
        Outcome {
            score: self.score.or(other.score),
            stop: self.stop.or(other.stop),
            cost_usd: self.cost_usd.or(other.cost_usd),
        }
    }
}

/// What looking found: per run (by place), and roles.
#[derive(Default)]
pub(super) struct Looked {
    pub runs: Vec<RunLooked>,
    pub roles: BTreeMap<String, u64>,
}

#[derive(Default, Clone)]
pub(super) struct RunLooked {
    steps: u64,
    tokens: Option<Tokens>,
    /// The largest count of the run's tokens so far a record carried.
    so_far: Option<Tokens>,
    /// The earliest and latest time inside its records.
    pub span: Option<(Micros, Micros)>,
    /// The model spoke last: its next record goes on the same step.
    speaking: bool,
    /// The first record on either side: whether the model spoke in it
    /// (`None` before one).
    opening: Option<bool>,
    task: Option<String>,
    model: Option<String>,
    agent: Option<String>,
    tool_calls: u64,
    tool_errors: u64,
    outcome: Outcome,
}

impl RunLooked {
    /// Takes in one record, the run's next.
    fn add(&mut self, seen: Seen<'_>) {
        self.steps += seen.steps;
        match seen.turn {
            Turn::Model if !self.speaking => {
                self.steps += 1;
                self.speaking = true;
            }
            Turn::Input => self.speaking = false,
            _ => {}
        }
        if seen.turn != Turn::Neither && self.opening.is_none() {
            self.opening = Some(self.speaking);
        }
        self.tokens = Tokens::sum(self.tokens, seen.tokens);
        self.so_far = larger(self.so_far, seen.so_far);
        self.span = wider(self.span, seen.span);
        if let Some(review) = seen.review {
            self.review(*review, seen.turn);
        }
    }

    /// Takes in what a record says a reviewer reads first.
    fn review(&mut self, review: Review<'_>, turn: Turn) {
        if self.task.is_none() {
            let asked = review.asked.and_then(Text::decode);
            self.task = asked.filter(|t| !is_context(t)).as_deref().and_then(task);
        }
        if self.model.is_none() {
            self.model = named(review.model);
        }
        if self.agent.is_none() {
            self.agent = named(review.agent);
        }
        self.tool_calls = self.tool_calls.saturating_add(review.tool_calls);
        self.tool_errors = self.tool_errors.saturating_add(review.tool_errors);
        let stop = review.stop.filter(|_| turn == Turn::Model);
        self.outcome = Outcome {
            score: review.score,
            stop: named(stop),
            cost_usd: review.cost_usd,
        }
        .or(std::mem::take(&mut self.outcome));
    }

    /// Takes in the same run's records looked into elsewhere (another
    /// part of the plan, or the other thread): counts add up, the first
    /// texts found stay.
    fn absorb(&mut self, other: RunLooked) {
        self.steps += other.steps;
        self.tokens = Tokens::sum(self.tokens, other.tokens);
        self.so_far = larger(self.so_far, other.so_far);
        self.span = wider(self.span, other.span);
        self.task = self.task.take().or(other.task);
        self.model = self.model.take().or(other.model);
        self.agent = self.agent.take().or(other.agent);
        self.tool_calls = self.tool_calls.saturating_add(other.tool_calls);
        self.tool_errors = self.tool_errors.saturating_add(other.tool_errors);
        self.outcome = std::mem::take(&mut self.outcome).or(other.outcome);
    }

    /// Takes in the records that came after this one's, looked into
    /// elsewhere: what a single look at all of them in order finds (a
    /// step going on across the seam is counted once).
    fn then(&mut self, later: RunLooked) {
        let seam = self.speaking && later.opening == Some(true);
        let (opening, speaking) = (later.opening, later.speaking);
        // The last score and stop reason are the later ones.
        let outcome = later.outcome.clone();
        self.absorb(later);
        self.steps = self.steps.saturating_sub(u64::from(seam));
        if opening.is_some() {
            self.speaking = speaking;
        }
        self.opening = self.opening.or(opening);
        self.outcome = outcome.or(std::mem::take(&mut self.outcome));
    }

    /// Writes what was found into the run's summary.
    pub fn fill(self, summary: &mut RunSummary) {
        summary.steps = self.steps;
        // The tokens its records carried, and the most any counted so far.
        summary.tokens = Tokens::sum(self.tokens, self.so_far);
        summary.task = self.task;
        summary.model = self.model;
        summary.agent = self.agent;
        summary.tool_calls = self.tool_calls;
        summary.tool_errors = self.tool_errors;
        summary.outcome = self.outcome;
    }
}

/// A model, agent or stop reason a record names, cut as a facet value
/// is; an empty one names nothing (and cannot be filtered on).
fn named(value: Option<std::borrow::Cow<'_, str>>) -> Option<String> {
    let value = value?;
    let value = value.trim();
    (!value.is_empty()).then(|| cut::key(value).into_owned())
}

fn larger(a: Option<Tokens>, b: Option<Tokens>) -> Option<Tokens> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if b.total > a.total { b } else { a }),
        (a, b) => a.or(b),
    }
}

fn wider(a: Option<(Micros, Micros)>, b: Option<(Micros, Micros)>) -> Option<(Micros, Micros)> {
    match (a, b) {
        (Some(a), Some(b)) => Some((a.0.min(b.0), a.1.max(b.1))),
        (a, b) => a.or(b),
    }
}

/// User texts an agent writes before the task (or between tasks): its
/// context, instructions and local commands, not what was asked. Codex
/// writes the first three; Claude Code the others.
const CONTEXT_OPENINGS: [&str; 9] = [
    "<environment_context>",
    "<user_instructions>",
    "# AGENTS.md instructions",
    "Caveat: ",
    "<command-name>",
    "<command-message>",
    "<local-command-stdout>",
    "<local-command-stderr>",
    "<system-reminder>",
];

fn is_context(text: &str) -> bool {
    let text = text.trim_start();
    CONTEXT_OPENINGS.iter().any(|o| text.starts_with(o))
}

/// [`is_context`] of a JSON string's raw bytes (escapes as written): its
/// leading white space, escaped or not, skipped.
pub(super) fn is_context_raw(mut raw: &[u8]) -> bool {
    loop {
        match raw {
            [b' ' | b'\t' | b'\n' | b'\r', rest @ ..] => raw = rest,
            [b'\\', b'n' | b't' | b'r', rest @ ..] => raw = rest,
            _ => break,
        }
    }
    CONTEXT_OPENINGS
        .iter()
        .any(|o| raw.starts_with(o.as_bytes()))
}

/// A user message as a task: its words on one line, cut at
/// [`TASK_CHARS_AT_MOST`] characters; `None` when it has no words.
fn task(text: &str) -> Option<String> {
    let mut out = String::new();
    let (mut chars, mut space) = (0, false);
    for c in text.chars() {
        if c.is_whitespace() {
            space = chars > 0;
            continue;
        }
        // Room for this character (and the space before it) or not.
        if chars + usize::from(space) >= TASK_CHARS_AT_MOST {
            out.push('…');
            return Some(out);
        }
        if std::mem::take(&mut space) {
            out.push(' ');
            chars += 1;
        }
        out.push(c);
        chars += 1;
    }
    (chars > 0).then_some(out)
}

impl Looked {
    /// Takes in what another looker found of the records that came after
    /// this one's, run by run (by place).
    pub fn then(&mut self, later: Looked) {
        self.add_roles(&later.roles);
        if self.runs.len() < later.runs.len() {
            self.runs.resize(later.runs.len(), RunLooked::default());
        }
        for (mine, theirs) in self.runs.iter_mut().zip(later.runs) {
            mine.then(theirs);
        }
    }

    fn add_roles(&mut self, roles: &BTreeMap<String, u64>) {
        for (role, n) in roles {
            match self.roles.get_mut(role) {
                Some(mine) => *mine += n,
                None => {
                    self.roles.insert(role.clone(), *n);
                }
            }
        }
    }

    /// Looks into one record of the run at `at`, from its landmarks when
    /// the read found them.
    pub fn look(&mut self, at: usize, bytes: &[u8], marks: Option<&Landmarks>) {
        let task = self.runs.get(at).is_none_or(|r| r.task.is_none());
        let seen = match marks {
            Some(marks) => peek::seen_at(bytes, marks, task),
            None => peek::seen(bytes, task),
        };
        let Some(mut seen) = seen else {
            return;
        };
        // A role is a word; a long one is some writer's text, cut (and
        // counted with the others it then reads the same as).
        if let Some(role) = seen.role.take() {
            let role = cut::key(&role);
            match self.roles.get_mut(&*role) {
                Some(n) => *n += 1,
                None => {
                    self.roles.insert(role.into_owned(), 1);
                }
            }
        }
        if self.runs.len() <= at {
            self.runs.resize(at + 1, RunLooked::default());
        }
        self.runs[at].add(seen);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One run of `records`, in order, looked into with the read's
    /// landmarks and without, and in two parts at every place: each must
    /// find the same.
    fn run(records: &[&str]) -> RunSummary {
        let mut scanner = crate::records::scan::RecordScanner::default();
        let mut looked = |records: &[&str], marks: bool| {
            let mut looked = Looked::default();
            for record in records {
                let facts = scanner.facts(record.as_bytes()).expect(record);
                let marks = marks.then(|| facts.landmarks());
                looked.look(0, record.as_bytes(), marks.as_ref());
            }
            looked
        };
        let summary = |looked: Looked| {
            let mut s = super::super::tests::empty_summary();
            looked
                .runs
                .into_iter()
                .next()
                .unwrap_or_default()
                .fill(&mut s);
            s
        };
        let whole = summary(looked(records, false));
        assert_eq!(
            summary(looked(records, true)),
            whole,
            "the landmarks find what a walk finds"
        );
        for cut in 0..=records.len() {
            let mut first = looked(&records[..cut], true);
            first.then(looked(&records[cut..], true));
            assert_eq!(
                summary(first),
                whole,
                "looked into in two parts, cut at {cut}"
            );
        }
        whole
    }

    fn review(s: &RunSummary) -> (u64, Option<&str>, Option<&str>, u64, u64) {
        (
            s.steps,
            s.task.as_deref(),
            s.model.as_deref(),
            s.tool_calls,
            s.tool_errors,
        )
    }

    #[test]
    fn every_shape_gives_its_task_model_steps_tool_calls_errors_and_outcome() {
        let openai = run(&[
            r#"{"role":"system","content":"be brief"}"#,
            r#"{"role":"user","content":"Fix\nthe bug","model":"gpt-4o"}"#,
            r#"{"role":"assistant","content":null,"tool_calls":[{"id":"1"},{"id":"2"}],"finish_reason":"tool_calls"}"#,
            r#"{"role":"tool","tool_call_id":"1","content":"ok"}"#,
            r#"{"role":"tool","tool_call_id":"2","content":"ok"}"#,
            r#"{"role":"assistant","content":"done","finish_reason":"stop","reward":0.5}"#,
        ]);
        assert_eq!(
            review(&openai),
            (2, Some("Fix the bug"), Some("gpt-4o"), 2, 0)
        );
        assert_eq!(openai.outcome.stop.as_deref(), Some("stop"));
        assert_eq!(openai.outcome.score, Some(0.5));

        let anthropic = run(&[
            r#"{"role":"user","content":[{"type":"text","text":"Why is CI red?"}]}"#,
            r#"{"role":"assistant","model":"claude-x","content":[{"type":"text","text":"Looking"},{"type":"tool_use","id":"t1"}],"stop_reason":"tool_use"}"#,
            r#"{"role":"tool","content":[{"type":"tool_result","tool_use_id":"t1","is_error":true,"content":"boom"}]}"#,
            r#"{"role":"assistant","content":[{"type":"text","text":"It broke."}],"stop_reason":"end_turn"}"#,
        ]);
        assert_eq!(
            review(&anthropic),
            (2, Some("Why is CI red?"), Some("claude-x"), 1, 1)
        );
        assert_eq!(anthropic.outcome.stop.as_deref(), Some("end_turn"));

        // One response written as several records is one step.
        let claude_code = run(&[
            r#"{"type":"user","message":{"role":"user","content":"Rename the flag"}}"#,
            r#"{"type":"assistant","message":{"id":"m1","role":"assistant","model":"claude-sonnet","content":[{"type":"thinking","thinking":"hm"}],"stop_reason":null}}"#,
            r#"{"type":"assistant","message":{"id":"m1","role":"assistant","content":[{"type":"tool_use","id":"a"}]}}"#,
            r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","is_error":true}]}}"#,
            r#"{"type":"assistant","message":{"id":"m2","role":"assistant","content":[{"type":"tool_use","id":"b"}]}}"#,
            r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"b","is_error":false}]}}"#,
            r#"{"type":"assistant","message":{"id":"m3","role":"assistant","content":[{"type":"text","text":"Renamed."}],"stop_reason":"end_turn"}}"#,
        ]);
        assert_eq!(
            review(&claude_code),
            (3, Some("Rename the flag"), Some("claude-sonnet"), 2, 1)
        );
        assert_eq!(claude_code.outcome.stop.as_deref(), Some("end_turn"));

        let item = |payload: &str| format!(r#"{{"type":"response_item","payload":{payload}}}"#);
        let codex: Vec<String> = [
            r#"{"type":"session_meta","payload":{"id":"s","originator":"codex_cli_rs"}}"#.to_string(),
            r#"{"type":"turn_context","payload":{"cwd":"/w","model":"gpt-5-codex"}}"#.to_string(),
            item(r#"{"type":"message","role":"user","content":[{"type":"input_text","text":"<environment_context>cwd</environment_context>"}]}"#),
            item(r#"{"type":"message","role":"user","content":[{"type":"input_text","text":"\n# AGENTS.md instructions for /w"},{"type":"input_text","text":"List the files"}]}"#),
            item(r#"{"type":"reasoning","summary":[]}"#),
            item(r#"{"type":"function_call","name":"shell","call_id":"c1"}"#),
            r#"{"type":"event_msg","payload":{"type":"token_count","info":null}}"#.to_string(),
            item(r#"{"type":"function_call_output","call_id":"c1","output":"{\"output\":\"\",\"metadata\":{\"exit_code\":1}}"}"#),
            item(r#"{"type":"function_call","name":"shell","call_id":"c2"}"#),
            item(r#"{"type":"function_call_output","call_id":"c2","output":"{\"output\":\"a\",\"metadata\":{\"exit_code\":0}}"}"#),
            item(r#"{"type":"message","role":"assistant","content":[{"type":"output_text","text":"a"}]}"#),
        ]
        .into();
        let codex = run(&codex.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(
            review(&codex),
            (3, Some("List the files"), Some("gpt-5-codex"), 2, 1)
        );
        assert_eq!(codex.agent.as_deref(), Some("codex_cli_rs"));

        // An empty model names none; a score that is no number leaves the
        // reward in place.
        let odd = run(&[
            r#"{"role":"user","content":"go","model":" "}"#,
            r#"{"role":"assistant","content":"ok","model":"m","reward":1,"score":"n/a"}"#,
        ]);
        assert_eq!(
            (odd.model.as_deref(), odd.outcome.score),
            (Some("m"), Some(1.0))
        );

        let atif = run(&[
            r#"{"schema_version":"ATIF-v1.4","agent":{"name":"harbor","model_name":"gpt-5"},"reward":1,"steps":[{"source":"user","message":"Solve it"},{"source":"agent","tool_calls":[{"tool_call_id":"x"}],"observation":{"results":[{"source_call_id":"x","is_error":true}]}},{"source":"agent","message":"ok"}],"final_metrics":{"total_cost_usd":0.5}}"#,
        ]);
        assert_eq!(review(&atif), (2, Some("Solve it"), Some("gpt-5"), 1, 1));
        assert_eq!(atif.agent.as_deref(), Some("harbor"));
        assert_eq!(
            (atif.outcome.score, atif.outcome.cost_usd),
            (Some(1.0), Some(0.5))
        );
    }

    #[test]
    fn a_task_is_the_words_of_a_message_on_one_line_cut_at_its_bound() {
        assert_eq!(task("  fix\n\tthe   build "), Some("fix the build".into()));
        assert_eq!(task(" \n "), None);
        let long = "é".repeat(TASK_CHARS_AT_MOST + 5);
        let cut = task(&long).unwrap();
        assert_eq!(cut.chars().count(), TASK_CHARS_AT_MOST + 1);
        assert!(cut.ends_with('…'));
        assert_eq!(
            task(&"é".repeat(TASK_CHARS_AT_MOST))
                .unwrap()
                .chars()
                .count(),
            TASK_CHARS_AT_MOST
        );
    }
}
