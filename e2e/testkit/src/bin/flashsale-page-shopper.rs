//! `flashsale-page-shopper PAGE_URL JWT_SECRET_FILE SHOPPER OUT.png`: one
//! shopper on the sale page in a headless Chromium, for `make demo`'s
//! report — signed in (an HS256 token in the page's storage, as a shop's
//! login would leave it), buys at the button, and saves the page once the
//! order is UNPAID, its pay step showing.

use std::time::{Duration, Instant};

use flashsale_testkit::browser::Browser;
use jsonwebtoken::{EncodingKey, Header, encode};

/// Polls `check` every 100 ms until it holds or `limit` passes.
async fn until<F: Future<Output = bool>>(
    limit: Duration,
    what: &str,
    check: impl Fn() -> F,
) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    while !check().await {
        if Instant::now() > deadline {
            return Err(format!("{what}: not within {limit:?}"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

async fn shop(browser: &Browser, page: &str, token: &str, out: &str) -> Result<(), String> {
    let client = &browser.client;
    client.goto(page).await.map_err(|e| e.to_string())?;
    client
        .execute(
            "localStorage.setItem('flashsale.token', arguments[0])",
            vec![serde_json::json!(token)],
        )
        .await
        .map_err(|e| e.to_string())?;
    client.refresh().await.map_err(|e| e.to_string())?;
    let buy = || async {
        match browser.by_test_id("buy").await {
            Ok(button) => button.is_enabled().await.unwrap_or(false),
            Err(_) => false,
        }
    };
    until(Duration::from_secs(30), "the buy button enabled", buy).await?;
    browser
        .by_test_id("buy")
        .await?
        .click()
        .await
        .map_err(|e| e.to_string())?;
    let unpaid = || async {
        match browser.by_test_id("order").await {
            Ok(order) => order.attr("data-state").await.ok().flatten().as_deref() == Some("UNPAID"),
            Err(_) => false,
        }
    };
    until(
        Duration::from_secs(60),
        "the order UNPAID on the page",
        unpaid,
    )
    .await?;
    browser.screenshot(std::path::Path::new(out)).await
}

#[tokio::main]
async fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().collect();
    let [_, page, secret_file, shopper, out] = args.as_slice() else {
        return Err(
            "usage: flashsale-page-shopper PAGE_URL JWT_SECRET_FILE SHOPPER OUT.png".into(),
        );
    };
    let secret = std::fs::read(secret_file).map_err(|e| format!("{secret_file}: {e}"))?;
    let key = EncodingKey::from_secret(&secret).map_err(|e| e.to_string())?;
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|e| e.to_string())?
        .as_secs()
        + 3600;
    let token = encode(
        &Header::default(),
        &serde_json::json!({"sub": shopper, "exp": exp}),
        &key,
    )
    .map_err(|e| e.to_string())?;
    let browser = Browser::start().await?;
    let shopped = shop(&browser, page, &token, out).await;
    browser.close().await;
    shopped
}
