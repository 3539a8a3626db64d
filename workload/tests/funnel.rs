//! The funnel's outer layers against the real stack (issue 36): the status
//! anyone can cache, answered from the API's memory, and the sale page in a
//! real headless Chromium. The Redis node is stalled (`DEBUG SLEEP`) to show
//! that neither the status nor a sold-out purchase waits on it, and each
//! browser is a few hundred MB, so the scenarios run one at a time.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use common::{Answer, LiveSale, SaleSpec, consume_until_drained, within};
use flashsale_testkit::browser::Browser;
use flashsale_workload::domain::admission::{self, Admission, ChallengeRule};
use flashsale_workload::load::evidence::Told;
use flashsale_workload::redis::RedisConn;
use flashsale_workload::redis::keys::QueueKeys;
use tokio::sync::Mutex;

static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

/// A status answer: its code, headers and body.
struct Status {
    code: u16,
    etag: String,
    cache_control: String,
    bytes: usize,
    body: serde_json::Value,
}

async fn status(live: &LiveSale, name: &str, if_none_match: Option<&str>) -> Status {
    let mut request = live
        .api
        .client
        .get(format!("{}/v1/sales/{name}/status", live.api.url));
    if let Some(tag) = if_none_match {
        request = request.header("if-none-match", tag);
    }
    let response = request.send().await.unwrap();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default()
    };
    let (code, etag, cache_control) = (
        response.status().as_u16(),
        header("etag"),
        header("cache-control"),
    );
    let text = response.text().await.unwrap();
    Status {
        code,
        etag,
        cache_control,
        bytes: text.len(),
        body: serde_json::from_str(&text).unwrap_or(serde_json::Value::Null),
    }
}

/// Stalls the whole Redis node for `seconds` from a connection of its own.
fn stall_redis(seconds: u32) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut conn = RedisConn::connect(&common::redis_node()).await.unwrap();
        let _: Result<redis::Value, _> = redis::cmd("DEBUG")
            .arg("SLEEP")
            .arg(seconds)
            .query_async(&mut conn)
            .await;
    })
}

/// The status: public, small, cacheable for a second, revalidated by its
/// ETag, changing as the stock runs down, and answered while Redis stalls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_is_cacheable_small_and_answered_from_memory() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let live = LiveSale::start(common::redis_node(), 20, 2, 20).await;
    let name = live.config.sale.name.clone();

    let first = status(&live, &name, None).await;
    assert_eq!(first.code, 200, "{:?}", first.body);
    assert_eq!(first.cache_control, "public, max-age=1");
    assert!(first.etag.starts_with("W/\""), "weak ETag: {}", first.etag);
    assert!(first.bytes < 400, "{} bytes: {}", first.bytes, first.body);
    assert_eq!(first.body["sale"], name.as_str());
    assert_eq!(first.body["state"], "live");
    assert_eq!(first.body["stock"], "plenty");
    let server_time: DateTime<Utc> = first.body["serverTime"].as_str().unwrap().parse().unwrap();
    assert!((Utc::now() - server_time).num_seconds().abs() <= 1);

    let again = status(&live, &name, Some(&first.etag)).await;
    assert_eq!((again.code, again.bytes), (304, 0));
    assert_eq!(again.etag, first.etag);
    let other = status(&live, &name, Some("W/\"someone-else\"")).await;
    assert_eq!(other.code, 200);

    let unknown = status(&live, "no-such-sale", None).await;
    assert_eq!(
        (unknown.code, unknown.body["code"].as_str()),
        (404, Some("SALE_NOT_FOUND"))
    );

    // 18 of 20 sold: a tenth or less left, a new tag.
    for i in 0..18 {
        let answer = live.api.buy(&live.config.sale, &format!("s{i}"), 1).await;
        assert_eq!(answer.status, 202, "{answer:?}");
    }
    within(Duration::from_secs(5), "the status says few", || async {
        status(&live, &name, None).await.body["stock"] == "few"
    })
    .await;
    assert_eq!(status(&live, &name, Some(&first.etag)).await.code, 200);

    // Sold out: the purchase after the last unit tells every status at once.
    for i in 18..21 {
        live.api.buy(&live.config.sale, &format!("s{i}"), 1).await;
    }
    let sold_out = status(&live, &name, None).await;
    assert_eq!(
        (
            sold_out.body["state"].as_str(),
            sold_out.body["stock"].as_str()
        ),
        (Some("soldOut"), Some("none")),
        "{}",
        sold_out.body
    );

    // Redis stalls for 3 s: the status and a sold-out purchase (no
    // idempotency key) answer at once all the same.
    let stall = stall_redis(3);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    for _ in 0..50 {
        assert_eq!(status(&live, &name, Some(&sold_out.etag)).await.code, 304);
    }
    let refused: Answer = live.api.buy(&live.config.sale, "late", 1).await;
    let took = started.elapsed();
    assert_eq!((refused.status, refused.code()), (409, "SOLD_OUT"));
    assert!(
        took < Duration::from_millis(1500),
        "50 statuses and a sold-out purchase took {took:?} while Redis stalled"
    );
    stall.await.unwrap();
}

