//! The operator console (`/console`) in a real headless browser (chromium
//! through chromedriver, see `common::webdriver`), on a real gateway with
//! the provider simulator: sign in, find a job by its key, read its attempt
//! timeline, settle an `unknown` attempt from the queue and watch the job
//! go on to the fallback and succeed; a user who sees only their own jobs
//! and no resolve button; bad input refused with the API's problem, shown
//! readably. Plus the page's headers, checked over plain HTTP.
//!
//! `INTENTGATE_SCREENSHOTS=1` writes a PNG of each page to
//! `docs/screenshots/` (the README shows them).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::webdriver::Browser;
use common::{
    ADMIN, ALICE, BOB, TestGateway, TestStore, chat_body, job_left_unknown, set_route, settled_job,
    wait_for_attempt,
};
use intentgate::contract_runs::run_and_record;
use intentgate::contracts::{Suite, pairs};
use intentgate::jobs::AttemptState;
use serde_json::{Value, json};

store_matrix!(
    an_admin_settles_an_unknown_attempt_and_the_job_goes_on,
    a_user_sees_only_their_own_jobs,
    the_timeline_shows_who_won_the_race_and_the_tool_calls,
    a_hedged_attempt_is_marked_on_its_job_page,
    an_admin_makes_and_revokes_a_key_and_reads_a_teams_spend_by_tag,
    a_failed_jobs_page_says_each_attempts_failure_once,
);

/// A gateway whose attempts time out fast, with settled jobs of alice and
/// bob, and one job of alice's (`refund-7`) whose attempt is `unknown`: its
/// id.
async fn gateway_with_an_unknown_attempt(store: &TestStore) -> (TestGateway, String) {
    let mut captured = None;
    let gw = TestGateway::start_tweaked(store, |doc| {
        set_route(doc, "chat", "attempt_timeout", "300ms");
        // One silence opens the primary's circuit: the Overview shows it cooling down.
        let mut health = toml::Table::new();
        health.insert("failures".into(), 1.into());
        health.insert("cooldown".into(), "10m".into());
        common::set_provider(doc, "sim-primary", "health", health);
        // The extract route gated as shipped (it runs no job here).
        set_route(doc, "extract", "require_contract_for_primary", true);
        set_route(doc, "extract", "require_contract_for_fallback", true);
        captured = Some(common::config_from_doc(doc));
    })
    .await;
    // A contract run to show: the extract route's suite against its chain.
    let config = captured.unwrap();
    let suites = Suite::load_dir(&config.contracts.dir).unwrap();
    for (suite, provider) in pairs(&config, &suites, Some("extract"), None) {
        run_and_record(&gw.gateway.store, suite, provider, &mut |_| {}).await.unwrap();
    }
    gw.gateway.engine.gate().reload(&gw.gateway.store).await.unwrap();

    for (key, owner, text) in [
        (ALICE, "order-41", "Say hi"),
        (ALICE, "order-42", "What is the capital of France?"),
        (BOB, "bob-report-1", "Summarise the report"),
    ] {
        let created: Value = gw.create(key, owner, &chat_body(text)).await.json().await.unwrap();
        settled_job(&gw, key, created["id"].as_str().unwrap()).await;
    }
    let id = job_left_unknown(&gw, ALICE, "refund-7", "Refund order 7").await;
    (gw, id)
}

/// Opens the console and signs in with `key`; returns on the Jobs page.
async fn sign_in(browser: &Browser, gw: &TestGateway, key: &str) {
    browser.goto(&gw.url("/console")).await;
    browser.wait_for("the sign-in page", "document.body.dataset.page === 'signin'").await;
    browser.type_into("#api-key", key).await;
    browser.click("#signin-submit").await;
    browser.wait_for("the jobs page", "document.body.dataset.page === 'jobs'").await;
    browser
        .wait_for("the first page of jobs", "document.getElementById('jobs-table').dataset.state === 'ready'")
        .await;
}

/// The keys of the jobs the Jobs page lists.
async fn listed_keys(browser: &Browser) -> Vec<String> {
    let keys = browser
        .script("return [...document.querySelectorAll('#jobs-body tr')].map(r => r.dataset.key)", json!([]))
        .await;
    serde_json::from_value(keys).unwrap()
}

