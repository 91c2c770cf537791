//! `stagger lab` tells what its simulations show, in a real browser: the
//! steps each scene's text names, followed the way a visitor does, end
//! where the text says; the words that name a setting follow the sliders;
//! each protocol's hint is asked for in its own unit; the layers axis is
//! labelled at the number the scene is about.
//!
//! Without chromium and chromedriver the test prints a note and passes,
//! unless `CI` is set: then it fails.

use crate::webdriver;

use std::time::Duration;

use serde_json::Value;
use webdriver::{open, Session};

const LONG: Duration = Duration::from_secs(90);

/// Every failover panel: its strategy and its cards' raw values.
const PANELS: &str = r#"
return [...document.querySelectorAll('#fo-panels .panel')].map(p => ({
  strategy: p.dataset.strategy,
  cards: Object.fromEntries([...p.querySelectorAll('.card')]
    .map(c => [c.dataset.key, c.dataset.value === "null" ? null : Number(c.dataset.value)])),
}));"#;

/// Clicks a step button of the failover scene and waits for the redraw
/// of the query it leads to.
async fn failover_step(s: &Session, id: &str, wants: &str) -> Value {
    s.click(&format!("#{id}")).await;
    s.wait(
        &format!("lab.last.failover.query.includes('{wants}') && !lab.busy.fo"),
        LONG,
    )
    .await;
    s.js(PANELS).await
}

/// The scene used to start on two identical charts (4.15×, never
/// recovering) for exponential and full jitter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_starts_where_jitter_shows_and_its_next_step_is_the_budget() {
    let _quiet = crate::support::quiet();
    let Some((_lab, driver, s, _one)) = open().await else {
        return;
    };
    s.wait("window.lab && lab.last.failover && !lab.busy.fo", LONG)
        .await;
    // Failover, steps 1 and 2: with the scene's defaults, jitter shows.
    // (It used to start where the two charts were the same, 4.15×, never
    // recovering.)
    let exponential = failover_step(&s, "fo-step-exponential", "strategy=exponential&").await;
    let full = failover_step(&s, "fo-step-full", "strategy=full&").await;
    let (e, f) = (&exponential[0]["cards"], &full[0]["cards"]);
    let peak = |c: &Value| c["post_outage_peak_over_capacity"].as_f64().unwrap();
    assert!(
        peak(f) * 2.0 < peak(e),
        "full jitter's peak {} is not well below exponential's {}",
        peak(f),
        peak(e)
    );
    let (er, fr) = (e["recovery_s"].as_f64(), f["recovery_s"].as_f64());
    assert!(fr.is_some(), "full jitter recovers: {f}");
    assert!(er.is_none_or(|er| fr.unwrap() < er), "and sooner: {e} {f}");

    // Step 3, the 80 % fleet: jitter alone does not save the dependency, a
    // budget and a breaker do.
    let next = failover_step(&s, "fo-next", "capacity=10&").await;
    let query = s.js("return lab.last.failover.query;").await;
    let query = query.as_str().unwrap();
    for part in [
        "base=100ms",
        "attempts=5",
        "strategy=full%2Cfull%2Bbudget%2Bbreaker",
    ] {
        assert!(query.contains(part), "{part}: {query}");
    }
    assert_eq!(next[0]["strategy"], "full");
    assert!(next[0]["cards"]["recovery_s"].is_null(), "{next}");
    assert_eq!(next[1]["strategy"], "full+budget+breaker");
    assert!(next[1]["cards"]["recovery_s"].is_number(), "{next}");

    assert_eq!(s.js("return lab.errors;").await, serde_json::json!([]));
    webdriver::close(s, driver).await;
}

/// "serves 10 attempts per tick" stayed after capacity moved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_words_follow_the_sliders() {
    let _quiet = crate::support::quiet();
    let Some((_lab, driver, s, _one)) = open().await else {
        return;
    };
    s.wait("window.lab && lab.last.failover && !lab.busy.fo", LONG)
        .await;
    // The words follow the sliders.
    s.js(
        r#"const e = document.getElementById("fo-capacity"); e.value = "20";
            e.dispatchEvent(new Event("input")); return 0;"#,
    )
    .await;
    s.wait(
        "lab.last.failover.query.includes('capacity=20&') && !lab.busy.fo",
        LONG,
    )
    .await;
    let intro = s
        .js("return document.querySelector('#scene-failover .explain').textContent.replace(/\\s+/g, ' ');")
        .await;
    let intro = intro.as_str().unwrap();
    assert!(intro.contains("serves 20 attempts per tick"), "{intro}");
    assert!(intro.contains("40 % busy"), "{intro}");

    assert_eq!(s.js("return lab.errors;").await, serde_json::json!([]));
    webdriver::close(s, driver).await;
}