/// Polls the element `id` of the page until `check` holds on its text and
/// whether it is enabled (10 s at most).
async fn page_shows(
    browser: &Browser,
    id: &str,
    what: &str,
    check: impl Fn(&str, bool) -> bool,
) -> String {
    let mut last = String::new();
    for _ in 0..200 {
        let element = browser.by_test_id(id).await.unwrap();
        last = element.text().await.unwrap_or_default();
        if check(&last, element.is_enabled().await.unwrap_or(false)) {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the page's {id} never showed {what}; it shows {last:?}");
}

/// Saves what the page shows now as `results/page-tests/NAME.png`: the
/// moments the demo's open sale does not have (sold out at first sight, a
/// place in a queue, the queue closed).
async fn picture(browser: &Browser, name: &str) {
    let dir = flashsale_testkit::repo_dir().join("results/page-tests");
    std::fs::create_dir_all(&dir).unwrap();
    browser
        .screenshot(&dir.join(format!("{name}.png")))
        .await
        .unwrap();
}

/// The attribute `name` of the page's element `id`.
async fn attr(browser: &Browser, id: &str, name: &str) -> Option<String> {
    browser
        .by_test_id(id)
        .await
        .unwrap()
        .attr(name)
        .await
        .unwrap()
}

async fn order_attr(browser: &Browser, name: &str) -> Option<String> {
    attr(browser, "order", name).await
}

/// The page counts down on the server's clock, enables the button at the
/// start (not before), buys once, follows the order to UNPAID, keeps it
/// across a reload and starts the payment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_counts_down_opens_at_the_start_and_buys_to_unpaid() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let start = Utc::now() + chrono::Duration::seconds(8);
    let live = LiveSale::of_spec(
        common::redis_node(),
        |namespace| SaleSpec {
            start,
            ..SaleSpec::live(namespace, 3, 1, 1)
        },
        |_| {},
    )
    .await;
    let browser = Browser::start().await.unwrap();
    let page = format!("{}/s/{}", live.api.url, live.config.sale.name);
    browser.client.goto(&page).await.unwrap();
    page_shows(&browser, "countdown", "a countdown", |text, _| {
        text.starts_with("Starts in 00:00:0")
    })
    .await;
    page_shows(&browser, "buy", "a disabled button", |_, enabled| !enabled).await;
    browser.type_into("#shopper", "page-alice").await.unwrap();

    // Enabled at the start on the server's clock: not 0.7 s before, nor 2 s after.
    page_shows(&browser, "buy", "the button enabled", |_, enabled| {
        let early = Utc::now() < start - chrono::Duration::milliseconds(700);
        assert!(
            !(enabled && early),
            "enabled at {} before {start}",
            Utc::now()
        );
        enabled || Utc::now() > start + chrono::Duration::seconds(2)
    })
    .await;
    assert!(
        browser
            .by_test_id("buy")
            .await
            .unwrap()
            .is_enabled()
            .await
            .unwrap()
    );

    browser
        .by_test_id("buy")
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    within(
        Duration::from_secs(10),
        "the page shows the order",
        || async { order_attr(&browser, "data-order-id").await.is_some() },
    )
    .await;
    let order_id = order_attr(&browser, "data-order-id").await.unwrap();
    consume_until_drained(&live.db, &live.store, &live.config).await;
    within(
        Duration::from_secs(10),
        "the order UNPAID on the page",
        || async { order_attr(&browser, "data-state").await.as_deref() == Some("UNPAID") },
    )
    .await;
    let told = live
        .api
        .order(order_id.parse().unwrap(), "page-alice")
        .await;
    assert_eq!(told.body["status"], "UNPAID", "{told:?}");

    // A reload keeps the order and does not buy again.
    browser.client.refresh().await.unwrap();
    within(Duration::from_secs(10), "the order shown again", || async {
        order_attr(&browser, "data-state").await.as_deref() == Some("UNPAID")
    })
    .await;
    assert_eq!(order_attr(&browser, "data-order-id").await, Some(order_id));
    page_shows(
        &browser,
        "buy",
        "the button disabled after the purchase",
        |_, e| !e,
    )
    .await;
    browser
        .by_test_id("pay")
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    page_shows(&browser, "order", "the payment started", |text, _| {
        text.contains("Payment ")
    })
    .await;
    assert_eq!(live.remaining().await, 2, "one unit bought, once");
    browser.close().await;
}

/// A sold-out sale: the page says so and never tries to buy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_sold_out_without_a_purchase_attempt() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let live = LiveSale::start(common::redis_node(), 1, 1, 1).await;
    assert_eq!(
        live.api.buy(&live.config.sale, "first", 1).await.status,
        202
    );
    let browser = Browser::start().await.unwrap();
    browser
        .client
        .goto(&format!("{}/s/{}", live.api.url, live.config.sale.name))
        .await
        .unwrap();
    page_shows(&browser, "status", "sold out", |text, _| {
        text == "Sold out."
    })
    .await;
    page_shows(&browser, "countdown", "sold out", |text, _| {
        text == "Sold out."
    })
    .await;
    page_shows(&browser, "buy", "a disabled button", |_, enabled| !enabled).await;
    picture(&browser, "sold-out").await;
    let fetched = browser
        .client
        .execute(
            "return performance.getEntriesByType('resource').map(e => e.name)",
            vec![],
        )
        .await
        .unwrap();
    let urls: Vec<String> = serde_json::from_value(fetched).unwrap();
    assert!(urls.iter().any(|u| u.ends_with("/status")), "{urls:?}");
    assert!(!urls.iter().any(|u| u.ends_with("/orders")), "{urls:?}");
    browser.close().await;
}

