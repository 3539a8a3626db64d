//! Pure builders of what the operator owns in Kubernetes: the sale's consumer
//! Deployment (spread over nodes, evicted one pod at a time) and its
//! reconciliation and cleanup Jobs.

use std::collections::BTreeMap;

use flashsale_workload::domain::budget::PurchaseBudget;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy};
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EnvFromSource, EnvVar, EnvVarSource, HTTPGetAction,
    KeyToPath, PodSecurityContext, PodSpec, PodTemplateSpec, Probe, ResourceRequirements,
    SeccompProfile, Secret, SecretEnvSource, SecretKeySelector, SecretVolumeSource,
    SecurityContext, TopologySpreadConstraint, Volume, VolumeMount,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Resource;
use kube::api::ObjectMeta;

use crate::decide::plan::JobKind;
use crate::model::crd::FlashSale;

/// Label naming the sale an object belongs to.
pub const SALE_LABEL: &str = "flashsale.dev/sale";
/// Label naming a Job's kind: periodic, final or cleanup.
pub const JOB_KIND_LABEL: &str = "flashsale.dev/job";
/// Label holding a periodic Job's index.
pub const JOB_INDEX_LABEL: &str = "flashsale.dev/index";
/// Annotation holding a hash of what the operator last applied, so an
/// unchanged object is not applied again on every reconcile.
pub const APPLIED_HASH: &str = "flashsale.dev/applied-hash";

/// A stable hash of an object's JSON: FNV-1a, whose definition is fixed
/// (std's `DefaultHasher` may change between Rust releases, and every
/// Deployment would roll on an operator upgrade).
fn hash_of(value: &impl serde::Serialize) -> String {
    use std::hash::Hasher;
    let mut hasher = fnv::FnvHasher::default();
    hasher.write(serde_json::to_string(value).unwrap_or_default().as_bytes());
    format!("{:016x}", hasher.finish())
}

/// How the operator runs the workload image, from its own configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadSettings {
    /// The `flashsale` image.
    pub image: String,
    /// Its pull policy (IfNotPresent: images may be imported, not pulled).
    pub pull_policy: String,
    /// Redis as pods reach it.
    pub redis: String,
    /// PostgreSQL as pods reach it.
    pub database_url: String,
    /// Kafka as pods reach it.
    pub kafka: String,
    /// Consumer container requests and limits: (cpu request, memory request, memory limit).
    pub consumer_resources: (String, String, String),
    /// The API's purchase budget: the reconcile Jobs leave reservations
    /// younger than it (and the clocks' slack) alone.
    pub purchase_budget: PurchaseBudget,
    /// The PEM of a private CA the services' certificates are signed by:
    /// the pods trust it (as `SSL_CERT_FILE`). None: public CAs only.
    pub services_ca: Option<String>,
}

/// The key of the sale's Secret holding the services' CA (a valid variable
/// name: the Secret is also the pods' environment).
const SERVICES_CA_KEY: &str = "FLASHSALE_SERVICES_CA_PEM";
/// Where the pods find the services' CA.
const SERVICES_CA_DIR: &str = "/etc/flashsale/services-ca";
const SERVICES_CA_VOLUME: &str = "services-ca";

/// The name of the Secret holding the connection strings of the sale's pods.
pub fn secret_name(sale: &str) -> String {
    format!("{sale}-workload")
}

/// The sale's Secret: where its pods find Redis, PostgreSQL and Kafka.
pub fn workload_secret(fs: &FlashSale, settings: &WorkloadSettings) -> Secret {
    let sale = fs.metadata.name.clone().unwrap_or_default();
    let mut data = BTreeMap::from([
        ("FLASHSALE_REDIS".into(), settings.redis.clone()),
        ("DATABASE_URL".into(), settings.database_url.clone()),
        ("KAFKA_BOOTSTRAP".into(), settings.kafka.clone()),
    ]);
    if let Some(ca) = &settings.services_ca {
        data.insert(SERVICES_CA_KEY.into(), ca.clone());
    }
    Secret {
        metadata: metadata(fs, secret_name(&sale), labels(fs, "workload")),
        string_data: Some(data),
        type_: Some("Opaque".into()),
        ..Secret::default()
    }
}

