//! The cluster's Services, watched so that every container gets the variables the
//! kubelet gives it: `<NAME>_SERVICE_HOST`, `<NAME>_SERVICE_PORT` and the Docker-link
//! style `<NAME>_PORT_<port>_<PROTO>...` of each Service in the pod's namespace (unless
//! `enableServiceLinks: false`), and always those of `default/kubernetes`, which is how
//! in-cluster clients (client-go's `InClusterConfig`) find the apiserver.

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use std::collections::BTreeMap;
use std::time::Duration;

/// The Services the kubelet always exposes, from the `default` namespace.
const MASTER_SERVICES: [&str; 1] = ["kubernetes"];

#[derive(Clone)]
pub struct Services {
    store: Store<Service>,
}

impl Services {
    /// Starts the watch (list, then watch, relist and reconnect as the pod watch does).
    pub fn start(client: kube::Client) -> Services {
        let (store, writer) = reflector::store();
        let api: Api<Service> = Api::all(client);
        // Services are kept whole but for their managedFields, which nothing here reads.
        let watch = watcher(api, watcher::Config::default())
            .modify(|s: &mut Service| s.metadata.managed_fields = None);
        let stream = reflector::reflector(writer, watch)
            .default_backoff()
            .applied_objects();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(r) = stream.next().await {
                if let Err(e) = r {
                    tracing::debug!("services watch: {e}");
                }
            }
        });
        Services { store }
    }

    /// The service variables for a pod in `ns`, once the Services were listed at least
    /// once: a container started before would miss them for good, so the kubelet
    /// refuses to make it and so does the crustlet.
    pub async fn env(&self, ns: &str, links: bool) -> Result<Vec<(String, String)>, String> {
        if tokio::time::timeout(Duration::from_secs(5), self.store.wait_until_ready())
            .await
            .is_err()
        {
            return Err(
                "services have not yet been read at least once, cannot construct envvars".into(),
            );
        }
        let all = self.store.state();
        Ok(env_for(all.iter().map(|s| &**s), ns, links))
    }
}

/// The variables of the Services a pod in `ns` sees, sorted by name.
pub fn env_for<'a>(
    services: impl IntoIterator<Item = &'a Service>,
    ns: &str,
    links: bool,
) -> Vec<(String, String)> {
    // By name: a Service of the pod's own namespace wins over a master one of the same
    // name from `default`.
    let mut chosen: BTreeMap<String, &Service> = BTreeMap::new();
    for s in services {
        let ip = s
            .spec
            .as_ref()
            .and_then(|sp| sp.cluster_ip.as_deref())
            .unwrap_or("");
        if ip.is_empty() || ip == "None" {
            continue;
        }
        let name = s.metadata.name.clone().unwrap_or_default();
        let s_ns = s.metadata.namespace.as_deref().unwrap_or("");
        if s_ns == "default" && MASTER_SERVICES.contains(&name.as_str()) {
            chosen.entry(name).or_insert(s);
        } else if s_ns == ns && links {
            chosen.insert(name, s);
        }
    }
    let mut out = vec![];
    for (name, s) in chosen {
        out.extend(variables(&name, s));
    }
    out.sort();
    out
}

/// Upper case, `-` as `_`: a Service name as a variable name.
fn var_name(s: &str) -> String {
    s.to_uppercase().replace('-', "_")
}

fn variables(name: &str, s: &Service) -> Vec<(String, String)> {
    let spec = s.spec.clone().unwrap_or_default();
    let ip = spec.cluster_ip.unwrap_or_default();
    let ports = spec.ports.unwrap_or_default();
    let Some(first) = ports.first() else {
        return vec![];
    };
    let prefix = var_name(name);
    let mut out = vec![
        (format!("{prefix}_SERVICE_HOST"), ip.clone()),
        (format!("{prefix}_SERVICE_PORT"), first.port.to_string()),
    ];
    for p in &ports {
        if let Some(n) = p.name.as_deref().filter(|n| !n.is_empty()) {
            out.push((
                format!("{prefix}_SERVICE_PORT_{}", var_name(n)),
                p.port.to_string(),
            ));
        }
    }
    // Docker links' names, which older programs still read.
    let host_port = |port: i32| {
        if ip.contains(':') {
            format!("[{ip}]:{port}")
        } else {
            format!("{ip}:{port}")
        }
    };
    for (i, p) in ports.iter().enumerate() {
        let proto = p.protocol.clone().unwrap_or_else(|| "TCP".into());
        let lower = proto.to_lowercase();
        let url = format!("{lower}://{}", host_port(p.port));
        if i == 0 {
            out.push((format!("{prefix}_PORT"), url.clone()));
        }
        let pp = format!("{prefix}_PORT_{}_{}", p.port, proto.to_uppercase());
        out.push((format!("{pp}_PROTO"), lower));
        out.push((format!("{pp}_PORT"), p.port.to_string()));
        out.push((format!("{pp}_ADDR"), ip.clone()));
        out.push((pp, url));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn svc(ns: &str, name: &str, ip: &str, ports: serde_json::Value) -> Service {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": ns},
            "spec": {"clusterIP": ip, "ports": ports},
        }))
        .unwrap()
    }

    #[test]
    fn variables_as_the_kubelet_names_them() {
        let all = vec![
            svc(
                "default",
                "kubernetes",
                "10.96.0.1",
                json!([{"name": "https", "port": 443, "protocol": "TCP"}]),
            ),
            svc(
                "app",
                "my-db",
                "10.96.0.7",
                json!([{"port": 5432}, {"name": "metrics", "port": 9187, "protocol": "UDP"}]),
            ),
            svc("app", "headless", "None", json!([{"port": 80}])),
            svc("other", "elsewhere", "10.96.0.9", json!([{"port": 80}])),
        ];
        let env: BTreeMap<String, String> = env_for(&all, "app", true).into_iter().collect();
        assert_eq!(env["KUBERNETES_SERVICE_HOST"], "10.96.0.1");
        assert_eq!(env["KUBERNETES_SERVICE_PORT"], "443");
        assert_eq!(env["KUBERNETES_SERVICE_PORT_HTTPS"], "443");
        assert_eq!(env["KUBERNETES_PORT"], "tcp://10.96.0.1:443");
        assert_eq!(env["KUBERNETES_PORT_443_TCP"], "tcp://10.96.0.1:443");
        assert_eq!(env["KUBERNETES_PORT_443_TCP_PROTO"], "tcp");
        assert_eq!(env["KUBERNETES_PORT_443_TCP_PORT"], "443");
        assert_eq!(env["KUBERNETES_PORT_443_TCP_ADDR"], "10.96.0.1");
        assert_eq!(env["MY_DB_SERVICE_HOST"], "10.96.0.7");
        assert_eq!(env["MY_DB_SERVICE_PORT"], "5432");
        assert_eq!(env["MY_DB_SERVICE_PORT_METRICS"], "9187");
        assert_eq!(env["MY_DB_PORT"], "tcp://10.96.0.7:5432");
        assert_eq!(env["MY_DB_PORT_9187_UDP"], "udp://10.96.0.7:9187");
        assert!(!env.keys().any(|k| k.starts_with("HEADLESS")));
        assert!(!env.keys().any(|k| k.starts_with("ELSEWHERE")));
        assert_eq!(env.len(), 8 + 2 + 1 + 1 + 2 * 4);

        // enableServiceLinks: false leaves only the master service.
        let env = env_for(&all, "app", false);
        assert!(env.iter().all(|(k, _)| k.starts_with("KUBERNETES_")));
        assert_eq!(env.len(), 8);
    }
}
