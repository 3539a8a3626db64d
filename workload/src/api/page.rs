//! The sale page, `GET /s/{sale}`: HTML rendered from the sale's rules alone
//! (nothing per shopper, nothing live), and its script and style under
//! `/s/assets/` with content-hashed names, so a CDN can hold all of it. What
//! changes by the second comes from the status route; the purchase is
//! checked by the server whatever the page shows. The files live in
//! `workload/web/`, plain HTML, CSS and JavaScript: no build step.

use std::collections::HashMap;
use std::sync::LazyLock;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

use super::AppState;
use super::error::{ApiError, ErrorBody};
use super::status::revalidated;
use crate::domain::sale::SaleConfig;

const TEMPLATE: &str = include_str!("../../web/sale.html");

/// One asset, served under its content-hashed name forever.
struct Asset {
    name: String,
    content_type: &'static str,
    body: &'static [u8],
}

impl Asset {
    fn new(stem: &str, extension: &str, content_type: &'static str, body: &'static [u8]) -> Self {
        let hash = hex::encode(&Sha256::digest(body)[..6]);
        Self {
            name: format!("{stem}.{hash}.{extension}"),
            content_type,
            body,
        }
    }
}

struct Assets {
    script: Asset,
    style: Asset,
}

static ASSETS: LazyLock<Assets> = LazyLock::new(|| Assets {
    script: Asset::new(
        "sale",
        "js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../web/sale.js"),
    ),
    style: Asset::new(
        "sale",
        "css",
        "text/css; charset=utf-8",
        include_bytes!("../../web/sale.css"),
    ),
});

/// `&`, `<`, `>`, `"` and `'` escaped: safe in text and in quoted attributes.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Fills `{{name}}` from `values` in one pass (a value is never read as a
/// placeholder), each escaped; an unknown name is left empty.
fn fill(template: &str, values: &HashMap<&str, String>) -> String {
    let mut out = String::with_capacity(template.len() + 256);
    let mut rest = template;
    while let Some(open) = rest.find("{{") {
        out.push_str(&rest[..open]);
        let after = &rest[open + 2..];
        let Some(close) = after.find("}}") else {
            out.push_str(&rest[open..]);
            return out;
        };
        if let Some(value) = values.get(&after[..close]) {
            out.push_str(&escape(value));
        }
        rest = &after[close + 2..];
    }
    out.push_str(rest);
    out
}

/// A wait as a shopper reads it: "1 minute", "15 minutes", "90 seconds".
fn spelled(wait: std::time::Duration) -> String {
    let secs = wait.as_secs();
    let (n, unit) = if secs.is_multiple_of(60) && secs > 0 {
        (secs / 60, "minute")
    } else {
        (secs, "second")
    };
    format!("{n} {unit}{}", if n == 1 { "" } else { "s" })
}

/// The page of `config`'s sale; `dev_identity`: the page asks for a shopper
/// id (the API's development sign-in) when no token is stored.
pub fn render(config: &SaleConfig, dev_identity: bool) -> String {
    let time =
        |t: chrono::DateTime<chrono::Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let values = HashMap::from([
        ("sale", config.sale.name.clone()),
        ("sku", config.sku.clone()),
        ("startsAt", time(config.start)),
        ("endsAt", time(config.end)),
        ("limit", config.purchase_limit.to_string()),
        ("paymentWait", spelled(config.payment_timeout)),
        (
            "tokenRequired",
            config.purchase_token_ttl.is_some().to_string(),
        ),
        ("devIdentity", dev_identity.to_string()),
        ("queue", config.admission.is_some().to_string()),
        (
            "prequeueMs",
            config
                .admission
                .map_or(0, |a| a.prequeue.as_millis())
                .to_string(),
        ),
        (
            "challenge",
            config
                .admission
                .is_some_and(|a| a.challenge.is_some())
                .to_string(),
        ),
        ("css", ASSETS.style.name.clone()),
        ("js", ASSETS.script.name.clone()),
    ]);
    fill(TEMPLATE, &values)
}