/// The consumer Deployment's name.
pub fn consumers_name(sale: &str) -> String {
    format!("{sale}-consumers")
}

/// A Job's name: one per periodic index, one final reconciliation, one cleanup.
pub fn job_name(sale: &str, kind: JobKind) -> String {
    match kind {
        JobKind::Periodic(index) => format!("{sale}-reconcile-{index}"),
        JobKind::Final => format!("{sale}-final-reconcile"),
        JobKind::Cleanup => format!("{sale}-cleanup"),
    }
}

fn labels(fs: &FlashSale, component: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".into(), "flashsale".into()),
        ("app.kubernetes.io/component".into(), component.into()),
        (
            "app.kubernetes.io/managed-by".into(),
            "flashsale-operator".into(),
        ),
        (
            SALE_LABEL.into(),
            fs.metadata.name.clone().unwrap_or_default(),
        ),
    ])
}

fn metadata(fs: &FlashSale, name: String, labels: BTreeMap<String, String>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: fs.metadata.namespace.clone(),
        labels: Some(labels),
        owner_references: fs.controller_owner_ref(&()).map(|r| vec![r]),
        ..ObjectMeta::default()
    }
}

fn env(fs: &FlashSale, settings: &WorkloadSettings) -> Vec<EnvVar> {
    let var = |name: &str, value: &str| EnvVar {
        name: name.into(),
        value: Some(value.into()),
        value_from: None,
    };
    let mut env = vec![
        var(
            "FLASHSALE_NAMESPACE",
            fs.metadata.namespace.as_deref().unwrap_or_default(),
        ),
        var(
            "FLASHSALE_SALE",
            fs.metadata.name.as_deref().unwrap_or_default(),
        ),
        var("FLASHSALE_LOG_FORMAT", "json"),
        var("RUST_LOG", "info"),
    ];
    if settings.services_ca.is_some() {
        // Read by every TLS client of the binary (rustls-native-certs, OpenSSL).
        env.push(var("SSL_CERT_FILE", &format!("{SERVICES_CA_DIR}/ca.crt")));
    }
    env
}

/// Runs as nobody, read-only root, no privilege, no capability, the
/// runtime's seccomp profile: the Pod Security `restricted` profile (the
/// binaries need nothing more).
fn hardened() -> (Option<PodSecurityContext>, Option<SecurityContext>) {
    (
        Some(PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(65534),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".into(),
                ..SeccompProfile::default()
            }),
            ..PodSecurityContext::default()
        }),
        Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                ..Capabilities::default()
            }),
            ..SecurityContext::default()
        }),
    )
}

/// Requests and limits: (cpu request, memory request, cpu limit, memory limit).
fn resources(cpu: &str, memory: &str, cpu_limit: &str, memory_limit: &str) -> ResourceRequirements {
    let quantities = |cpu: &str, memory: &str| {
        BTreeMap::from([
            ("cpu".into(), Quantity(cpu.into())),
            ("memory".into(), Quantity(memory.into())),
        ])
    };
    ResourceRequirements {
        requests: Some(quantities(cpu, memory)),
        limits: Some(quantities(cpu_limit, memory_limit)),
        ..ResourceRequirements::default()
    }
}

/// The longest a reconciliation or cleanup Job may run: its drain wait
/// (2 min by default) and the work after it, with room to spare. A hung Job
/// then fails, and the sale says so, instead of staying Ended forever.
pub const JOB_DEADLINE_SECS: i64 = 900;

fn container(fs: &FlashSale, settings: &WorkloadSettings, name: &str, args: &[&str]) -> Container {
    let sale = fs.metadata.name.as_deref().unwrap_or_default();
    Container {
        name: name.into(),
        image: Some(settings.image.clone()),
        image_pull_policy: Some(settings.pull_policy.clone()),
        args: Some(args.iter().map(|a| a.to_string()).collect()),
        env: Some(env(fs, settings)),
        // Connection strings (a database password among them) come from the
        // sale's Secret, never from the pod spec.
        env_from: Some(vec![EnvFromSource {
            secret_ref: Some(SecretEnvSource {
                name: secret_name(sale),
                optional: Some(false),
            }),
            ..EnvFromSource::default()
        }]),
        security_context: hardened().1,
        volume_mounts: settings.services_ca.as_ref().map(|_| {
            vec![VolumeMount {
                name: SERVICES_CA_VOLUME.into(),
                mount_path: SERVICES_CA_DIR.into(),
                read_only: Some(true),
                ..VolumeMount::default()
            }]
        }),
        ..Container::default()
    }
}