/// Applies the Jobs filters as they are typed, and waits for the new page.
async fn apply_filters(browser: &Browser) {
    browser.script("document.getElementById('jobs-table').dataset.state = 'stale'", json!([])).await;
    browser.click("#f-apply").await;
    browser
        .wait_for(
            "the filtered jobs (or a problem)",
            "['ready', 'error'].includes(document.getElementById('jobs-table').dataset.state)",
        )
        .await;
}

async fn an_admin_settles_an_unknown_attempt_and_the_job_goes_on(store: TestStore) {
    let Some(browser) = Browser::start().await else { return };
    let shots = store.backend == common::Backend::Sqlite;
    let (gw, id) = gateway_with_an_unknown_attempt(&store).await;

    // A wrong key is refused with the API's problem, shown readably.
    browser.goto(&gw.url("/console")).await;
    browser.wait_for("the sign-in page", "document.body.dataset.page === 'signin'").await;
    browser.type_into("#api-key", "demo-nobody").await;
    browser.click("#signin-submit").await;
    browser
        .wait_for("the 401 problem", "document.getElementById('problem').dataset.problem === 'unauthorized'")
        .await;
    let problem = browser.text("#problem").await;
    assert!(
        problem.contains("Missing or invalid API key") && problem.contains("the API key is not known"),
        "{problem}"
    );
    if shots {
        browser.screenshot("sign-in").await;
    }
    assert_eq!(
        browser.script("return location.href", json!([])).await.as_str().unwrap(),
        gw.url("/console"),
        "the key is never in the URL"
    );

    sign_in(&browser, &gw, ADMIN).await;
    let stored = browser.script("return sessionStorage.getItem('intentgate.apiKey')", json!([])).await;
    assert_eq!(stored, "demo-admin", "the key is kept in the tab's sessionStorage");
    let cookies = browser.script("return document.cookie", json!([])).await;
    assert_eq!(cookies, "", "and in no cookie");
    assert!(browser.script("return location.href", json!([])).await.as_str().unwrap().ends_with("#/jobs"));
    // Admin: every owner's jobs, newest first; the live counts show the unknown one.
    assert_eq!(listed_keys(&browser).await, ["refund-7", "bob-report-1", "order-42", "order-41"]);
    browser
        .wait_for("the unknown count", "document.getElementById('count-unknown').textContent === '1'")
        .await;
    if shots {
        browser.screenshot("jobs").await;
    }

    // Find the job by its key and open its timeline.
    browser.type_into("#f-key", "refund-7").await;
    apply_filters(&browser).await;
    assert_eq!(listed_keys(&browser).await, ["refund-7"]);
    browser.click("#jobs-body tr[data-key='refund-7'] a.job-link").await;
    browser
        .wait_for("the job page", &format!("document.getElementById('page-job').dataset.job === '{id}'"))
        .await;
    browser
        .wait_for(
            "attempt 1 unknown on the timeline",
            "document.querySelector('#timeline-svg g.attempt[data-attempt=\"1\"][data-state=\"unknown\"]')",
        )
        .await;
    assert_eq!(browser.text("#job-status").await, "unknown");
    // Its own page says when it is given up on by itself, and offers to settle it now.
    let settling = browser.text("#attempts-body tr[data-attempt='1'][data-state='unknown']").await;
    assert!(settling.contains("abandoned by itself at") && settling.contains("Abandon"), "{settling}");
    browser.click("#attempts-body tr[data-attempt='1'] button[data-as='failed']").await;
    browser
        .wait_for("the confirmation from the job page", "document.getElementById('resolve-dialog').open")
        .await;
    let consequence = browser.text("#resolve-consequence").await;
    assert!(consequence.contains("Attempt 1 of job refund-7 on sim-primary becomes failed"), "{consequence}");
    browser.click("#resolve-cancel").await;
    browser.wait_for("the dialog closed", "!document.getElementById('resolve-dialog').open").await;

    // The queue: settle it, with a reason, after the confirmation says what follows.
    browser.click("#nav a[data-page='unknown']").await;
    let row = format!("#unknown-body tr[data-job='{id}'][data-attempt='1']");
    browser.wait_for("the queued attempt", &format!("document.querySelector(\"{row}\")")).await;
    let queued = browser.text(&row).await;
    assert!(
        queued.contains("sim-primary") && queued.contains("the chain continues on sim-fallback"),
        "{queued}"
    );
    if shots {
        browser.screenshot("unknown").await;
    }
    // A decision belongs to its page: navigating away closes the dialog.
    browser.click(&format!("{row} button[data-as='abandoned']")).await;
    browser.wait_for("the confirmation", "document.getElementById('resolve-dialog').open").await;
    browser.script("location.hash = '#/overview'", json!([])).await;
    browser.wait_for("the dialog closed on leaving", "!document.getElementById('resolve-dialog').open").await;
    browser.script("location.hash = '#/unknown'", json!([])).await;
    browser.wait_for("the queued attempt again", &format!("document.querySelector(\"{row}\")")).await;
    browser.click(&format!("{row} button[data-as='abandoned']")).await;
    browser.wait_for("the confirmation", "document.getElementById('resolve-dialog').open").await;
    let consequence = browser.text("#resolve-consequence").await;
    assert!(
        consequence.contains("Attempt 1 of job refund-7 on sim-primary becomes abandoned")
            && consequence.contains("Then the chain continues on sim-fallback"),
        "{consequence}"
    );
    // No reason, or a blank one, passes the form but not the API: its
    // problem, shown in the dialog (the browser does not intercept it).
    browser.click("#resolve-confirm").await;
    browser
        .wait_for(
            "the refusal of no reason",
            "document.getElementById('resolve-error').dataset.problem === 'invalid-body'",
        )
        .await;
    browser.script("delete document.getElementById('resolve-error').dataset.problem", json!([])).await;
    browser.type_into("#resolve-reason", "   ").await;
    browser.click("#resolve-confirm").await;
    browser
        .wait_for(
            "the refusal",
            "document.getElementById('resolve-error').dataset.problem === 'invalid-body'",
        )
        .await;
    let refusal = browser.text("#resolve-error").await;
    assert!(refusal.contains("Invalid resolution") && refusal.contains("give a `reason`"), "{refusal}");
    assert_eq!(
        gw.gateway.store.attempt(id.parse().unwrap(), 1).await.unwrap().unwrap().state,
        AttemptState::Unknown,
        "a refused settle settles nothing"
    );
    if shots {
        browser.screenshot("unknown-confirm").await;
    }
    browser.type_into("#resolve-reason", "provider support: request never processed").await;
    browser.click("#resolve-confirm").await;
    browser.wait_for("the dialog to close", "!document.getElementById('resolve-dialog').open").await;
    browser.wait_for("an empty queue", "!document.getElementById('unknown-empty').hidden").await;

    // The job went on: attempt 2 on the fallback won; the page updates itself.
    browser.script(&format!("location.hash = '#/job/{id}'"), json!([])).await;
    browser
        .wait_for("the job to succeed", "document.getElementById('page-job').dataset.status === 'succeeded'")
        .await;
    let timeline = browser
        .script(
            "return [...document.querySelectorAll('#timeline-svg g.attempt')].map(g => ({
                number: g.dataset.attempt, provider: g.dataset.provider, state: g.dataset.state,
                won: g.dataset.won === 'true', label: g.textContent }))",
            json!([]),
        )
        .await;
    assert_eq!(timeline[0]["provider"], "sim-primary");
    assert_eq!(timeline[0]["state"], "abandoned");
    assert_eq!(timeline[0]["won"], false);
    assert!(timeline[0]["label"].as_str().unwrap().contains("settled by admin"), "{timeline}");
    assert_eq!(timeline[1]["provider"], "sim-fallback");
    assert_eq!(timeline[1]["state"], "succeeded");
    assert_eq!(timeline[1]["won"], true);
    assert!(timeline[1]["label"].as_str().unwrap().contains("won the compare-and-swap"), "{timeline}");
    let attempts = browser.text("#attempts-table").await;
    assert!(attempts.contains("resolved by admin: provider support: request never processed"), "{attempts}");
    // The winner's tokens in and out; the unknown attempt reported none.
    let tokens = browser.text("#attempts-body tr[data-attempt='2'] td.tokens").await;
    assert!(tokens.contains(" in · ") && tokens.ends_with(" out"), "{tokens}");
    assert_eq!(browser.text("#attempts-body tr[data-attempt='1'] td.tokens").await, "–");
    let result = browser.text("#job-result").await;
    assert!(result.contains("provider sim-fallback") && result.contains("Refund order 7"), "{result}");
    assert_eq!(browser.text("#job-request .message .text").await, "Refund order 7");
    browser
        .wait_for(
            "the unknown count back to 0",
            "document.getElementById('count-unknown').textContent === '0'",
        )
        .await;
    // The same job through the API: the console settled it for real.
    assert_eq!(settled_job(&gw, ALICE, &id).await["result"]["provider"], "sim-fallback");
    if shots {
        browser.screenshot("job").await;
    }

    browser.click("#nav a[data-page='contracts']").await;
    browser
        .wait_for("the contracts", "document.getElementById('page-contracts').dataset.state === 'ready'")
        .await;
    let sloppy = browser.text("#contracts .contract[data-route='extract'][data-provider='sim-sloppy']").await;
    assert!(sloppy.contains("ineligible") && sloppy.contains("first failure"), "{sloppy}");
    assert!(!sloppy.contains("gate not required"), "the extract route is gated: {sloppy}");
    let primary =
        browser.text("#contracts .contract[data-route='extract'][data-provider='sim-primary']").await;
    assert!(primary.contains("eligible") && primary.contains("contract_max_age 30days"), "{primary}");
    if shots {
        // The failing provider's card, with its first failure, in view.
        browser
            .script(
                "document.querySelector(\"#contracts .contract[data-route='extract'][data-provider='sim-fallback']\")
                    .scrollIntoView()",
                json!([]),
            )
            .await;
        browser.screenshot("contracts").await;
    }

    browser.click("#nav a[data-page='overview']").await;
    browser
        .wait_for("the overview", "document.getElementById('page-overview').dataset.state === 'ready'")
        .await;
    let charted = browser
        .script("return Number(document.querySelector('#chart-jobs svg').dataset.total)", json!([]))
        .await;
    assert_eq!(charted, 4, "four jobs in the last hour");
    let provider = |route: &str, name: &str, data: &str| {
        format!(
            "return document.querySelector(\"#providers-body tr[data-route='{route}'][data-provider='{name}']\").dataset.{data}"
        )
    };
    let health = browser.script(&provider("chat", "sim-primary", "health"), json!([])).await;
    assert_eq!(health, "cooling_down", "the silent primary, passed over while it cools down");
    let refused = browser.script(&provider("extract", "sim-sloppy", "eligible"), json!([])).await;
    assert_eq!(refused, "false", "a provider whose contract failed, on the Overview too");
    let text = browser.text("#providers-body").await;
    assert!(text.contains("cooling down after 1 failure(s) in a row until"), "{text}");
    if shots {
        browser.screenshot("overview").await;
    }

    browser.click("#sign-out").await;
    browser.wait_for("the sign-in page", "document.body.dataset.page === 'signin'").await;
    assert_eq!(
        browser.script("return sessionStorage.length", json!([])).await,
        0,
        "signing out forgets the key"
    );
    browser.close().await;
}