/// A queued sale: opens `prequeue` before a start `start_in` from now,
/// admits `rate` a second, asks a challenge of `difficulty` bits if any.
async fn queued_sale(
    stock: i64,
    start_in: chrono::Duration,
    prequeue: Duration,
    rate: u32,
    difficulty: Option<u8>,
) -> LiveSale {
    LiveSale::of_spec(
        common::redis_node(),
        |namespace| SaleSpec {
            start: Utc::now() + start_in,
            admission: Some(Admission {
                prequeue,
                rate_per_sec: rate,
                challenge: difficulty.map(|d| ChallengeRule {
                    difficulty: d,
                    max_difficulty: d,
                }),
            }),
            ..SaleSpec::live(namespace, stock, 1, 1)
        },
        |_| {},
    )
    .await
}

/// `method` `path` on the API as `shopper`, with a JSON body if any.
async fn call(
    live: &LiveSale,
    method: &str,
    path: &str,
    shopper: &str,
    body: Option<serde_json::Value>,
) -> Answer {
    let url = format!("{}{path}", live.api.url);
    let request = match method {
        "POST" => live
            .api
            .client
            .post(url)
            .json(&body.unwrap_or(serde_json::json!({}))),
        _ => live.api.client.get(url),
    };
    Answer::read(live.api.identify(request, shopper).send().await.unwrap()).await
}

/// The same, asked again after `Retry-After` while the API sheds load
/// (503 BUSY), as a storm's clients do.
async fn call_until_taken(live: &LiveSale, method: &str, path: &str, shopper: &str) -> Answer {
    loop {
        let answer = call(live, method, path, shopper, None).await;
        if answer.code() != "BUSY" {
            return answer;
        }
        let wait: u64 = answer
            .retry_after
            .as_deref()
            .and_then(|s| s.parse().ok())
            .unwrap_or(1);
        tokio::time::sleep(Duration::from_secs(wait)).await;
    }
}

/// A solution to the challenge `nonce` of `difficulty` bits.
fn solve(nonce: &str, difficulty: u8) -> String {
    (0u64..)
        .map(|n| n.to_string())
        .find(|s| {
            admission::leading_zero_bits(&admission::solution_hash(nonce, s))
                >= u32::from(difficulty)
        })
        .unwrap()
}

