//! A record that is a whole ATIF trajectory: parsed (it is rare, and
//! small next to a run's lines), and summed up as a run of its own.

use std::borrow::Cow;

use serde::Deserialize;
use serde::de::IgnoredAny;

use super::Tokens;
use super::peek::{Review, Seen, Text, Turn};
use crate::records::timestamp::{Micros, parse_rfc3339};

/// What an ATIF trajectory adds to its run; `None` when it does not
/// have the trajectory's shape.
pub(super) fn seen(record: &[u8]) -> Option<Seen<'static>> {
    serde_json::from_slice::<Atif>(record).ok().map(Atif::seen)
}

/// A field of an unexpected shape is read as absent: a trajectory is
/// never thrown away for one of the fields a review reads.
fn lenient<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned + Default,
{
    let value = serde_json::Value::deserialize(d)?;
    Ok(T::deserialize(value).unwrap_or_default())
}

#[derive(Deserialize)]
struct Atif {
    #[serde(default)]
    steps: Vec<Step>,
    #[serde(default, deserialize_with = "lenient")]
    agent: Option<Agent>,
    #[serde(default, deserialize_with = "lenient")]
    final_metrics: Option<FinalMetrics>,
    /// Any JSON value: only a number is a score.
    #[serde(default)]
    reward: Option<serde_json::Value>,
    #[serde(default)]
    score: Option<serde_json::Value>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Agent {
    name: Option<serde_json::Value>,
    model_name: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct Step {
    #[serde(default)]
    source: Option<String>,
    #[serde(default)]
    metrics: Option<Metrics>,
    /// Any JSON value: a step whose time is not an RFC 3339 text has none.
    #[serde(default)]
    timestamp: Option<serde_json::Value>,
    /// A text, or parts: only a text is a task.
    #[serde(default)]
    message: Option<serde_json::Value>,
    #[serde(default, deserialize_with = "lenient")]
    tool_calls: Option<Vec<IgnoredAny>>,
    #[serde(default, deserialize_with = "lenient")]
    observation: Option<Observation>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Metrics {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Observation {
    #[serde(deserialize_with = "lenient")]
    results: Vec<ObservationResult>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ObservationResult {
    is_error: Option<serde_json::Value>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct FinalMetrics {
    total_cost_usd: Option<serde_json::Value>,
}

fn text(value: Option<serde_json::Value>) -> Option<Cow<'static, str>> {
    match value {
        Some(serde_json::Value::String(s)) => Some(Cow::Owned(s)),
        _ => None,
    }
}

fn number(value: Option<&serde_json::Value>) -> Option<f64> {
    value
        .and_then(serde_json::Value::as_f64)
        .filter(|f| f.is_finite())
}

impl Atif {
    /// Its agent steps, their token metrics and times, and what a
    /// reviewer reads first.
    fn seen(self) -> Seen<'static> {
        let mut tokens: Option<Tokens> = None;
        let mut agent_steps = 0;
        let mut span: Option<(Micros, Micros)> = None;
        let mut review = Review::default();
        for step in self.steps {
            let agent = step.source.as_deref() == Some("agent");
            agent_steps += u64::from(agent);
            if step.source.as_deref() == Some("user") && review.asked.is_none() {
                review.asked = text(step.message).map(Text::Decoded);
            }
            review.tool_calls += step.tool_calls.map_or(0, |c| c.len() as u64);
            if let Some(observation) = step.observation {
                review.tool_errors += observation
                    .results
                    .iter()
                    .filter(|r| r.is_error.as_ref().and_then(|e| e.as_bool()) == Some(true))
                    .count() as u64;
            }
            let at = step
                .timestamp
                .as_ref()
                .and_then(|t| t.as_str())
                .and_then(parse_rfc3339);
            if let Some(at) = at {
                span = Some(span.map_or((at, at), |(a, b)| (a.min(at), b.max(at))));
            }
            if let Some(m) = step.metrics {
                let (input, output) = (
                    m.prompt_tokens.unwrap_or(0),
                    m.completion_tokens.unwrap_or(0),
                );
                let sum = tokens.get_or_insert_with(Tokens::default);
                sum.input = sum.input.saturating_add(input);
                sum.output = sum.output.saturating_add(output);
                sum.total = sum.total.saturating_add(input.saturating_add(output));
            }
        }
        let agent = self.agent.unwrap_or_default();
        review.model = text(agent.model_name);
        review.agent = text(agent.name);
        review.score = number(self.reward.as_ref()).or(number(self.score.as_ref()));
        review.cost_usd = self
            .final_metrics
            .and_then(|m| number(m.total_cost_usd.as_ref()));
        Seen {
            role: Some(Cow::Borrowed("trajectory")),
            turn: Turn::Neither,
            steps: agent_steps,
            tokens,
            so_far: None,
            span,
            review: Some(Box::new(review)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_of_another_shape_does_not_lose_the_trajectory() {
        for odd in [
            r#""agent":"x","final_metrics":5"#,
            r#""agent":{"name":7}"#,
            r#""final_metrics":{"total_cost_usd":"a lot"}"#,
        ] {
            let record = format!(
                r#"{{"schema_version":"ATIF-v1.4",{odd},"steps":[{{"source":"agent","tool_calls":{{}},"observation":{{"results":null}}}},{{"source":"agent","observation":"text"}},{{"source":"agent","observation":{{"results":[5,{{"is_error":true}}]}}}}]}}"#
            );
            let seen = seen(record.as_bytes()).unwrap_or_else(|| panic!("{record}"));
            assert_eq!(seen.steps, 3, "{record}");
        }
    }
}
