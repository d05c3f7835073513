//! The OpenAI Responses door (`POST /v1/responses`) over real HTTP, against
//! the simulator on loopback, on both stores: one job and one upstream call
//! per key with a byte-for-byte replay, the semantic event stream numbered
//! in order, a function tool and its `function_call_output` round trip, and
//! `previous_response_id` carrying a conversation across two turns of the
//! same owner only. Upstream calls are counted at the simulator.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{ALICE, BOB, TestGateway, TestStore};
use reqwest::Response;
use serde_json::{Value, json};

store_matrix!(
    a_response_is_one_job_and_replays_byte_for_byte,
    a_streamed_response_numbers_its_events_and_completes,
    a_function_call_and_its_output_round_trip,
    previous_response_id_continues_the_owners_conversation,
    a_background_response_is_answered_at_once_and_retrieved_when_done,
    input_items_list_the_conversation_newest_first,
    a_background_response_is_cancelled_and_stays_cancelled,
);

/// `GET /v1/responses/{id}/input_items` lists the conversation the
/// response answered — the earlier turn it continued included, the
/// instructions not — newest first unless `order=asc`, paged by `limit`.
async fn input_items_list_the_conversation_newest_first(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let first =
        post(&gw, "r-items-1", &json!({"model": "chat", "instructions": "Be brief.", "input": "I am Ada."}))
            .await;
    let first: Value = first.json().await.unwrap();
    let body = json!({"model": "chat", "input": "Who am I?", "previous_response_id": first["id"]});
    let second: Value = post(&gw, "r-items-2", &body).await.json().await.unwrap();
    let id = second["id"].as_str().unwrap();

    let items: Value = gw.get(ALICE, &format!("/v1/responses/{id}/input_items")).await.json().await.unwrap();
    assert_eq!(items["object"], "list", "{items}");
    let texts: Vec<&str> = items["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["content"][0]["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["Who am I?", "echo: I am Ada.", "I am Ada."], "{items}");
    assert_eq!(items["data"][1]["role"], "assistant");
    assert_eq!(items["has_more"], false);

    let page: Value = gw
        .get(ALICE, &format!("/v1/responses/{id}/input_items?order=asc&limit=1"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(page["data"][0]["content"][0]["text"], "I am Ada.");
    assert_eq!(page["has_more"], true);
    let bad = gw.get(ALICE, &format!("/v1/responses/{id}/input_items?limit=0")).await;
    common::assert_problem(bad, 422, "invalid-body").await;
    assert_eq!(gw.get(BOB, &format!("/v1/responses/{id}/input_items")).await.status(), 404);
    assert_eq!(gw.sim().calls().total, 2);
}

/// A background response cancelled while its provider is held answers
/// `cancelled`, reads back `cancelled` after the provider answered late,
/// and a completed one cannot be cancelled.
async fn a_background_response_is_cancelled_and_stays_cancelled(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    gw.sim().queue(Some("sim:ok"), "hold=cancel-me", 1).unwrap();
    let started =
        post(&gw, "r-cancel", &json!({"model": "chat", "input": "Never mind.", "background": true})).await;
    let job = job_of(&started);
    let started: Value = started.json().await.unwrap();
    let id = started["id"].as_str().unwrap().to_owned();
    gw.sim().wait_for_calls(1).await; // the provider holds it

    let cancel = |api_key: &'static str| {
        gw.client.post(gw.url(&format!("/v1/responses/{id}/cancel"))).bearer_auth(api_key).send()
    };
    assert_eq!(cancel(BOB).await.unwrap().status(), 404, "another owner's response does not exist");
    let cancelled = cancel(ALICE).await.unwrap();
    assert_eq!(cancelled.status(), 200);
    let cancelled: Value = cancelled.json().await.unwrap();
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");

    gw.sim().release("cancel-me");
    common::settled_job(&gw, ALICE, &job).await;
    let read: Value = gw.get(ALICE, &format!("/v1/responses/{id}")).await.json().await.unwrap();
    assert_eq!(read["status"], "cancelled", "a late answer does not complete it: {read}");

    let done: Value =
        post(&gw, "r-done", &json!({"model": "chat", "input": "Done."})).await.json().await.unwrap();
    let refused = gw.client.post(gw.url(&format!("/v1/responses/{}/cancel", done["id"].as_str().unwrap())));
    common::assert_problem(refused.bearer_auth(ALICE).send().await.unwrap(), 409, "job-completed").await;
    assert_eq!(gw.sim().calls().total, 2);
}

/// `background: true` answers `in_progress` at once while the job runs
/// (the provider is held); `GET /v1/responses/{id}` shows it in progress,
/// then — once the provider answered — the completed response, the same
/// bytes as a replay; another owner is told it does not exist.
async fn a_background_response_is_answered_at_once_and_retrieved_when_done(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    gw.sim().queue(Some("sim:ok"), "hold=background", 1).unwrap();
    let body = json!({"model": "chat", "input": "In the background.", "background": true});
    let response = post(&gw, "r-bg", &body).await;
    assert_eq!(response.status(), 200);
    let job = job_of(&response);
    let started: Value = response.json().await.unwrap();
    assert_eq!(started["status"], "in_progress", "{started}");
    let id = started["id"].as_str().unwrap().to_owned();
    let running: Value = gw.get(ALICE, &format!("/v1/responses/{id}")).await.json().await.unwrap();
    assert_eq!(running["status"], "in_progress");

    gw.sim().release("background");
    common::settled_job(&gw, ALICE, &job).await;
    let done = gw.get(ALICE, &format!("/v1/responses/{id}")).await;
    assert_eq!(done.status(), 200);
    let done: Value = done.json().await.unwrap();
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["output"][0]["content"][0]["text"], "echo: In the background.");
    assert_eq!(gw.get(BOB, &format!("/v1/responses/{id}")).await.status(), 404);
    assert_eq!(gw.sim().calls().total, 1);
}