/// The risk webhook's signing secret (`spec.risk.webhook.secretRef`), for
/// the scorer beside each consumer. Optional: a missing Secret must not
/// keep consumers from persisting orders; the scorer then counts the
/// webhook as silent.
fn webhook_secret(fs: &FlashSale) -> Option<EnvVar> {
    let reference = &fs.spec.risk.as_ref()?.webhook.as_ref()?.secret_ref;
    Some(EnvVar {
        name: "FLASHSALE_RISK_WEBHOOK_SECRET".into(),
        value: None,
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: reference.name.clone(),
                key: reference.key.clone(),
                optional: Some(true),
            }),
            ..EnvVarSource::default()
        }),
    })
}

/// The pods' volumes: the services' CA, from the sale's Secret, if any.
fn volumes(fs: &FlashSale, settings: &WorkloadSettings) -> Option<Vec<Volume>> {
    let sale = fs.metadata.name.as_deref().unwrap_or_default();
    settings.services_ca.as_ref().map(|_| {
        vec![Volume {
            name: SERVICES_CA_VOLUME.into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(secret_name(sale)),
                items: Some(vec![KeyToPath {
                    key: SERVICES_CA_KEY.into(),
                    path: "ca.crt".into(),
                    mode: None,
                }]),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        }]
    })
}