/// Joins `name`'s queue as `shopper`, solving its challenge.
async fn join(live: &LiveSale, shopper: &str) -> Answer {
    let name = &live.config.sale.name;
    let challenge = call(
        live,
        "GET",
        &format!("/v1/sales/{name}/challenge"),
        shopper,
        None,
    )
    .await;
    assert_eq!(challenge.status, 200, "{challenge:?}");
    let nonce = challenge.body["nonce"].as_str().unwrap();
    let difficulty = challenge.body["difficulty"].as_u64().unwrap() as u8;
    let body =
        serde_json::json!({"challenge": {"nonce": nonce, "solution": solve(nonce, difficulty)}});
    call(
        live,
        "POST",
        &format!("/v1/sales/{name}/queue"),
        shopper,
        Some(body),
    )
    .await
}

fn expect(answer: &Answer, status: u16, code: &str) {
    assert_eq!((answer.status, answer.code()), (status, code), "{answer:?}");
}

/// POSTs a purchase of one unit as `shopper` with the purchase token `token`.
async fn buy_with_token(live: &LiveSale, shopper: &str, token: &str) -> Answer {
    let request = live
        .api
        .client
        .post(format!(
            "{}/v1/sales/{}/orders",
            live.api.url, live.config.sale.name
        ))
        .header("x-user-id", shopper)
        .header("purchase-token", token)
        .json(&serde_json::json!({"quantity": 1}));
    Answer::read(request.send().await.unwrap()).await
}

/// The challenge's refusals (none, wrong, another shopper's, reused), all
/// 403 `CHALLENGE_FAILED`; returns alice's join with a right answer.
async fn challenge_refusals(live: &LiveSale) -> Answer {
    let name = live.config.sale.name.clone();
    let queue = format!("/v1/sales/{name}/queue");
    // No answer, a wrong one, another shopper's, one used twice.
    expect(
        &call(live, "POST", &queue, "alice", None).await,
        403,
        "CHALLENGE_FAILED",
    );
    let challenge = call(
        live,
        "GET",
        &format!("/v1/sales/{name}/challenge"),
        "alice",
        None,
    )
    .await;
    let nonce = challenge.body["nonce"].as_str().unwrap().to_string();
    let difficulty = challenge.body["difficulty"].as_u64().unwrap() as u8;
    let wrong = (0u64..)
        .map(|n| n.to_string())
        .find(|s| {
            admission::leading_zero_bits(&admission::solution_hash(&nonce, s))
                < u32::from(difficulty)
        })
        .unwrap();
    let answer = |solution: &str| {
        Some(serde_json::json!({"challenge": {"nonce": nonce, "solution": solution}}))
    };
    expect(
        &call(live, "POST", &queue, "alice", answer(&wrong)).await,
        403,
        "CHALLENGE_FAILED",
    );
    let right = solve(&nonce, difficulty);
    expect(
        &call(live, "POST", &queue, "bob", answer(&right)).await,
        403,
        "CHALLENGE_FAILED",
    );
    let joined = call(live, "POST", &queue, "alice", answer(&right)).await;
    expect(
        &call(live, "POST", &queue, "alice", answer(&right)).await,
        403,
        "CHALLENGE_FAILED",
    );
    joined
}

