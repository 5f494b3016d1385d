//! Events as the kubelet posts them: core/v1 Events, which the Node authorizer lets a
//! node create and patch (events.k8s.io's it does not). One Event per object, type,
//! reason and message; the same one again is counted on it (`count`, `lastTimestamp`)
//! rather than posted anew, so a crash loop's BackOff is one Event with a count, as the
//! kubelet's.

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use parking_lot::Mutex;
use std::collections::HashMap;

/// What makes two events the same: the object (namespace, name, uid), type, reason and
/// message, kept as a 64-bit hash of them. The strings themselves took about a
/// kilobyte per remembered event (three or more for every pod a node ran); two keys
/// sharing a hash would only count one event on the other's.
type Key = u64;

fn key(parts: (&str, &str, &str, &str, &str, &str)) -> Key {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    parts.hash(&mut h);
    h.finish()
}

/// At most this many events are remembered for counting; past it, the memory starts over.
const REMEMBERED: usize = 4096;

pub struct Recorder {
    client: kube::Client,
    node: String,
    /// The Event each key was posted as: (its name, its count).
    posted: Mutex<HashMap<Key, (String, i32)>>,
}

impl Recorder {
    pub fn new(client: kube::Client, node: String) -> Recorder {
        Recorder {
            client,
            node,
            posted: Default::default(),
        }
    }

    /// Posts an event about `object`, or counts it on the one posted before.
    pub async fn publish(
        &self,
        object: &ObjectReference,
        warning: bool,
        reason: &str,
        message: &str,
    ) -> Result<(), kube::Error> {
        let type_ = if warning { "Warning" } else { "Normal" };
        // A Node's events go to `default`, as the kubelet's.
        let ns = object.namespace.clone().unwrap_or_else(|| "default".into());
        let name = object.name.clone().unwrap_or_default();
        let key = key((
            &ns,
            &name,
            object.uid.as_deref().unwrap_or_default(),
            type_,
            reason,
            message,
        ));
        let api: Api<Event> = Api::namespaced(self.client.clone(), &ns);
        let now = Timestamp::now();
        let before = self.posted.lock().get(&key).cloned();
        if let Some((event, count)) = before {
            let patch = serde_json::json!({
                "count": count + 1,
                "lastTimestamp": Time(now),
            });
            match api
                .patch(&event, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {
                    self.remember(key, event, count + 1);
                    return Ok(());
                }
                // Gone (events expire): posted anew below.
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        let event = Event {
            metadata: ObjectMeta {
                name: Some(format!("{name}.{:x}", now.as_nanosecond())),
                namespace: Some(ns),
                ..Default::default()
            },
            involved_object: object.clone(),
            type_: Some(type_.into()),
            reason: Some(reason.into()),
            message: Some(message.into()),
            source: Some(EventSource {
                component: Some("kubelet".into()),
                host: Some(self.node.clone()),
            }),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            count: Some(1),
            reporting_component: Some("kubelet".into()),
            reporting_instance: Some(self.node.clone()),
            ..Default::default()
        };
        let made = api.create(&PostParams::default(), &event).await?;
        self.remember(key, made.metadata.name.unwrap_or_default(), 1);
        Ok(())
    }

    fn remember(&self, key: Key, event: String, count: i32) {
        let mut posted = self.posted.lock();
        if posted.len() >= REMEMBERED && !posted.contains_key(&key) {
            posted.clear();
        }
        posted.insert(key, (event, count));
    }
}
