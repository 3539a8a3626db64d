//! Reconcile scenarios against a mocked Kubernetes API (controller-rs'
//! `fixtures.rs` style): each asserts the exact calls a reconcile makes, in
//! milliseconds. Redis, PostgreSQL and Kafka are unreachable addresses,
//! connected lazily: a scenario that reached them would fail. The real-API
//! tests in `operator/tests/` stay; these pin the decisions between calls.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use flashsale_workload::bus::admin::Admin;
use flashsale_workload::bus::lag::LagReader;
use flashsale_workload::domain::budget::PurchaseBudget;
use flashsale_workload::redis::RedisConn;
use flashsale_workload::redis::store::SaleStore;
use http::{Method, Request, Response};
use kube::client::Body;
use kube::runtime::events::{Recorder, Reporter};
use kube::{Client, ResourceExt};

use crate::context::{Context, FINALIZER};
use crate::decide::resources::WorkloadSettings;
use crate::metrics::Metrics;
use crate::model::crd::FlashSale;

type ApiHandle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

/// A Context whose Kubernetes is `handle`'s mock; nothing else reachable.
fn context(leading: bool) -> (Arc<Context>, ApiHandle) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    let unreachable = "127.0.0.1:1";
    let ctx = Context {
        client: client.clone(),
        db: sqlx::postgres::PgPoolOptions::new()
            .connect_lazy(&format!("postgres://fixture@{unreachable}/none"))
            .expect("a lazy pool"),
        store: SaleStore::new(
            RedisConn::lazy(&format!("redis://{unreachable}")).expect("a lazy connection"),
        ),
        admin: Admin::new(unreachable).expect("an admin client"),
        recorder: Recorder::new(
            client,
            Reporter {
                controller: "flashsale-operator".into(),
                instance: Some("fixture".into()),
            },
        ),
        workload: WorkloadSettings {
            image: "flashsale:fixture".into(),
            pull_policy: "IfNotPresent".into(),
            redis: String::new(),
            database_url: String::new(),
            kafka: String::new(),
            consumer_resources: ("100m".into(), "64Mi".into(), "128Mi".into()),
            purchase_budget: PurchaseBudget::DEFAULT,
            services_ca: None,
        },
        lag: LagReader::new(unreachable, "fixture").expect("a lag reader"),
        watched: Mutex::new(HashMap::new()),
        metrics: Arc::new(Metrics::default()),
        failures: Mutex::new(HashMap::new()),
        redis_unreachable: Mutex::new(HashMap::new()),
        status_writes: Mutex::new(HashMap::new()),
        leading: Arc::new(AtomicBool::new(leading)),
        api_capacity: crate::decide::queue::DEFAULT_API_CAPACITY,
    };
    (Arc::new(ctx), handle)
}

/// A sale as the API server would hand it over.
fn sale(finalizer: bool, uid: Option<&str>) -> FlashSale {
    let mut fs: FlashSale = serde_json::from_value(serde_json::json!({
        "apiVersion": "flashsale.dev/v1alpha1", "kind": "FlashSale",
        "metadata": {"name": "spring", "namespace": "shop", "generation": 1, "resourceVersion": "7"},
        "spec": {
            "sku": "SKU-1", "stock": 100, "purchaseLimit": 2,
            "window": {"start": "2030-01-01T10:00:00Z", "end": "2030-01-01T11:00:00Z"},
        }
    }))
    .expect("a valid sale");
    fs.metadata.uid = uid.map(str::to_string);
    if finalizer {
        fs.finalizers_mut().push(FINALIZER.into());
    }
    fs
}

/// Takes the next call, checks its method and path, answers `reply` (JSON);
/// returns the call's JSON body.
async fn expect_call(
    handle: &mut ApiHandle,
    method: Method,
    path: &str,
    reply: serde_json::Value,
) -> serde_json::Value {
    let (request, respond) = handle.next_request().await.expect("a call");
    assert_eq!(request.method(), method, "{}", request.uri());
    assert_eq!(request.uri().path(), path);
    let body = request.into_body().collect_bytes().await.expect("a body");
    respond.send_response(
        Response::builder()
            .body(Body::from(serde_json::to_vec(&reply).expect("json")))
            .expect("a response"),
    );
    if body.is_empty() {
        serde_json::Value::Null
    } else {
        serde_json::from_slice(&body).expect("a JSON body")
    }
}

/// Runs one reconcile of `fs` while `calls` answers the mock; then checks no
/// call is left unanswered.
async fn reconcile_with<F>(ctx: Arc<Context>, mut handle: ApiHandle, fs: FlashSale, calls: F)
where
    F: AsyncFnOnce(&mut ApiHandle),
{
    let reconcile = tokio::spawn(crate::controller::reconcile(Arc::new(fs), ctx.clone()));
    calls(&mut handle).await;
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), reconcile)
        .await
        .expect("the reconcile finishes");
    drop(ctx);
    assert!(
        tokio::time::timeout(std::time::Duration::from_millis(50), handle.next_request())
            .await
            .ok()
            .flatten()
            .is_none(),
        "no call beyond the expected ones"
    );
}

const SALES: &str = "/apis/flashsale.dev/v1alpha1/namespaces/shop/flashsales/spring";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/shop/events";

#[tokio::test]
async fn a_replica_that_does_not_lead_makes_no_call() {
    let (ctx, handle) = context(false);
    reconcile_with(ctx, handle, sale(false, Some("u-1")), async |_| {}).await;
}

#[tokio::test]
async fn a_new_sale_gets_its_finalizer_before_anything_else() {
    let (ctx, handle) = context(true);
    let fs = sale(false, Some("u-1"));
    let with_finalizer = serde_json::to_value(sale(true, Some("u-1"))).unwrap();
    reconcile_with(ctx, handle, fs, async |api| {
        let patch = expect_call(api, Method::PATCH, SALES, with_finalizer).await;
        assert!(
            patch.to_string().contains(FINALIZER),
            "the patch adds the finalizer: {patch}"
        );
    })
    .await;
}

#[tokio::test]
async fn an_invalid_sale_gets_a_condition_and_one_event_and_a_second_pass_writes_nothing() {
    // No uid: the sale cannot be keyed, so nothing is done but say so.
    let (ctx, handle) = context(true);
    let fs = sale(true, None);
    let mut reported = fs.clone();
    reconcile_with(ctx, handle, fs.clone(), async |api| {
        let status = expect_call(
            api,
            Method::PATCH,
            &format!("{SALES}/status"),
            serde_json::to_value(&fs).unwrap(),
        )
        .await;
        let conditions = &status["status"]["conditions"];
        let degraded = conditions
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "Degraded"))
            .expect("a Degraded condition");
        assert_eq!(degraded["status"], "True");
        assert_eq!(degraded["reason"], "InvalidSpec");
        reported.status = Some(crate::model::crd::FlashSaleStatus {
            conditions: serde_json::from_value(conditions.clone()).unwrap(),
            ..Default::default()
        });
        let event = expect_call(api, Method::POST, EVENTS, serde_json::json!({})).await;
        assert_eq!(event["reason"], "InvalidSpec");
        assert_eq!(event["type"], "Warning");
        assert_eq!(event["regarding"]["name"], fs.name_any());
    })
    .await;
    // The same failure again: the status already says it; no write, no event.
    let (ctx, handle) = context(true);
    reconcile_with(ctx, handle, reported, async |_| {}).await;
}