async fn a_user_sees_only_their_own_jobs(store: TestStore) {
    let Some(browser) = Browser::start().await else { return };
    let (gw, alice_unknown) = gateway_with_an_unknown_attempt(&store).await;

    // Bob: his job only; alice's key finds nothing; no owner filter.
    sign_in(&browser, &gw, BOB).await;
    assert_eq!(listed_keys(&browser).await, ["bob-report-1"]);
    assert_eq!(
        browser
            .script("return getComputedStyle(document.getElementById('f-owner-label')).display", json!([]))
            .await,
        "none",
        "the owner filter is not shown to a user"
    );
    browser.type_into("#f-key", "refund-7").await;
    apply_filters(&browser).await;
    assert!(listed_keys(&browser).await.is_empty());
    assert_eq!(browser.script("return document.getElementById('jobs-empty').hidden", json!([])).await, false);
    // Bad input: a key the API refuses, its problem shown readably.
    browser.type_into("#f-key", "ключ").await;
    apply_filters(&browser).await;
    browser
        .wait_for(
            "the problem",
            "document.getElementById('problem').dataset.problem === 'idempotency-key-invalid'",
        )
        .await;
    let problem = browser.text("#problem").await;
    assert!(problem.contains("Idempotency-Key invalid") && problem.contains("400"), "{problem}");
    // Alice's job by its id: the API's 404, as for a job that does not exist.
    browser.script(&format!("location.hash = '#/job/{alice_unknown}'"), json!([])).await;
    browser.wait_for("the 404", "document.getElementById('problem').dataset.problem === 'not-found'").await;
    assert!(browser.text("#problem").await.contains(&format!("no job `{alice_unknown}`")));
    assert_eq!(
        browser.script("return document.getElementById('page-job').dataset.job || ''", json!([])).await,
        ""
    );
    // The queue holds nothing of his.
    browser.click("#nav a[data-page='unknown']").await;
    browser.wait_for("the queue", "document.getElementById('page-unknown').dataset.state === 'ready'").await;
    assert!(!browser.text("#unknown-empty").await.is_empty(), "an empty queue for bob");
    browser.wait_for("bob's counts", "document.getElementById('count-unknown').textContent === '0'").await;
    browser.click("#sign-out").await;
    browser.wait_for("the sign-in page", "document.body.dataset.page === 'signin'").await;

    // Alice sees her unknown attempt but cannot settle it: no buttons.
    sign_in(&browser, &gw, ALICE).await;
    assert_eq!(listed_keys(&browser).await, ["refund-7", "order-42", "order-41"]);
    browser.click("#nav a[data-page='unknown']").await;
    let row = format!("#unknown-body tr[data-job='{alice_unknown}']");
    browser.wait_for("her queued attempt", &format!("document.querySelector(\"{row}\")")).await;
    let buttons =
        browser.script("return document.querySelectorAll('#page-unknown button').length", json!([])).await;
    assert_eq!(buttons, 0, "no resolve button for a user");
    assert_eq!(
        browser.script("return document.getElementById('unknown-readonly').hidden", json!([])).await,
        false
    );
    browser.close().await;
    assert_eq!(
        gw.gateway.store.attempt(alice_unknown.parse().unwrap(), 1).await.unwrap().unwrap().state,
        AttemptState::Unknown,
        "nothing settled it"
    );
}

