//! Smoke test of the real Kubernetes API server started by `make up`.

use flashsale_testkit as stack;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DeleteParams, PostParams};

#[tokio::test]
async fn kube_client_creates_and_deletes_a_configmap() {
    let client = stack::kube_client().await;
    let version = client.apiserver_version().await.unwrap_or_else(|e| {
        panic!(
            "the API server is not answering ({e}): {}",
            stack::START_HINT
        )
    });
    assert_eq!(version.git_version, "v1.34.4");

    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let name = stack::unique_name("smoke");
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": { "name": name },
        "data": { "hello": "flashsale" },
    }))
    .unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap();
    let read = api.get(&name).await.unwrap();
    assert_eq!(read.data.unwrap()["hello"], "flashsale");
    api.delete(&name, &DeleteParams::default()).await.unwrap();
    assert!(api.get_opt(&name).await.unwrap().is_none());
}