/// The intro promised recovery from skipping expired work alone, and
/// "of which retries" stood above "attempts arriving".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metastable_steps_end_as_the_text_says_and_retries_never_exceed_attempts() {
    let _quiet = crate::support::quiet();
    let Some((_lab, driver, s, _one)) = open().await else {
        return;
    };
    // Metastable: each step's claim (recovered or not) is what the
    // simulation answers for it.
    s.click("#nav button[data-scene=metastable]").await;
    s.wait("lab.last.metastable && !lab.busy.me", LONG).await;
    let steps = s
        .js("return [...document.querySelectorAll('#scene-metastable .step')].map(b => [b.id, b.dataset.recovered]);")
        .await;
    let steps = steps.as_array().unwrap();
    assert!(steps.len() >= 2, "the scene names its steps");
    assert_eq!(steps.last().unwrap()[1], "yes", "the story ends recovered");
    for st in steps {
        let (id, claim) = (st[0].as_str().unwrap(), st[1].as_str().unwrap());
        let before = s.js("return lab.last.metastable.query;").await;
        s.click(&format!("#{id}")).await;
        s.wait(
            &format!(
                "(lab.last.metastable.query !== {before} || {first}) && !lab.busy.me",
                first = id == steps[0][0].as_str().unwrap()
            ),
            LONG,
        )
        .await;
        let shown = s
            .js(r#"return [document.querySelector('#me-panels .card[data-key=recovered] .v').textContent,
                           lab.last.metastable.doc.strategies[0].recovered];"#)
            .await;
        assert_eq!(shown[0], claim, "{id}: the page says {shown}");
        assert_eq!(shown[1], claim == "yes", "{id}: the simulation");
        // Attempts arriving are counted where the retries are.
        let series = s
            .js("const r = lab.last.metastable.doc.strategies[0].series; return [r.load, r.retries];")
            .await;
        let (load, retries) = (series[0].as_array().unwrap(), series[1].as_array().unwrap());
        for (l, r) in load.iter().zip(retries) {
            assert!(
                r.as_f64() <= l.as_f64(),
                "{id}: {r} retries of {l} attempts"
            );
        }
    }

    assert_eq!(s.js("return lab.errors;").await, serde_json::json!([]));
    webdriver::close(s, driver).await;
}

/// One field, "Retry-After / pushback ms", read 2 as 2 s for HTTP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decide_asks_for_each_protocols_hint_in_its_own_unit() {
    let _quiet = crate::support::quiet();
    let Some((_lab, driver, s, _one)) = open().await else {
        return;
    };
    // Should this call be retried: HTTP's hint is in seconds, gRPC's in ms.
    s.click("#nav button[data-scene=decide]").await;
    let labels = r#"
        const set = (id, v) => { const e = document.getElementById(id); e.value = v; };
        set("de-kind", KIND);
        document.getElementById("de-kind").dispatchEvent(new Event("change"));
        return [...document.querySelectorAll('#scene-decide label')]
          .filter(l => !l.hidden && l.querySelector('input:not([type=checkbox]):not([type=number])'))
          .map(l => l.textContent.trim().replace(/\s+/g, ' '));"#;
    let http = s.js(&labels.replace("KIND", "'status'")).await;
    let http = format!("{http}");
    assert!(http.contains("Retry-After, in seconds"), "{http}");
    assert!(!http.contains("ms"), "{http}");
    let grpc = s.js(&labels.replace("KIND", "'grpc'")).await;
    let grpc = format!("{grpc}");
    assert!(grpc.contains("in milliseconds"), "{grpc}");
    assert!(!grpc.contains("Retry-After"), "{grpc}");
    s.js(
        r#"const e = document.getElementById("de-pushback"); e.value = "2";
            e.dispatchEvent(new Event("change")); return 0;"#,
    )
    .await;
    s.wait(
        "lab.last.decide && lab.last.decide.query.includes('grpc=') && lab.last.decide.query.includes('pushback=2')",
        LONG,
    )
    .await;

    assert_eq!(s.js("return lab.errors;").await, serde_json::json!([]));
    webdriver::close(s, driver).await;
}

/// The log axis had no label at 64 (4 attempts, 3 layers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn layers_log_axis_is_labelled_at_attempts_to_the_layers() {
    let _quiet = crate::support::quiet();
    let Some((_lab, driver, s, _one)) = open().await else {
        return;
    };
    // Layers: the log axis is labelled at attempts^layers (64 for 3 × 4).
    s.click("#nav button[data-scene=layers]").await;
    s.wait("lab.last.layers && !lab.busy.la && lab.charts.la", LONG)
        .await;
    let ticks = s
        .js("const u = lab.charts.la; return u.axes[1]._values || u.axes[1].values(u, u.axes[1]._splits || []);")
        .await;
    assert!(
        format!("{ticks}").contains("\"64\""),
        "the y axis labels: {ticks}"
    );
    assert_eq!(s.js("return lab.errors;").await, serde_json::json!([]));
    webdriver::close(s, driver).await;
}
