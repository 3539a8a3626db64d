//! Prints the FlashSale CustomResourceDefinition as YAML (`make crds` writes it
//! to `crds/flashsale.yaml`).
use kube::CustomResourceExt;

fn main() {
    print!(
        "{}",
        serde_saphyr::to_string(&flashsale_operator::model::crd::FlashSale::crd())
            .expect("the CRD serializes")
    );
}
