//! The OpenAPI document, generated from the handlers' types and annotations.

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::error::ErrorBody;
use super::orders::{OrderView, PurchaseAccepted, PurchaseRequest};
use super::payments::{PaymentCallback, PaymentView};
use super::queue::{Challenge, ChallengeAnswer, JoinRequest, QueuePlace};
use super::sales::SaleInfo;
use super::status::SaleStatusBody;
use super::tokens::PurchaseToken;

#[derive(OpenApi)]
#[openapi(
    info(title = "FlashSale shopper API", description = "Sale info and status, the sale page, the admission queue, purchases and orders. Every refusal is {code, message}."),
    paths(
        super::sales::get_sale,
        super::status::get_status,
        super::page::sale_page,
        super::page::asset,
        super::tokens::issue,
        super::queue::join,
        super::queue::place,
        super::queue::challenge,
        super::orders::purchase,
        super::orders::get_order,
        super::payments::pay,
        super::orders::cancel,
        super::payments::callback
    ),
    components(schemas(SaleInfo, SaleStatusBody, JoinRequest, ChallengeAnswer, QueuePlace, Challenge, PurchaseToken, PurchaseRequest, PurchaseAccepted, OrderView, PaymentView, PaymentCallback, ErrorBody)),
    modifiers(&BearerAuth, &OptionalBodies)
)]
struct ApiDoc;

/// The purchase body may be left out (one unit), and the queue join's (no
/// challenge): utoipa marks a body optional only by making it nullable,
/// which the API does not accept.
struct OptionalBodies;

impl Modify for OptionalBodies {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        for path in ["/v1/sales/{sale}/orders", "/v1/sales/{sale}/queue"] {
            let body = openapi
                .paths
                .paths
                .get_mut(path)
                .and_then(|path| path.post.as_mut())
                .and_then(|post| post.request_body.as_mut());
            if let Some(utoipa::openapi::RefOr::T(body)) = body {
                body.required = Some(utoipa::openapi::Required::False);
            }
        }
    }
}

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        if let Some(components) = openapi.components.as_mut() {
            components.add_security_scheme(
                "bearer",
                SecurityScheme::Http(
                    HttpBuilder::new()
                        .scheme(HttpAuthScheme::Bearer)
                        .bearer_format("JWT")
                        .build(),
                ),
            );
        }
    }
}

/// The document served at `/openapi.json`.
pub fn document() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    fn document() -> Value {
        serde_json::to_value(super::document()).unwrap()
    }

    fn operation<'a>(doc: &'a Value, path: &str, method: &str) -> &'a Value {
        &doc["paths"][path][method]
    }

    /// Every `$ref` names a schema of the document.
    fn refs(value: &serde_json::Value, found: &mut Vec<String>) {
        match value {
            serde_json::Value::Object(map) => {
                if let Some(serde_json::Value::String(r)) = map.get("$ref") {
                    found.push(r.clone());
                }
                map.values().for_each(|v| refs(v, found));
            }
            serde_json::Value::Array(items) => items.iter().for_each(|v| refs(v, found)),
            _ => {}
        }
    }

    #[test]
    fn every_reference_resolves() {
        let doc = document();
        let mut found = Vec::new();
        refs(&doc, &mut found);
        assert!(!found.is_empty());
        for r in found {
            let name = r.trim_start_matches("#/components/schemas/");
            assert!(
                doc["components"]["schemas"].get(name).is_some(),
                "{r} unresolved"
            );
        }
    }

    #[test]
    fn the_purchase_body_is_optional_and_bounded() {
        let doc = document();
        let body = &operation(&doc, "/v1/sales/{sale}/orders", "post")["requestBody"];
        assert_eq!(body["required"], json!(false));
        let quantity = &doc["components"]["schemas"]["PurchaseRequest"]["properties"]["quantity"];
        assert_eq!(
            (&quantity["minimum"], &quantity["maximum"]),
            (&json!(1), &json!(1000))
        );
    }

    #[test]
    fn a_callback_that_fits_the_document_fits_the_body_limit() {
        let doc = document();
        let callback = &doc["components"]["schemas"]["PaymentCallback"];
        assert_eq!(callback["additionalProperties"], json!(false));
        let outcome = &callback["properties"]["outcome"];
        assert_eq!(outcome["enum"], json!(["succeeded", "failed"]));
    }

    #[test]
    fn every_post_documents_the_body_limit() {
        let doc = document();
        for (path, item) in doc["paths"].as_object().unwrap() {
            if let Some(post) = item.get("post") {
                assert!(post["responses"].get("413").is_some(), "{path}: no 413");
            }
        }
    }

    #[test]
    fn the_idempotency_key_is_bounded() {
        let doc = document();
        let parameters = operation(&doc, "/v1/sales/{sale}/orders", "post")["parameters"]
            .as_array()
            .unwrap();
        let key = parameters
            .iter()
            .find(|p| p["name"] == "Idempotency-Key")
            .unwrap();
        assert_eq!(key["schema"]["maxLength"], json!(128));
        assert_eq!(key["schema"]["pattern"], json!("^[!-~]+$"));
    }
}