/// R7 on the timeline: attempt 1 (the primary) is settled while its
/// request is held, attempt 2 (the fallback) answers first and wins, then
/// attempt 1's late answer arrives and is superseded. And a job whose answer
/// is a tool call, rendered as one.
async fn the_timeline_shows_who_won_the_race_and_the_tool_calls(store: TestStore) {
    let Some(browser) = Browser::start().await else { return };
    let gw = TestGateway::start_tweaked(&store, |doc| {
        common::set_provider(doc, "sim-primary", "model", "sim:hold=slow-a");
        common::set_provider(doc, "sim-fallback", "model", "sim:hold=fast-b");
        set_route(doc, "chat", "attempt_timeout", "100ms");
    })
    .await;
    let tools = json!({
        "route": "tools",
        "input": {"messages": [{"role": "user", "content": "Where is order 42?"}]},
        "params": {"tools": [{"type": "function", "function": {"name": "find_order",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}},
                           "required": ["order_id"]}}}]},
    });
    let created: Value = gw.create(ALICE, "order-status-42", &tools).await.json().await.unwrap();
    let tools_id = created["id"].as_str().unwrap().to_owned();
    assert_eq!(settled_job(&gw, ALICE, &tools_id).await["status"], "succeeded");

    let mut events = gw.events();
    let calls_before = gw.sim().calls().total;
    let created: Value = gw.create(ALICE, "race-1", &chat_body("Who wins?")).await.json().await.unwrap();
    let id = created["id"].as_str().unwrap().to_owned();
    wait_for_attempt(&mut events, &id, 1, AttemptState::Unknown).await;
    let resolved = gw
        .request(reqwest::Method::POST, &format!("/v1/jobs/{id}/attempts/1/resolve"), ADMIN)
        .json(&json!({"as": "abandoned", "reason": "the primary is stuck"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resolved.status(), 200);
    gw.sim().wait_for_calls(calls_before + 2).await; // attempt 2's request reached the fallback
    gw.sim().release("fast-b");
    wait_for_attempt(&mut events, &id, 2, AttemptState::Succeeded).await;
    gw.sim().release("slow-a");
    wait_for_attempt(&mut events, &id, 1, AttemptState::Superseded).await;

    sign_in(&browser, &gw, ADMIN).await;
    browser.script(&format!("location.hash = '#/job/{id}'"), json!([])).await;
    browser
        .wait_for("the raced job", &format!("document.getElementById('page-job').dataset.job === '{id}'"))
        .await;
    let timeline = browser
        .script(
            "return [...document.querySelectorAll('#timeline-svg g.attempt')].map(g => ({
                provider: g.dataset.provider, state: g.dataset.state, won: g.dataset.won === 'true',
                label: g.textContent }))",
            json!([]),
        )
        .await;
    assert_eq!(timeline.as_array().unwrap().len(), 2, "{timeline}");
    assert_eq!(
        (timeline[0]["provider"].as_str(), timeline[0]["state"].as_str()),
        (Some("sim-primary"), Some("superseded"))
    );
    assert_eq!(timeline[0]["won"], false);
    assert!(timeline[0]["label"].as_str().unwrap().contains("lost: another attempt won first"), "{timeline}");
    assert_eq!(
        (timeline[1]["provider"].as_str(), timeline[1]["state"].as_str()),
        (Some("sim-fallback"), Some("succeeded"))
    );
    assert_eq!(timeline[1]["won"], true);
    // What the bars alone hide: when attempt 1 became unknown, and that its
    // late answer arrived (after the operator abandoned it).
    let marks = browser
        .script(
            "return [...document.querySelectorAll('#timeline-svg g.attempt')].map(g =>
                [...g.querySelectorAll('g.marker')].map(m => m.dataset.marker))",
            json!([]),
        )
        .await;
    assert_eq!(marks, json!([["unknown", "late-answer"], []]), "{marks}");
    let facts = browser.text("#job-facts").await;
    assert!(facts.contains("attempt 2 on sim-fallback"), "{facts}");
    assert!(facts.contains("Door") && facts.contains("jobs API"), "named as recorded: {facts}");
    assert!(!facts.contains("or chat completions"), "not guessed: {facts}");
    if store.backend == common::Backend::Sqlite {
        browser.screenshot("job-race").await;
    }

    browser.script(&format!("location.hash = '#/job/{tools_id}'"), json!([])).await;
    browser
        .wait_for(
            "the tools job",
            &format!("document.getElementById('page-job').dataset.job === '{tools_id}'"),
        )
        .await;
    let result = browser.text("#job-result").await;
    assert!(result.contains("tool call find_order") && result.contains("\"order_id\""), "{result}");
    // A job of a few milliseconds: every tick of its time axis says another time.
    let ticks = browser
        .script(
            "return [...document.querySelectorAll('#timeline-svg text.tick-label')].map(t => t.textContent)",
            json!([]),
        )
        .await;
    let ticks: Vec<String> = serde_json::from_value(ticks).unwrap();
    let distinct: std::collections::BTreeSet<&String> = ticks.iter().collect();
    assert!(ticks.len() == 5 && distinct.len() == 5, "tick labels repeat: {ticks:?}");
    assert!(result.contains("provider sim-tools"), "{result}");
    browser.close().await;
}