/// The sale page: its rules, a countdown on the server's clock, the buy
/// button and the order's progress.
#[utoipa::path(
    get,
    path = "/s/{sale}",
    params(
        ("sale" = String, Path, description = "The FlashSale's name"),
        ("If-None-Match" = Option<String>, Header, description = "An ETag this route answered"),
    ),
    responses(
        (status = 200, description = "The page (`Cache-Control: public, max-age=5`, a weak `ETag`)", body = String, content_type = "text/html"),
        (status = 304, description = "The page still matches `If-None-Match`"),
        (status = 404, description = "No such sale (SALE_NOT_FOUND)", body = ErrorBody),
        (status = 503, description = "BUSY: too many requests in flight, with Retry-After", body = ErrorBody),
    ),
    tag = "page"
)]
pub async fn sale_page(
    State(state): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let view = state
        .catalog
        .get(&name)
        .ok_or_else(|| ApiError::sale_not_found(&name))?;
    let html = render(&view.config, state.auth.dev_identity());
    let tag = HeaderValue::from_str(&format!(
        "W/\"{}\"",
        hex::encode(&Sha256::digest(html.as_bytes())[..12])
    ))
    .map_err(|_| ApiError::internal())?;
    // Short: a changed window or SKU shows within seconds; the countdown
    // follows the status route anyway.
    Ok(revalidated(&headers, &tag, "public, max-age=5", || {
        ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response()
    }))
}

/// The page's script and style, by content-hashed name, cacheable forever.
#[utoipa::path(
    get,
    path = "/s/assets/{file}",
    params(("file" = String, Path, description = "A hashed asset name the page links")),
    responses(
        (status = 200, description = "The asset (`Cache-Control: public, max-age=31536000, immutable`)", body = String, content_type = "text/javascript"),
        (status = 404, description = "No such asset (NOT_FOUND)", body = ErrorBody),
        (status = 503, description = "BUSY: too many requests in flight, with Retry-After", body = ErrorBody),
    ),
    tag = "page"
)]
pub async fn asset(Path(name): Path<String>) -> Result<Response, ApiError> {
    let asset = [&ASSETS.script, &ASSETS.style]
        .into_iter()
        .find(|a| a.name == name)
        .ok_or_else(|| ApiError::not_found(format!("no asset named {name:?}")))?;
    Ok((
        [
            (header::CONTENT_TYPE, asset.content_type),
            (header::CACHE_CONTROL, "public, max-age=31536000, immutable"),
        ],
        asset.body,
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_is_spelled_as_a_shopper_reads_it() {
        for (secs, text) in [
            (60, "1 minute"),
            (900, "15 minutes"),
            (90, "90 seconds"),
            (1, "1 second"),
        ] {
            assert_eq!(spelled(std::time::Duration::from_secs(secs)), text);
        }
    }

    #[test]
    fn fill_escapes_values_and_never_reads_them_as_placeholders() {
        let values = HashMap::from([
            ("a", "<b>\"x\" & 'y'</b>".to_string()),
            ("b", "{{a}}".to_string()),
        ]);
        assert_eq!(
            fill("[{{a}}] [{{b}}] [{{missing}}] {{open", &values),
            "[&lt;b&gt;&quot;x&quot; &amp; &#39;y&#39;&lt;/b&gt;] [{{a}}] [] {{open"
        );
    }

    #[test]
    fn the_page_names_its_hashed_assets_and_fills_every_placeholder() {
        let html = render(&SaleConfig::example(), true);
        assert!(html.contains(&format!("/s/assets/{}", ASSETS.script.name)));
        assert!(html.contains(&format!("/s/assets/{}", ASSETS.style.name)));
        assert!(!html.contains("{{"), "a placeholder left: {html}");
        for id in ["countdown", "buy", "status", "order", "queue"] {
            assert!(html.contains(&format!("data-testid=\"{id}\"")), "{id}");
        }
        assert_ne!(ASSETS.script.name, ASSETS.style.name);
        assert!(ASSETS.script.name.starts_with("sale.") && ASSETS.script.name.ends_with(".js"));
    }
}
