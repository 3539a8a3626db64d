//! The FlashSale CRD installed from code, for tests, the benchmark and the chaos runner.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use kube::api::{Api, Patch, PatchParams};

use crate::context::MANAGER;
use crate::model::crd::FlashSale;

/// Server-side applies the FlashSale CRD and waits up to 20 s until the API
/// server serves it; whether it does. For the tests, the benchmark and the
/// chaos runner: installations get the CRD from the chart.
pub async fn crd(client: &kube::Client) -> Result<bool, kube::Error> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = FlashSale::crd();
    let name = crd.metadata.name.clone().unwrap_or_default();
    crds.patch(
        &name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(crd),
    )
    .await?;
    for _ in 0..80 {
        let established = crds
            .get(&name)
            .await?
            .status
            .and_then(|s| s.conditions)
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            });
        if established {
            return Ok(true);
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    Ok(false)
}