/// A job whose route hedged: the attempt started beside the silent one is
/// marked on the job page, in the table and on the timeline.
async fn a_hedged_attempt_is_marked_on_its_job_page(store: TestStore) {
    let Some(browser) = Browser::start().await else { return };
    let gw = TestGateway::start_tweaked(&store, |doc| {
        common::set_provider(doc, "sim-primary", "model", "sim:hold=slow-h");
        let mut hedge = toml::Table::new();
        hedge.insert("after".into(), "100ms".into());
        set_route(doc, "chat", "hedge", hedge);
    })
    .await;
    let mut events = gw.events();
    let created: Value = gw.create(ALICE, "hedged-1", &chat_body("Anyone?")).await.json().await.unwrap();
    let id = created["id"].as_str().unwrap().to_owned();
    assert_eq!(settled_job(&gw, ALICE, &id).await["status"], "succeeded");
    gw.sim().release("slow-h");
    wait_for_attempt(&mut events, &id, 1, AttemptState::Superseded).await;

    sign_in(&browser, &gw, ADMIN).await;
    browser.script(&format!("location.hash = '#/job/{id}'"), json!([])).await;
    browser
        .wait_for("the hedged job", &format!("document.getElementById('page-job').dataset.job === '{id}'"))
        .await;
    let rows = browser
        .script(
            "return [...document.querySelectorAll('#attempts-body tr')].map(r =>
                [r.dataset.attempt, r.dataset.hedged === 'true', r.textContent.includes('hedge')])",
            json!([]),
        )
        .await;
    assert_eq!(rows, json!([["1", false, false], ["2", true, true]]), "{rows}");
    let label = browser
        .script(
            "return document.querySelector(\"#timeline-svg g.attempt[data-attempt='2']\").textContent",
            json!([]),
        )
        .await;
    assert!(label.as_str().unwrap().contains("hedged: started beside an open attempt"), "{label}");
    let facts = browser.text("#job-facts").await;
    assert!(facts.contains("2 answered — the intent ran more than once"), "{facts}");
    browser.close().await;
}