/// The sale's consumer Deployment. Replicas are not set (nor hashed) here:
/// they change with the lag, and the caller sets the plan's count.
pub fn consumer_deployment(fs: &FlashSale, settings: &WorkloadSettings) -> Deployment {
    let name = fs.metadata.name.clone().unwrap_or_default();
    let labels = labels(fs, "consumer");
    let (cpu, memory, memory_limit) = &settings.consumer_resources;
    let mut consumer = container(
        fs,
        settings,
        "consumer",
        &["consumer", "--metrics-listen", "0.0.0.0:9090"],
    );
    consumer.ports = Some(vec![ContainerPort {
        name: Some("metrics".into()),
        container_port: 9090,
        ..ContainerPort::default()
    }]);
    consumer.resources = Some(resources(cpu, memory, "1", memory_limit));
    if let Some(secret) = webhook_secret(fs) {
        consumer.env.get_or_insert_with(Vec::new).push(secret);
    }
    let health = Probe {
        http_get: Some(HTTPGetAction {
            path: Some("/healthz".into()),
            port: IntOrString::String("metrics".into()),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(10),
        ..Probe::default()
    };
    consumer.liveness_probe = Some(health.clone());
    consumer.readiness_probe = Some(Probe {
        period_seconds: Some(2),
        ..health
    });
    let mut deployment = Deployment {
        metadata: metadata(fs, consumers_name(&name), labels.clone()),
        spec: Some(DeploymentSpec {
            selector: LabelSelector {
                match_labels: Some(labels.clone()),
                ..LabelSelector::default()
            },
            strategy: Some(DeploymentStrategy {
                type_: Some("RollingUpdate".into()),
                ..DeploymentStrategy::default()
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels.clone()),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![consumer],
                    // Preferred, not required: a one-node cluster runs
                    // them all; a drained node takes only its share.
                    topology_spread_constraints: Some(vec![TopologySpreadConstraint {
                        max_skew: 1,
                        topology_key: "kubernetes.io/hostname".into(),
                        when_unsatisfiable: "ScheduleAnyway".into(),
                        label_selector: Some(LabelSelector {
                            match_labels: Some(labels.clone()),
                            ..LabelSelector::default()
                        }),
                        match_label_keys: Some(vec!["pod-template-hash".into()]),
                        ..TopologySpreadConstraint::default()
                    }]),
                    volumes: volumes(fs, settings),
                    automount_service_account_token: Some(false),
                    security_context: hardened().0,
                    termination_grace_period_seconds: Some(30),
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        ..Deployment::default()
    };
    let hash = hash_of(&deployment);
    deployment
        .metadata
        .annotations
        .get_or_insert_default()
        .insert(APPLIED_HASH.into(), hash);
    deployment
}

/// The consumers' PodDisruptionBudget: a drain or an upgrade evicts one
/// consumer at a time, each replaced before the next goes (a partition's
/// orders wait for one rebalance, not for every consumer at once).
pub fn consumer_disruption_budget(fs: &FlashSale) -> PodDisruptionBudget {
    let name = fs.metadata.name.clone().unwrap_or_default();
    let labels = labels(fs, "consumer");
    PodDisruptionBudget {
        metadata: metadata(fs, consumers_name(&name), labels.clone()),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(LabelSelector {
                match_labels: Some(labels),
                ..LabelSelector::default()
            }),
            ..PodDisruptionBudgetSpec::default()
        }),
        ..PodDisruptionBudget::default()
    }
}

/// A reconciliation or cleanup Job.
pub fn job(fs: &FlashSale, settings: &WorkloadSettings, kind: JobKind) -> Job {
    let name = fs.metadata.name.clone().unwrap_or_default();
    let (component, kind_label, args, ttl) = match kind {
        JobKind::Periodic(_) => (
            "reconcile",
            "periodic",
            vec!["job", "reconcile"],
            Some(3600),
        ),
        JobKind::Final => (
            "reconcile",
            "final",
            vec!["job", "reconcile", "--final"],
            None,
        ),
        JobKind::Cleanup => ("cleanup", "cleanup", vec!["job", "cleanup"], None),
    };
    let mut labels = labels(fs, component);
    labels.insert(JOB_KIND_LABEL.into(), kind_label.into());
    if let JobKind::Periodic(index) = kind {
        labels.insert(JOB_INDEX_LABEL.into(), index.to_string());
    }
    let mut container = container(fs, settings, component, &args);
    container.resources = Some(resources("50m", "64Mi", "1", "256Mi"));
    if let Some(env) = container.env.as_mut() {
        env.push(EnvVar {
            name: "FLASHSALE_PURCHASE_BUDGET".into(),
            value: Some(humantime::format_duration(settings.purchase_budget.total()).to_string()),
            value_from: None,
        });
    }
    Job {
        metadata: metadata(fs, job_name(&name, kind), labels.clone()),
        spec: Some(JobSpec {
            backoff_limit: Some(3),
            active_deadline_seconds: Some(JOB_DEADLINE_SECS),
            ttl_seconds_after_finished: ttl,
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![container],
                    volumes: volumes(fs, settings),
                    automount_service_account_token: Some(false),
                    restart_policy: Some("Never".into()),
                    security_context: hardened().0,
                    ..PodSpec::default()
                }),
            },
            ..JobSpec::default()
        }),
        ..Job::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::crd::FlashSaleSpec;

    fn sale() -> FlashSale {
        let spec: FlashSaleSpec = serde_json::from_value(serde_json::json!({
            "sku": "SKU-1", "stock": 10,
            "window": {"start": "2026-12-12T00:00:00Z", "end": "2026-12-12T00:10:00Z"}
        }))
        .unwrap();
        let mut fs = FlashSale::new("drop", spec);
        fs.metadata.namespace = Some("shop".into());
        fs.metadata.uid = Some("6a1f0e1e-0000-7000-8000-000000000001".into());
        fs
    }

    fn settings() -> WorkloadSettings {
        WorkloadSettings {
            image: "docker.io/flashsale/flashsale:test".into(),
            pull_policy: "IfNotPresent".into(),
            redis: "redis://198.18.0.1:16379".into(),
            database_url: "postgres://postgres@198.18.0.1:15432/flashsale".into(),
            kafka: "198.18.0.1:19094".into(),
            consumer_resources: ("100m".into(), "64Mi".into(), "256Mi".into()),
            purchase_budget: PurchaseBudget::DEFAULT,
            services_ca: None,
        }
    }

    #[test]
    fn a_private_ca_is_trusted_by_every_pod() {
        let with_ca = WorkloadSettings {
            services_ca: Some("-----BEGIN CERTIFICATE-----\n".into()),
            ..settings()
        };
        let secret = workload_secret(&sale(), &with_ca);
        assert!(secret.string_data.unwrap().contains_key(SERVICES_CA_KEY));
        let consumer = consumer_deployment(&sale(), &with_ca);
        let pods = [JobKind::Final, JobKind::Cleanup]
            .into_iter()
            .map(|kind| job(&sale(), &with_ca, kind).spec.unwrap().template)
            .chain([consumer.spec.unwrap().template]);
        for pod in pods {
            let pod = pod.spec.unwrap();
            let volume = &pod.volumes.as_ref().unwrap()[0];
            let mount = &pod.containers[0].volume_mounts.as_ref().unwrap()[0];
            assert_eq!(volume.name, mount.name);
            let env = pod.containers[0].env.clone().unwrap();
            let file = env.iter().find(|e| e.name == "SSL_CERT_FILE").unwrap();
            assert_eq!(
                file.value.as_deref(),
                Some(format!("{}/ca.crt", mount.mount_path).as_str())
            );
        }
        // Without one, nothing is mounted.
        let plain = consumer_deployment(&sale(), &settings());
        assert!(plain.spec.unwrap().template.spec.unwrap().volumes.is_none());
    }

    #[test]
    fn the_risk_webhook_secret_reaches_the_consumers_only_and_optionally() {
        let secret_env = |fs: &FlashSale| {
            let pod = consumer_deployment(fs, &settings())
                .spec
                .unwrap()
                .template
                .spec
                .unwrap();
            pod.containers[0]
                .env
                .clone()
                .unwrap()
                .into_iter()
                .find(|e| e.name == "FLASHSALE_RISK_WEBHOOK_SECRET")
        };
        assert!(secret_env(&sale()).is_none(), "no webhook, no secret");
        let mut with_webhook = sale();
        with_webhook.spec.risk = Some(
            serde_json::from_value(serde_json::json!({
                "webhook": {"url": "https://risk.shop.example/score",
                            "secretRef": {"name": "risk-hook", "key": "secret"}}
            }))
            .unwrap(),
        );
        let reference = secret_env(&with_webhook)
            .unwrap()
            .value_from
            .unwrap()
            .secret_key_ref
            .unwrap();
        assert_eq!(
            (reference.name.as_str(), reference.key.as_str()),
            ("risk-hook", "secret")
        );
        assert_eq!(
            reference.optional,
            Some(true),
            "a missing Secret must not stop persistence"
        );
        let final_job = job(&with_webhook, &settings(), JobKind::Final);
        let env = final_job.spec.unwrap().template.spec.unwrap().containers[0]
            .env
            .clone();
        assert!(
            !env.unwrap()
                .iter()
                .any(|e| e.name == "FLASHSALE_RISK_WEBHOOK_SECRET")
        );
    }

    #[test]
    fn consumer_deployment_is_owned_labelled_and_hardened() {
        let d = consumer_deployment(&sale(), &settings());
        assert_eq!(d.metadata.name.as_deref(), Some("drop-consumers"));
        assert_eq!(d.metadata.namespace.as_deref(), Some("shop"));
        let owner = &d.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.controller),
            ("FlashSale", Some(true))
        );
        let spec = d.spec.unwrap();
        assert_eq!(
            spec.replicas, None,
            "replicas are the caller's, outside the hash"
        );
        let pod = spec.template.spec.unwrap();
        let c = &pod.containers[0];
        assert_eq!(c.args.as_ref().unwrap()[0], "consumer");
        assert_eq!(c.image_pull_policy.as_deref(), Some("IfNotPresent"));
        let env: BTreeMap<_, _> = c
            .env
            .as_ref()
            .unwrap()
            .iter()
            .map(|e| (e.name.as_str(), e.value.clone().unwrap()))
            .collect();
        assert_eq!(env["FLASHSALE_SALE"], "drop");
        assert!(
            !env.contains_key("DATABASE_URL"),
            "no connection string in the pod spec"
        );
        let from = &c.env_from.as_ref().unwrap()[0];
        assert_eq!(from.secret_ref.as_ref().unwrap().name, "drop-workload");
        let secret = workload_secret(&sale(), &settings());
        assert_eq!(
            secret.string_data.unwrap()["KAFKA_BOOTSTRAP"],
            "198.18.0.1:19094"
        );
        assert!(secret.metadata.owner_references.is_some());
        assert_eq!(pod.security_context.unwrap().run_as_non_root, Some(true));
        let spread = &pod.topology_spread_constraints.unwrap()[0];
        assert_eq!(
            (spread.topology_key.as_str(), spread.max_skew),
            ("kubernetes.io/hostname", 1)
        );
        assert_eq!(spread.label_selector, Some(spec.selector.clone()));
        assert_eq!(spec.selector.match_labels.unwrap()[SALE_LABEL], "drop");
    }

    #[test]
    fn consumers_are_evicted_one_at_a_time() {
        let pdb = consumer_disruption_budget(&sale());
        assert_eq!(pdb.metadata.name.as_deref(), Some("drop-consumers"));
        assert!(pdb.metadata.owner_references.is_some());
        let spec = pdb.spec.unwrap();
        assert_eq!(spec.max_unavailable, Some(IntOrString::Int(1)));
        let deployment = consumer_deployment(&sale(), &settings());
        assert_eq!(spec.selector, Some(deployment.spec.unwrap().selector));
    }

    #[test]
    fn jobs_have_stable_names_and_kinds() {
        let cases: [(JobKind, &str, &str, &[&str]); 3] = [
            (
                JobKind::Periodic(3),
                "drop-reconcile-3",
                "periodic",
                &["job", "reconcile"],
            ),
            (
                JobKind::Final,
                "drop-final-reconcile",
                "final",
                &["job", "reconcile", "--final"],
            ),
            (
                JobKind::Cleanup,
                "drop-cleanup",
                "cleanup",
                &["job", "cleanup"],
            ),
        ];
        for (kind, name, label, command) in cases {
            let j = job(&sale(), &settings(), kind);
            assert_eq!(j.metadata.name.as_deref(), Some(name));
            assert_eq!(j.metadata.labels.as_ref().unwrap()[JOB_KIND_LABEL], label);
            let pod = j.spec.unwrap().template.spec.unwrap();
            assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
            let args = pod.containers[0].args.clone().unwrap();
            assert_eq!(args, command);
            let env = pod.containers[0].env.clone().unwrap();
            assert!(
                env.iter()
                    .any(|e| e.name == "FLASHSALE_PURCHASE_BUDGET"
                        && e.value.as_deref() == Some("5s"))
            );
        }
        assert_eq!(
            job(&sale(), &settings(), JobKind::Periodic(7))
                .metadata
                .labels
                .unwrap()[JOB_INDEX_LABEL],
            "7"
        );
    }

    /// Every pod the operator builds meets Pod Security `restricted` and
    /// has requests and limits; Jobs have a deadline.
    #[test]
    fn pods_are_restricted_bounded_and_jobs_have_a_deadline() {
        let d = consumer_deployment(&sale(), &settings());
        let consumer_pod = d.spec.unwrap().template.spec.unwrap();
        let jobs: Vec<Job> = [JobKind::Periodic(1), JobKind::Final, JobKind::Cleanup]
            .into_iter()
            .map(|kind| job(&sale(), &settings(), kind))
            .collect();
        let mut pods = vec![consumer_pod];
        for j in &jobs {
            let spec = j.spec.clone().unwrap();
            assert_eq!(spec.active_deadline_seconds, Some(JOB_DEADLINE_SECS));
            pods.push(spec.template.spec.unwrap());
        }
        for pod in pods {
            let sc = pod.security_context.unwrap();
            assert_eq!(sc.run_as_non_root, Some(true));
            assert_eq!(sc.seccomp_profile.unwrap().type_, "RuntimeDefault");
            for c in pod.containers {
                let csc = c.security_context.unwrap();
                assert_eq!(csc.allow_privilege_escalation, Some(false));
                assert_eq!(
                    csc.capabilities.unwrap().drop,
                    Some(vec!["ALL".to_string()])
                );
                let r = c.resources.unwrap();
                for set in [r.requests.unwrap(), r.limits.unwrap()] {
                    assert!(
                        set.contains_key("cpu") && set.contains_key("memory"),
                        "{set:?}"
                    );
                }
            }
        }
    }

    /// The applied hash has a fixed definition (FNV-1a of the JSON): an
    /// operator built by another Rust release hashes the same object alike.
    #[test]
    fn the_applied_hash_is_pinned() {
        assert_eq!(hash_of(&serde_json::json!({"a": 1})), "9c3e82dd6fcae8b1");
    }
}