async fn post_as(gw: &TestGateway, api_key: &str, key: &str, body: &Value) -> Response {
    gw.client
        .post(gw.url("/v1/responses"))
        .bearer_auth(api_key)
        .header("idempotency-key", key)
        .json(body)
        .send()
        .await
        .unwrap()
}

async fn post(gw: &TestGateway, key: &str, body: &Value) -> Response {
    post_as(gw, ALICE, key, body).await
}

fn job_of(response: &Response) -> String {
    response.headers()["x-intentgate-job-id"].to_str().unwrap().to_owned()
}

async fn a_response_is_one_job_and_replays_byte_for_byte(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let body = json!({"model": "chat", "instructions": "Be brief.", "input": "Say hello."});
    let first = post(&gw, "r-1", &body).await;
    assert_eq!(first.status(), 200);
    let bytes = first.bytes().await.unwrap();
    let response: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(response["object"], "response", "{response}");
    assert_eq!(response["status"], "completed");
    assert!(response["id"].as_str().unwrap().starts_with("resp_"));
    let message = &response["output"][0];
    assert_eq!(message["type"], "message");
    assert_eq!(message["content"][0]["type"], "output_text");
    assert_eq!(message["content"][0]["text"], "echo: Say hello.");
    assert!(response["usage"]["total_tokens"].as_u64().unwrap() > 0);

    let again = post(&gw, "r-1", &body).await;
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(again.bytes().await.unwrap(), bytes);
    assert_eq!(gw.sim().calls().total, 1, "one upstream call");
}

async fn a_streamed_response_numbers_its_events_and_completes(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let body = json!({"model": "chat", "input": "Stream it.", "stream": true});
    let text = post(&gw, "r-stream", &body).await.text().await.unwrap();
    let events: Vec<Value> = text
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .map(|data| serde_json::from_str(data).unwrap())
        .collect();
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds[..4],
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added"
        ],
        "{text}"
    );
    assert_eq!(kinds.last(), Some(&"response.completed"), "{text}");
    for (n, event) in events.iter().enumerate() {
        assert_eq!(event["sequence_number"], n as u64, "{text}");
    }
    let deltas: String = events
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .map(|e| e["delta"].as_str().unwrap().to_owned())
        .collect();
    let completed = &events.last().unwrap()["response"];
    assert_eq!(completed["output"][0]["content"][0]["text"], deltas.as_str());
    let replay = post(&gw, "r-stream", &body).await.text().await.unwrap();
    assert_eq!(replay, text, "the replayed stream is the live one");
    assert_eq!(gw.sim().calls().total, 1);
}

async fn a_function_call_and_its_output_round_trip(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let tools = json!([{"type": "function", "name": "get_weather", "description": "The weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]);
    let body = json!({"model": "tools", "input": "Weather in Utrecht?", "tools": tools,
        "tool_choice": {"type": "function", "name": "get_weather"}});
    let response: Value = post(&gw, "r-tool", &body).await.json().await.unwrap();
    let call =
        response["output"].as_array().unwrap().iter().find(|i| i["type"] == "function_call").unwrap().clone();
    assert_eq!(call["name"], "get_weather", "{response}");
    let arguments: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
    assert!(arguments["city"].is_string());

    let round_trip = json!({"model": "tools", "tools": tools, "input": [
        {"role": "user", "content": "Weather in Utrecht?"},
        call.clone(),
        {"type": "function_call_output", "call_id": call["call_id"], "output": "Sunny"}]});
    let answered = post(&gw, "r-tool-2", &round_trip).await;
    let job = job_of(&answered);
    let answered: Value = answered.json().await.unwrap();
    assert_eq!(
        answered["output"][0]["content"][0]["text"], "echo: Sunny",
        "the loop ends in words: {answered}"
    );
    let upstream = gw.sim().last_request(&job).unwrap().body.unwrap();
    assert_eq!(
        upstream["messages"][2],
        json!({"role": "tool", "tool_call_id": call["call_id"], "content": "Sunny"})
    );
    assert_eq!(gw.sim().calls().total, 2);
}

async fn previous_response_id_continues_the_owners_conversation(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let first: Value = post(
        &gw,
        "turn-1",
        &json!({"model": "chat", "instructions": "Be brief.", "input": "My name is Ada."}),
    )
    .await
    .json()
    .await
    .unwrap();
    let second = json!({"model": "chat", "input": "What is my name?", "previous_response_id": first["id"]});
    let response = post(&gw, "turn-2", &second).await;
    assert_eq!(response.status(), 200);
    let job = job_of(&response);
    let upstream = gw.sim().last_request(&job).unwrap().body.unwrap();
    let messages: Vec<&Value> = upstream["messages"].as_array().unwrap().iter().collect();
    assert_eq!(
        messages.len(),
        3,
        "the earlier turn, its answer, this turn; not its instructions: {upstream}"
    );
    assert_eq!(messages[0]["content"], "My name is Ada.");
    assert_eq!(messages[1]["role"], "assistant");
    assert_eq!(messages[2]["content"], "What is my name?");

    let stranger = post_as(&gw, BOB, "turn-2", &second).await;
    assert_eq!(stranger.status(), 404, "another owner's response is not found");
    assert_eq!(gw.sim().calls().total, 2);
}