/// A failed job's page: each attempt's detail is said once, in its row of
/// the attempts table; the error names the attempts without repeating it.
async fn a_failed_jobs_page_says_each_attempts_failure_once(store: TestStore) {
    let Some(browser) = Browser::start().await else { return };
    let gw = TestGateway::start_tweaked(&store, |doc| {
        common::set_provider(doc, "sim-primary", "model", "sim:status=400");
        common::set_provider(doc, "sim-fallback", "model", "sim:status=400");
    })
    .await;
    let created: Value = gw.create(ALICE, "failed-1", &chat_body("No luck")).await.json().await.unwrap();
    let id = created["id"].as_str().unwrap().to_owned();
    let job = settled_job(&gw, ALICE, &id).await;
    assert_eq!(job["status"], "failed", "{job}");
    assert_eq!(job["attempts"].as_array().unwrap().len(), 2, "{job}");

    sign_in(&browser, &gw, ADMIN).await;
    browser.script(&format!("location.hash = '#/job/{id}'"), json!([])).await;
    browser
        .wait_for("the failed job", "document.getElementById('page-job').dataset.status === 'failed'")
        .await;
    let page = browser.text("#page-job").await;
    assert_eq!(page.matches("scripted failure").count(), 2, "once per attempt: {page}");
    let listed = browser.text("#failed-attempts").await;
    assert!(listed.contains("attempt 1 on sim-primary: failed (rejected)"), "{listed}");
    browser.close().await;
}