/// Bad input to the queue: each a 4xx with its code, nothing admitted,
/// nothing reserved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_refuses_bad_input_and_admits_nothing() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let live = queued_sale(
        5,
        chrono::Duration::minutes(5),
        Duration::from_secs(600),
        1000,
        Some(6),
    )
    .await;
    let name = live.config.sale.name.clone();
    let queue = format!("/v1/sales/{name}/queue");

    let joined = challenge_refusals(&live).await;
    assert_eq!(joined.status, 202, "{joined:?}");
    assert_eq!(joined.body["state"], "waiting");
    assert!(
        joined.body["position"].is_null(),
        "drawn at the start: {joined:?}"
    );
    let again = join(&live, "alice").await;
    assert_eq!(
        again.body["ticket"], joined.body["ticket"],
        "one ticket per shopper"
    );

    // Tickets: another shopper's, a forged one.
    let ticket = joined.body["ticket"].as_str().unwrap().to_string();
    expect(
        &call(&live, "GET", &format!("{queue}/{ticket}"), "bob", None).await,
        404,
        "NOT_FOUND",
    );
    let forged = format!("{}.{}", ticket.split_once('.').unwrap().0, "00".repeat(32));
    expect(
        &call(&live, "GET", &format!("{queue}/{forged}"), "alice", None).await,
        404,
        "NOT_FOUND",
    );

    // Tokens only through the queue: none from the token route, a purchase
    // without one, or with a token of another sale, is refused.
    expect(
        &call(
            &live,
            "GET",
            &format!("/v1/sales/{name}/token"),
            "alice",
            None,
        )
        .await,
        403,
        "QUEUE_REQUIRED",
    );
    expect(
        &live.api.buy(&live.config.sale, "alice", 1).await,
        403,
        "TOKEN_REQUIRED",
    );
    let elsewhere = flashsale_workload::domain::purchase_token::TokenClaims {
        sale_id: uuid::Uuid::now_v7(),
        shopper: "alice".into(),
        nonce: uuid::Uuid::now_v7(),
        expires_ms: Utc::now().timestamp_millis() + 30_000,
    }
    .sign(common::PURCHASE_TOKEN_SECRET);
    expect(
        &buy_with_token(&live, "alice", &elsewhere).await,
        403,
        "TOKEN_INVALID",
    );

    // Joining before the queue opens.
    let later = queued_sale(5, chrono::Duration::minutes(10), Duration::ZERO, 10, None).await;
    let early = call(
        &later,
        "POST",
        &format!("/v1/sales/{}/queue", later.config.sale.name),
        "alice",
        None,
    )
    .await;
    expect(&early, 409, "QUEUE_NOT_OPEN");
    assert_eq!(live.remaining().await, 5, "nothing reserved");
}

/// The honest shopper is admitted at the start, buys with the queue's
/// token, and keeps their place across a Redis loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admitted_shopper_buys_with_the_queue_s_token_and_keeps_the_place() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let live = queued_sale(
        5,
        chrono::Duration::seconds(3),
        Duration::from_secs(600),
        1000,
        None,
    )
    .await;
    let queue = format!("/v1/sales/{}/queue", live.config.sale.name);
    let joined = call(&live, "POST", &queue, "alice", None).await;
    let ticket = joined.body["ticket"].as_str().unwrap().to_string();
    within(Duration::from_secs(10), "alice admitted", || async {
        call(&live, "GET", &format!("{queue}/{ticket}"), "alice", None)
            .await
            .body["state"]
            == "admitted"
    })
    .await;
    let place = call(&live, "GET", &format!("{queue}/{ticket}"), "alice", None).await;
    let token = place.body["purchaseToken"]["token"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(buy_with_token(&live, "alice", &token).await.status, 202);
    assert_eq!(live.remaining().await, 4, "one unit bought");

    // The queue lost with Redis: the ticket puts its holder back in place.
    let mut conn = RedisConn::connect(&common::redis_node()).await.unwrap();
    let () = redis::cmd("DEL")
        .arg(QueueKeys::new(&live.config.sale).line)
        .query_async(&mut conn)
        .await
        .unwrap();
    let back = call(&live, "GET", &format!("{queue}/{ticket}"), "alice", None).await;
    assert_eq!(
        (back.status, back.body["state"].as_str()),
        (200, Some("admitted")),
        "{back:?}"
    );
    assert_eq!(back.body["ticket"].as_str(), Some(ticket.as_str()));
    let length: u64 = redis::cmd("ZCARD")
        .arg(QueueKeys::new(&live.config.sale).line)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(length, 1, "the place is back");
}

async fn local_storage(browser: &Browser, key: &str) -> Option<String> {
    let value = browser
        .client
        .execute(
            "return localStorage.getItem(arguments[0])",
            vec![key.into()],
        )
        .await
        .unwrap();
    value.as_str().map(str::to_string)
}

