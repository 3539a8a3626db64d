//! The OpenAPI document, generated from the handlers' types and annotations.

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::error::ErrorBody;
use super::orders::{OrderView, PurchaseAccepted, PurchaseRequest};
use super::payments::{PaymentCallback, PaymentView};
use super::sales::SaleInfo;
use super::tokens::PurchaseToken;

#[derive(OpenApi)]
#[openapi(
    info(title = "FlashSale shopper API", description = "Sale info, purchases and orders. Every refusal is {code, message}."),
    paths(
        super::sales::get_sale,
        super::tokens::issue,
        super::orders::purchase,
        super::orders::get_order,
        super::payments::pay,
        super::orders::cancel,
        super::payments::callback
    ),
    components(schemas(SaleInfo, PurchaseToken, PurchaseRequest, PurchaseAccepted, OrderView, PaymentView, PaymentCallback, ErrorBody)),
    modifiers(&BearerAuth)
)]
struct ApiDoc;

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
