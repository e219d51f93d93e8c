//! The Runs page's second looks: `GET /api/compare` (two runs' steps
//! aligned one to one, counted as the runs' tally counts them, each
//! starting at the record the Run page numbers so; windows of steps; runs
//! it does not know), and the groups of runs below the first level.

use crate::web::{Server, demo, enc};

fn compare(server: &Server, a: &str, b: &str, extra: &str) -> serde_json::Value {
    let reply = server.get(&format!(
        "/api/compare?path=&a={}&b={}{extra}",
        enc(a),
        enc(b)
    ));
    assert_eq!(reply.status, 200, "{}", reply.text());
    reply.json()
}

#[test]
fn two_runs_are_compared_step_by_step_as_the_runs_count_their_steps() {
    let dir = demo();
    let server = Server::start(&dir.path().join("wh"), &[]);
    let runs = server.get("/api/runs?path=&limit=1000").json();
    let runs = runs["runs"].as_array().unwrap().clone();
    let stepped: Vec<&serde_json::Value> = runs
        .iter()
        .filter(|r| r["steps"].as_u64().unwrap() > 0)
        .collect();
    assert!(stepped.len() >= 4, "{runs:?}");
    for run in &stepped {
        let name = run["run"].as_str().unwrap();
        // A run against itself: every step on both sides, none differing.
        let same = compare(&server, name, name, "&limit=500");
        assert_eq!(same["a"]["summary"], **run, "{name}");
        assert_eq!(same["a"]["steps"], run["steps"], "{name}: steps as tallied");
        assert_eq!(same["a"]["records"], run["records"], "{name}");
        assert_eq!(same["differing"], 0, "{name}");
        let pairs = same["pairs"].as_array().unwrap();
        assert_eq!(pairs.len() as u64, run["steps"].as_u64().unwrap(), "{name}");
        // Each step starts at the record the Run page numbers so (its
        // records as `/api/records` gives them, failed ones too).
        let page = server.get(&format!(
            "/api/records?path=&failed=1&limit=10000&file={}",
            enc(run["file"].as_str().unwrap())
        ));
        let records: Vec<serde_json::Value> = page
            .text()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        for (i, pair) in pairs.iter().enumerate() {
            assert_eq!(pair["step"], i as u64 + 1);
            assert_eq!(pair["a"], pair["b"]);
            let at = pair["a"]["record"].as_u64().unwrap() as usize;
            let record = &records[at - 1];
            let text = record.to_string();
            assert!(
                text.contains("assistant")
                    || text.contains("ATIF")
                    || text.contains("function_call")
                    || text.contains("reasoning"),
                "{name} step {}: record {at} is no model's: {text:.300}",
                i + 1
            );
        }
    }
    // Two different runs: the longer one's steps are all there, the
    // shorter's side empty past its end, and their calls differ.
    let (a, b) = (stepped[0], stepped[1]);
    let (na, nb) = (a["steps"].as_u64().unwrap(), b["steps"].as_u64().unwrap());
    let both = compare(
        &server,
        a["run"].as_str().unwrap(),
        b["run"].as_str().unwrap(),
        "",
    );
    let pairs = both["pairs"].as_array().unwrap();
    assert_eq!(pairs.len() as u64, na.max(nb).min(100));
    assert!(both["differing"].as_u64().unwrap() > 0, "{both}");
    for pair in pairs {
        let n = pair["step"].as_u64().unwrap();
        assert_eq!(pair["a"].is_null(), n > na);
        assert_eq!(pair["b"].is_null(), n > nb);
        if pair["a"].is_null() || pair["b"].is_null() {
            assert_eq!(pair["calls_differ"], true);
        }
    }
    // A window of steps is that part of the whole.
    let whole = compare(
        &server,
        a["run"].as_str().unwrap(),
        b["run"].as_str().unwrap(),
        "&limit=500",
    );
    let window = compare(
        &server,
        a["run"].as_str().unwrap(),
        b["run"].as_str().unwrap(),
        "&from=2&limit=1",
    );
    assert_eq!(window["from"], 2);
    assert_eq!(window["pairs"].as_array().unwrap().len(), 1);
    assert_eq!(window["pairs"][0], whole["pairs"][1]);
    let next = if na.max(nb) > 2 {
        serde_json::json!(3)
    } else {
        serde_json::Value::Null
    };
    assert_eq!(window["next_from"], next);
    // Runs it does not know, or does not get.
    let unknown = server.get("/api/compare?path=&a=nope&b=nope");
    assert_eq!(
        (unknown.status, unknown.code()),
        (404, "PCHRONICLE_RUN_NOT_FOUND".into())
    );
    let half = server.get(&format!(
        "/api/compare?path=&a={}",
        enc(a["run"].as_str().unwrap())
    ));
    assert_eq!(
        (half.status, half.code()),
        (400, "PCHRONICLE_SERVE_REQUEST_INVALID".into())
    );
    let zero = server.get(&format!(
        "/api/compare?path=&a={0}&b={0}&from=0",
        enc(a["run"].as_str().unwrap())
    ));
    assert_eq!(zero.status, 400, "{}", zero.text());
}

#[test]
fn runs_below_the_first_level_are_grouped_and_a_group_chooses_its_runs() {
    let dir = demo();
    let server = Server::start(&dir.path().join("wh"), &[]);
    let all = server.get("/api/runs?path=&limit=1000").json();
    let total = all["total"].as_u64().unwrap();
    let outside = server.get("/api/runs?path=&ungrouped=1&limit=1000").json();
    for run in outside["runs"].as_array().unwrap() {
        let name = run["run"].as_str().unwrap();
        assert!(name.matches('/').count() < 2, "{name} is in a group");
    }
    let groups = outside["groups"]["runs"].as_object().unwrap().clone();
    assert!(!groups.is_empty(), "{outside}");
    let grouped: u64 = groups.values().map(|n| n.as_u64().unwrap()).sum();
    assert_eq!(outside["total"].as_u64().unwrap() + grouped, total);
    assert!(outside["groups"]["other"].is_null());
    for (group, count) in &groups {
        let page = server
            .get(&format!("/api/runs?path=&group={}&limit=1000", enc(group)))
            .json();
        assert_eq!(page["total"], *count, "{group}");
        assert!(
            page.get("groups").is_none(),
            "only an ungrouped page names groups"
        );
        for run in page["runs"].as_array().unwrap() {
            assert!(
                run["run"].as_str().unwrap().starts_with(group.as_str()),
                "{run}"
            );
        }
        let summary = server
            .get(&format!("/api/runs/summary?path=&group={}", enc(group)))
            .json();
        assert_eq!(summary["runs"], *count, "{group}");
    }
    // A later page names no groups; its cursor is bound to `ungrouped`.
    let first = server.get("/api/runs?path=&ungrouped=1&limit=1");
    let next = first.json()["next"].as_str().unwrap().to_string();
    let second = server.get(&format!(
        "/api/runs?path=&ungrouped=1&limit=1&after={}",
        enc(&next)
    ));
    assert_eq!(second.status, 200, "{}", second.text());
    assert!(second.json().get("groups").is_none());
    let unbound = server.get(&format!("/api/runs?path=&limit=1&after={}", enc(&next)));
    assert_eq!(unbound.code(), "PCHRONICLE_CURSOR_INVALID");
}