/// The Keys page: a key made in the console is shown once and works; a
/// revocation there is obeyed at once; a team's spend by tag is the chart
/// the spend report says.
async fn an_admin_makes_and_revokes_a_key_and_reads_a_teams_spend_by_tag(store: TestStore) {
    let Some(browser) = Browser::start().await else { return };
    let gw = TestGateway::start_tweaked(&store, |doc| {
        for provider in ["sim-primary", "sim-fallback"] {
            let mut price = toml::Table::new();
            price.insert("input_per_mtok".into(), 100.0.into());
            price.insert("output_per_mtok".into(), 200.0.into());
            common::set_provider(doc, provider, "price", price);
        }
    })
    .await;
    let member = gw.request(reqwest::Method::POST, "/v1/admin/keys", ADMIN);
    let member: Value = member
        .json(&json!({"name": "bot", "owner": "bot", "team": "support"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let member_key = member["secret"].as_str().unwrap();
    for (key, idem, tags, text) in [
        (member_key, "s1", "bot", "Where is my parcel?"),
        (member_key, "s2", "bot", "And my refund, please, as soon as you can?"),
        (member_key, "s3", "faq", "Opening hours"),
        (ALICE, "a1", "other", "Not the team's"),
    ] {
        let sent = gw.request(reqwest::Method::POST, "/v1/jobs", key).header("idempotency-key", idem);
        let created: Value = sent
            .header("intentgate-tags", tags)
            .json(&chat_body(text))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        settled_job(&gw, key, created["id"].as_str().unwrap()).await;
    }

    sign_in(&browser, &gw, ADMIN).await;
    browser.click("#nav-keys").await;
    browser.wait_for("the keys page", "document.getElementById('page-keys').dataset.state === 'ready'").await;
    browser.type_into("#k-name", "console key").await;
    browser.type_into("#k-owner", "ops").await;
    browser.type_into("#k-team", "support").await;
    browser.click("#k-create").await;
    browser.wait_for("the new key, once", "!document.getElementById('key-secret').hidden").await;
    let secret = browser.text("#key-secret-value").await;
    assert!(secret.starts_with("ig_"), "{secret}");
    let used = gw.create(&secret, "from-the-console-key", &chat_body("hi")).await;
    assert_eq!(used.status(), 201, "the key works at once");
    let listed: Value = gw.get(ADMIN, "/v1/admin/keys").await.json().await.unwrap();
    let id =
        listed["keys"].as_array().unwrap().iter().find(|k| k["name"] == "console key").unwrap()["id"].clone();
    let id = id.as_str().unwrap();
    let button = format!("button[data-revoke='{id}']");
    browser.click(&button).await;
    assert_eq!(browser.text(&button).await, "Confirm revoke", "a revocation asks once more");
    browser.click(&button).await;
    browser
        .wait_for(
            "the key revoked",
            &format!("document.querySelector(\"tr[data-key-id='{id}']\").dataset.status === 'revoked'"),
        )
        .await;
    common::assert_problem(gw.create(&secret, "after-revoke", &chat_body("hi")).await, 401, "unauthorized")
        .await;

    browser
        .script("const s = document.getElementById('spend-team'); s.value = 'support'; s.dispatchEvent(new Event('change'));", json!([]))
        .await;
    let bars = browser
        .script("return [...document.querySelectorAll('#spend-svg rect')].map(r => [r.dataset.tag, Number(r.dataset.nanos)])", json!([]))
        .await;
    let report: Value = gw.get(ADMIN, "/v1/usage/spend?group_by=team,tag").await.json().await.unwrap();
    let of = |tag: &str| -> i64 {
        report["rows"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|row| row["group"]["team"] == "support" && row["group"]["tag"] == tag)
            .map(|row| row["cost_nanos"].as_i64().unwrap())
            .sum()
    };
    assert!(of("bot") > of("faq") && of("faq") > 0, "{report}");
    assert_eq!(
        bars,
        json!([["bot", of("bot")], ["faq", of("faq")], ["(untagged)", of_untagged(&report)]]),
        "{bars}"
    );
    if store.backend == common::Backend::Sqlite {
        browser.screenshot("keys").await;
    }
    browser.close().await;
}

/// The support team's spend on jobs without a tag (the console key's job).
fn of_untagged(report: &Value) -> i64 {
    report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|row| row["group"]["team"] == "support" && row["group"]["tag"].is_null())
        .map(|row| row["cost_nanos"].as_i64().unwrap())
        .sum()
}

/// The page and its assets over plain HTTP: types, a strict policy with no
/// inline script or style, versioned assets cached for good, the page
/// revalidated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_is_served_with_a_strict_policy() {
    let store = TestStore::new(common::Backend::Sqlite).await.unwrap();
    let gw = TestGateway::start(&store).await;
    let client = common::client();
    let page = client.get(gw.url("/console")).send().await.unwrap();
    assert_eq!(page.status(), 200, "no API key needed to load the page");
    let headers = page.headers().clone();
    assert_eq!(headers["content-type"], "text/html; charset=utf-8");
    assert_eq!(headers["cache-control"], "no-cache");
    assert_eq!(headers["x-content-type-options"], "nosniff");
    let policy = headers["content-security-policy"].to_str().unwrap();
    for directive in [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "connect-src 'self'",
        "frame-ancestors 'none'",
    ] {
        assert!(policy.contains(directive), "{policy}");
    }
    assert!(!policy.contains("unsafe-inline") && !policy.contains("unsafe-eval"), "{policy}");
    let html = page.text().await.unwrap();
    let etag = headers["etag"].to_str().unwrap().to_owned();
    let build = etag.trim_matches('"');
    assert!(build.starts_with(env!("CARGO_PKG_VERSION")), "the ETag names the version: {etag}");
    for asset in ["console.js", "console.css"] {
        assert!(html.contains(&format!("/console/{asset}?v={build}")), "{asset} is versioned in the page");
    }
    // No inline script or style anywhere, nothing from another origin.
    assert_eq!(html.matches("<script").count(), 1);
    assert!(html.contains("<script src=\"/console/console.js"));
    assert!(!html.contains("<style") && !html.contains(" style=") && !html.contains(" onclick="));
    assert!(!html.contains("http://") && !html.contains("https://"), "nothing from the network");

    let again = client.get(gw.url("/console")).header("if-none-match", &etag).send().await.unwrap();
    assert_eq!(again.status(), 304);

    for (path, content_type) in [
        ("/console/console.js", "text/javascript; charset=utf-8"),
        ("/console/console.css", "text/css; charset=utf-8"),
    ] {
        let asset = client.get(gw.url(&format!("{path}?v={build}"))).send().await.unwrap();
        assert_eq!(asset.status(), 200, "{path}");
        assert_eq!(asset.headers()["content-type"], content_type, "{path}");
        assert_eq!(asset.headers()["cache-control"], "public, max-age=31536000, immutable", "{path}");
        assert!(asset.headers().contains_key("content-security-policy"), "{path}");
        // The SVG namespace is a name, not a fetch.
        let text = asset.text().await.unwrap().replace("http://www.w3.org/2000/svg", "");
        assert!(
            !text.contains("http://") && !text.contains("https://"),
            "{path} fetches nothing from the network"
        );
    }
    let script = client.get(gw.url("/console/console.js")).send().await.unwrap().text().await.unwrap();
    assert!(
        script.contains("sessionStorage")
            && !script.contains("localStorage")
            && !script.contains("document.cookie =")
    );
    assert_eq!(client.get(gw.url("/console/nothing.js")).send().await.unwrap().status(), 404);
}