/// The first of `tickets`' holders found admitted, with their token.
async fn first_admitted(live: &LiveSale, tickets: &[(String, String)]) -> (String, String) {
    let queue = format!("/v1/sales/{}/queue", live.config.sale.name);
    loop {
        for (shopper, ticket) in tickets {
            let place = call(live, "GET", &format!("{queue}/{ticket}"), shopper, None).await;
            if place.body["state"] == "admitted" {
                let token = place.body["purchaseToken"]["token"].as_str().unwrap();
                return (shopper.clone(), token.to_string());
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn queue_attr(browser: &Browser, name: &str) -> Option<String> {
    attr(browser, "queue", name).await
}

/// The position and ETA the page shows.
async fn queue_place(browser: &Browser) -> (u64, u64) {
    let number = |v: Option<String>| v.unwrap().parse::<u64>().unwrap();
    (
        number(queue_attr(browser, "data-position").await),
        number(queue_attr(browser, "data-eta").await),
    )
}

/// The page in a queued sale: joins behind thirty others, keeps its place
/// (and an ETA that does not rise) across a reload, and shows the queue
/// closed as soon as the last unit is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_keeps_its_place_across_a_reload_and_sees_the_queue_close() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let live = queued_sale(
        1,
        chrono::Duration::seconds(3),
        Duration::from_secs(600),
        1,
        None,
    )
    .await;
    let name = live.config.sale.name.clone();
    let queue = format!("/v1/sales/{name}/queue");
    let mut tickets = Vec::new();
    for i in 0..30 {
        let joined = call(&live, "POST", &queue, &format!("early-{i}"), None).await;
        assert_eq!(joined.status, 202, "{joined:?}");
        tickets.push((
            format!("early-{i}"),
            joined.body["ticket"].as_str().unwrap().to_string(),
        ));
    }
    let browser = Browser::start().await.unwrap();
    browser
        .client
        .goto(&format!("{}/s/{name}", live.api.url))
        .await
        .unwrap();
    browser.type_into("#shopper", "page-carol").await.unwrap();
    // After the start: carol queues behind the thirty drawn by lot.
    tokio::time::sleep_until(tokio::time::Instant::now() + Duration::from_secs(3)).await;
    page_shows(&browser, "buy", "the join button", |text, enabled| {
        enabled && text == "Join the queue"
    })
    .await;
    browser
        .by_test_id("buy")
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    within(Duration::from_secs(10), "a position shown", || async {
        queue_attr(&browser, "data-position").await.is_some()
    })
    .await;
    let ticket_key = format!("flashsale.ticket.{name}");
    let ticket = local_storage(&browser, &ticket_key)
        .await
        .expect("the ticket kept");
    let (position_before, eta_before) = queue_place(&browser).await;
    assert!(position_before > 20, "behind the thirty: {position_before}");

    browser.client.refresh().await.unwrap();
    within(Duration::from_secs(10), "the place shown again", || async {
        queue_attr(&browser, "data-position").await.is_some()
    })
    .await;
    assert_eq!(local_storage(&browser, &ticket_key).await, Some(ticket));
    let (position_after, eta_after) = queue_place(&browser).await;
    assert!(eta_after <= eta_before && position_after <= position_before);
    picture(&browser, "queue-place").await;
    page_shows(&browser, "buy", "the join button disabled", |_, enabled| {
        !enabled
    })
    .await;

    // The first admitted of the thirty buys the one unit: the queue closes.
    let (shopper, token) = first_admitted(&live, &tickets).await;
    assert_eq!(buy_with_token(&live, &shopper, &token).await.status, 202);
    let closed_in = within(Duration::from_secs(3), "the queue shown closed", || async {
        queue_attr(&browser, "data-state").await.as_deref() == Some("closed")
    })
    .await;
    eprintln!("the page showed the queue closed {closed_in:?} after the last unit went");
    picture(&browser, "queue-closed").await;
    let place = call(
        &live,
        "GET",
        &format!("{queue}/{}", tickets[0].1),
        &tickets[0].0,
        None,
    )
    .await;
    assert!(
        ["closed", "admitted"].contains(&place.body["state"].as_str().unwrap()),
        "{place:?}"
    );
    browser.close().await;
}

/// What one shopper of the queue storm saw.
#[derive(Default)]
struct Followed {
    /// (position, ETA) of every waiting answer after the start.
    places: Vec<(u64, u64)>,
    admitted: bool,
    token_given: bool,
    bought: Option<(Answer, Instant)>,
    closed_at: Option<Instant>,
}

/// A shopper of the storm: joins, follows their place (at most a second
/// between asks), buys once admitted, stops when closed.
async fn follow_queue(live: Arc<LiveSale>, shopper: String, ticket: String) -> Followed {
    let name = live.config.sale.name.clone();
    let mut seen = Followed::default();
    loop {
        let place = call_until_taken(
            &live,
            "GET",
            &format!("/v1/sales/{name}/queue/{ticket}"),
            &shopper,
        )
        .await;
        assert_eq!(place.status, 200, "{place:?}");
        match place.body["state"].as_str().unwrap() {
            "admitted" => {
                seen.admitted = true;
                let token = place.body["purchaseToken"]["token"].as_str();
                seen.token_given = token.is_some();
                // Shed (503 BUSY): the same purchase again, same key.
                let answer = loop {
                    let request = live
                        .api
                        .client
                        .post(format!("{}/v1/sales/{name}/orders", live.api.url))
                        .header("x-user-id", &shopper)
                        .header("purchase-token", token.unwrap_or_default())
                        .header("idempotency-key", format!("storm-{shopper}"))
                        .json(&serde_json::json!({"quantity": 1}));
                    let answer = Answer::read(request.send().await.unwrap()).await;
                    if answer.code() != "BUSY" {
                        break answer;
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                };
                seen.bought = Some((answer, Instant::now()));
                return seen;
            }
            "closed" => {
                seen.closed_at = Some(Instant::now());
                return seen;
            }
            _ => {
                if let (Some(position), Some(eta)) = (
                    place.body["position"].as_u64(),
                    place.body["etaSeconds"].as_u64(),
                ) {
                    seen.places.push((position, eta));
                }
                let after = place.body["pollAfterSeconds"].as_u64().unwrap_or(1).min(1);
                tokio::time::sleep(Duration::from_secs(after)).await;
            }
        }
    }
}

/// 20× the stock joins the queue in the same second before the start: every
/// admitted shopper gets a token, nobody waits more than 2 s after the last
/// unit goes, no position or ETA rises, and I1–I6 hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_of_twenty_times_the_stock_through_the_queue() {
    let _serial = ONE_AT_A_TIME.lock().await;
    const STOCK: i64 = 50;
    let live = Arc::new(
        queued_sale(
            STOCK,
            chrono::Duration::seconds(4),
            Duration::from_secs(600),
            100,
            None,
        )
        .await,
    );
    let name = live.config.sale.name.clone();
    let joins = (0..STOCK * 20).map(|i| {
        let live = live.clone();
        let name = name.clone();
        async move {
            let shopper = format!("storm-{i}");
            let joined =
                call_until_taken(&live, "POST", &format!("/v1/sales/{name}/queue"), &shopper).await;
            assert_eq!(joined.status, 202, "{joined:?}");
            (shopper, joined.body["ticket"].as_str().unwrap().to_string())
        }
    });
    let started = Instant::now();
    let tickets = futures::future::join_all(joins).await;
    eprintln!("{} joined in {:?}", tickets.len(), started.elapsed());
    let followers = tickets
        .into_iter()
        .map(|(shopper, ticket)| tokio::spawn(follow_queue(live.clone(), shopper, ticket)));
    let seen: Vec<Followed> = futures::future::join_all(followers)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();

    let admitted = seen.iter().filter(|s| s.admitted).count();
    assert!(admitted as i64 >= STOCK, "{admitted} admitted");
    assert!(
        seen.iter().filter(|s| s.admitted).all(|s| s.token_given),
        "an admitted shopper without a token"
    );
    for s in &seen {
        assert!(
            s.places
                .windows(2)
                .all(|w| w[1].0 <= w[0].0 && w[1].1 <= w[0].1),
            "a place or an ETA rose: {:?}",
            s.places
        );
    }
    let mut told = Told::default();
    let mut sold_out_at = started;
    for (i, s) in seen.iter().enumerate() {
        if let Some((answer, at)) = &s.bought {
            match answer.status {
                202 => {
                    told.accepted.insert(
                        answer.order_id().unwrap().to_string(),
                        (format!("storm-{i}"), 1),
                    );
                    sold_out_at = sold_out_at.max(*at);
                }
                409 => assert_eq!(answer.code(), "SOLD_OUT", "{answer:?}"),
                _ => panic!("{answer:?}"),
            }
        }
    }
    assert_eq!(
        told.accepted.len() as i64,
        STOCK,
        "the stock sold through the queue"
    );
    // Everyone still waiting when the last unit went was told within 2 s.
    let closed: Vec<Instant> = seen.iter().filter_map(|s| s.closed_at).collect();
    assert!(!closed.is_empty(), "nobody was told the queue closed");
    let slowest = closed
        .iter()
        .map(|at| at.saturating_duration_since(sold_out_at))
        .max()
        .unwrap();
    eprintln!(
        "{} told closed, the last {slowest:?} after the last unit went; {admitted} admitted",
        closed.len()
    );
    assert!(
        slowest <= Duration::from_secs(2),
        "a shopper waited {slowest:?} after the sell-out"
    );

    consume_until_drained(&live.db, &live.store, &live.config).await;
    live.assert_invariants(&told).await;
}
