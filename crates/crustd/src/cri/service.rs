//! The CRI services. Each RPC is logged with its sandbox or container id and its
//! duration at debug level, and its errors become gRPC codes in `error.rs` only.

use crate::cri::error::{Error, Result};
use crate::daemon::Crust;
use crate::{
    containers, containers::exec, containers::metrics, containers::stats, daemon::runtime_info,
    sandboxes::run, sandboxes::status, sandboxes::stop,
};
use cri_api::*;
use std::sync::Arc;
use std::time::Instant;
use tonic::{Request, Response, Status};

#[derive(Clone)]
pub struct Service {
    pub crust: Arc<Crust>,
}

/// Logs one finished RPC and converts its result.
fn done<T>(
    rpc: &str,
    id: &str,
    start: Instant,
    r: Result<T>,
) -> std::result::Result<Response<T>, Status> {
    let ms = start.elapsed().as_secs_f64() * 1000.0;
    match r {
        Ok(v) => {
            tracing::debug!(rpc, id, ms, "ok");
            Ok(Response::new(v))
        }
        Err(e) => {
            tracing::debug!(rpc, id, ms, error = %e, "failed");
            if matches!(e, Error::Internal(_)) {
                tracing::warn!(rpc, id, error = %e, "RPC failed");
            }
            Err(e.into())
        }
    }
}

/// Runs a call that changes the node to its end, even when its caller is gone. tonic
/// drops a handler's future when the client's deadline passes or its connection
/// closes (a kubelet restarted in the middle of a call): a CreateContainer dropped
/// between making the container and putting it in the store left it made, its name
/// reserved and nothing listing it, and every retry failed on the name. Run apart, the
/// call finishes (or rolls back) as it would have; its answer then goes nowhere, and
/// what it did is in the store for the caller's next List.
async fn detached<T: Send + 'static>(
    call: impl std::future::Future<Output = Result<T>> + Send + 'static,
) -> Result<T> {
    tokio::spawn(call).await.map_err(Error::internal)?
}

fn later<T>(what: &str) -> std::result::Result<Response<T>, Status> {
    Err(Error::Unimplemented(format!("{what} is not implemented in crust yet")).into())
}

#[tonic::async_trait]
impl RuntimeService for Service {
    async fn version(
        &self,
        _r: Request<VersionRequest>,
    ) -> std::result::Result<Response<VersionResponse>, Status> {
        Ok(Response::new(runtime_info::version()))
    }

    async fn run_pod_sandbox(
        &self,
        r: Request<RunPodSandboxRequest>,
    ) -> std::result::Result<Response<RunPodSandboxResponse>, Status> {
        let t = Instant::now();
        let req = r.into_inner();
        let name = req
            .config
            .as_ref()
            .and_then(|c| c.metadata.as_ref())
            .map(|m| format!("{}/{}", m.namespace, m.name))
            .unwrap_or_default();
        let crust = self.crust.clone();
        let res = detached(async move {
            let c = crust.clone();
            let id = tokio::task::spawn_blocking(move || run::run(&c, req))
                .await
                .map_err(Error::internal)??;
            if let Ok(sb) = crust.store.get(&id) {
                crate::sandboxes::liveness::watch(crust.clone(), sb);
            }
            for kind in [
                ContainerEventType::ContainerCreatedEvent,
                ContainerEventType::ContainerStartedEvent,
            ] {
                crust.events.emit(&id, &id, kind);
            }
            Ok(id)
        })
        .await
        .map(|id| RunPodSandboxResponse { pod_sandbox_id: id });
        let id = res
            .as_ref()
            .map(|r| r.pod_sandbox_id.clone())
            .unwrap_or(name);
        done("RunPodSandbox", &id, t, res)
    }

    async fn stop_pod_sandbox(
        &self,
        r: Request<StopPodSandboxRequest>,
    ) -> std::result::Result<Response<StopPodSandboxResponse>, Status> {
        let t = Instant::now();
        let id = r.into_inner().pod_sandbox_id;
        let (crust, i) = (self.crust.clone(), id.clone());
        let res = detached(async move { stop::stop(crust, &i).await })
            .await
            .map(|_| StopPodSandboxResponse {});
        done("StopPodSandbox", &id, t, res)
    }

    async fn remove_pod_sandbox(
        &self,
        r: Request<RemovePodSandboxRequest>,
    ) -> std::result::Result<Response<RemovePodSandboxResponse>, Status> {
        let t = Instant::now();
        let id = r.into_inner().pod_sandbox_id;
        let (crust, i) = (self.crust.clone(), id.clone());
        let res = detached(async move { stop::remove(crust, &i).await })
            .await
            .map(|_| RemovePodSandboxResponse {});
        done("RemovePodSandbox", &id, t, res)
    }

    async fn pod_sandbox_status(
        &self,
        r: Request<PodSandboxStatusRequest>,
    ) -> std::result::Result<Response<PodSandboxStatusResponse>, Status> {
        let t = Instant::now();
        let req = r.into_inner();
        let res = status::status(self.crust.clone(), &req.pod_sandbox_id, req.verbose)
            .await
            .map(|(s, info)| PodSandboxStatusResponse {
                containers_statuses: crate::containers::status::of_sandbox(&self.crust, &s.id),
                status: Some(s),
                info,
                timestamp: crate::daemon::util::now_ns(),
            });
        done("PodSandboxStatus", &req.pod_sandbox_id, t, res)
    }

    async fn list_pod_sandbox(
        &self,
        r: Request<ListPodSandboxRequest>,
    ) -> std::result::Result<Response<ListPodSandboxResponse>, Status> {
        let t = Instant::now();
        let res = status::list(self.crust.clone(), r.into_inner().filter)
            .await
            .map(|items| ListPodSandboxResponse { items });
        done("ListPodSandbox", "", t, res)
    }

    async fn create_container(
        &self,
        r: Request<CreateContainerRequest>,
    ) -> std::result::Result<Response<CreateContainerResponse>, Status> {
        let t = Instant::now();
        let req = r.into_inner();
        let sandbox = req.pod_sandbox_id.clone();
        let res = detached(containers::create::create(self.crust.clone(), req))
            .await
            .map(|container_id| CreateContainerResponse { container_id });
        let id = res
            .as_ref()
            .map(|r| r.container_id.clone())
            .unwrap_or(sandbox);
        done("CreateContainer", &id, t, res)
    }

    async fn start_container(
        &self,
        r: Request<StartContainerRequest>,
    ) -> std::result::Result<Response<StartContainerResponse>, Status> {
        let t = Instant::now();
        let id = r.into_inner().container_id;
        let (crust, i) = (self.crust.clone(), id.clone());
        let res = detached(async move { containers::lifecycle::start(crust, &i).await })
            .await
            .map(|()| StartContainerResponse {});
        done("StartContainer", &id, t, res)
    }

    async fn stop_container(
        &self,
        r: Request<StopContainerRequest>,
    ) -> std::result::Result<Response<StopContainerResponse>, Status> {
        let t = Instant::now();
        let req = r.into_inner();
        let (crust, i) = (self.crust.clone(), req.container_id.clone());
        let res =
            detached(async move { containers::lifecycle::stop(crust, &i, req.timeout).await })
                .await
                .map(|()| StopContainerResponse {});
        done("StopContainer", &req.container_id, t, res)
    }

    async fn remove_container(
        &self,
        r: Request<RemoveContainerRequest>,
    ) -> std::result::Result<Response<RemoveContainerResponse>, Status> {
        let t = Instant::now();
        let id = r.into_inner().container_id;
        let (crust, i) = (self.crust.clone(), id.clone());
        let res = detached(async move { containers::lifecycle::remove(crust, &i).await })
            .await
            .map(|()| RemoveContainerResponse {});
        done("RemoveContainer", &id, t, res)
    }

    async fn list_containers(
        &self,
        r: Request<ListContainersRequest>,
    ) -> std::result::Result<Response<ListContainersResponse>, Status> {
        let t = Instant::now();
        let res = containers::status::list(self.crust.clone(), r.into_inner().filter)
            .await
            .map(|containers| ListContainersResponse { containers });
        done("ListContainers", "", t, res)
    }

    async fn container_status(
        &self,
        r: Request<ContainerStatusRequest>,
    ) -> std::result::Result<Response<ContainerStatusResponse>, Status> {
        let t = Instant::now();
        let req = r.into_inner();
        let res =
            containers::status::status(self.crust.clone(), &req.container_id, req.verbose).await;
        done("ContainerStatus", &req.container_id, t, res)
    }

    async fn update_container_resources(
        &self,
        r: Request<UpdateContainerResourcesRequest>,
    ) -> std::result::Result<Response<UpdateContainerResourcesResponse>, Status> {
        let t = Instant::now();
        let req = r.into_inner();
        let (crust, i) = (self.crust.clone(), req.container_id.clone());
        let res =
            detached(
                async move { containers::update::update_resources(crust, &i, req.linux).await },
            )
            .await
            .map(|()| UpdateContainerResourcesResponse {});
        done("UpdateContainerResources", &req.container_id, t, res)
    }

    async fn reopen_container_log(
        &self,
        r: Request<ReopenContainerLogRequest>,
    ) -> std::result::Result<Response<ReopenContainerLogResponse>, Status> {
        let t = Instant::now();
        let id = r.into_inner().container_id;
        let res = containers::log::reopen_log(self.crust.clone(), &id)
            .await
            .map(|()| ReopenContainerLogResponse {});
        done("ReopenContainerLog", &id, t, res)
    }

    async fn exec_sync(
        &self,
        r: Request<ExecSyncRequest>,
    ) -> std::result::Result<Response<ExecSyncResponse>, Status> {
        let t = Instant::now();
        let req = r.into_inner();
        let id = req.container_id.clone();
        let res = exec::exec_sync(self.crust.clone(), req).await;
        done("ExecSync", &id, t, res)
    }

    async fn exec(
        &self,
        r: Request<ExecRequest>,
    ) -> std::result::Result<Response<ExecResponse>, Status> {
        let t = Instant::now();
        let req = r.into_inner();
        let id = req.container_id.clone();
        let res = crate::streaming::server::exec(&self.crust, req)
            .await
            .map(|url| ExecResponse { url });
        done("Exec", &id, t, res)
    }

    async fn attach(
        &self,
        r: Request<AttachRequest>,
    ) -> std::result::Result<Response<AttachResponse>, Status> {
        let t = Instant::now();
        let req = r.into_inner();
        let id = req.container_id.clone();
        let res = crate::streaming::server::attach(&self.crust, req)
            .await
            .map(|url| AttachResponse { url });
        done("Attach", &id, t, res)
    }

    async fn port_forward(
        &self,
        r: Request<PortForwardRequest>,
    ) -> std::result::Result<Response<PortForwardResponse>, Status> {
        let t = Instant::now();
        let req = r.into_inner();
        let id = req.pod_sandbox_id.clone();
        let res = crate::streaming::server::port_forward(&self.crust, req)
            .await
            .map(|url| PortForwardResponse { url });
        done("PortForward", &id, t, res)
    }

    async fn container_stats(
        &self,
        r: Request<ContainerStatsRequest>,
    ) -> std::result::Result<Response<ContainerStatsResponse>, Status> {
        let t = Instant::now();
        let id = r.into_inner().container_id;
        let res = stats::container(self.crust.clone(), &id).await;
        done("ContainerStats", &id, t, res)
    }

    async fn list_container_stats(
        &self,
        r: Request<ListContainerStatsRequest>,
    ) -> std::result::Result<Response<ListContainerStatsResponse>, Status> {
        let t = Instant::now();
        let res = stats::list_containers(self.crust.clone(), r.into_inner().filter)
            .await
            .map(|stats| ListContainerStatsResponse { stats });
        done("ListContainerStats", "", t, res)
    }

    async fn pod_sandbox_stats(
        &self,
        r: Request<PodSandboxStatsRequest>,
    ) -> std::result::Result<Response<PodSandboxStatsResponse>, Status> {
        let t = Instant::now();
        let id = r.into_inner().pod_sandbox_id;
        let res = stats::sandbox(self.crust.clone(), &id).await;
        done("PodSandboxStats", &id, t, res)
    }

    async fn list_pod_sandbox_stats(
        &self,
        r: Request<ListPodSandboxStatsRequest>,
    ) -> std::result::Result<Response<ListPodSandboxStatsResponse>, Status> {
        let t = Instant::now();
        let res = stats::list_sandboxes(self.crust.clone(), r.into_inner().filter)
            .await
            .map(|stats| ListPodSandboxStatsResponse { stats });
        done("ListPodSandboxStats", "", t, res)
    }

    async fn update_runtime_config(
        &self,
        r: Request<UpdateRuntimeConfigRequest>,
    ) -> std::result::Result<Response<UpdateRuntimeConfigResponse>, Status> {
        let t = Instant::now();
        let res = runtime_info::update_runtime_config(&self.crust, r.into_inner())
            .map(|_| UpdateRuntimeConfigResponse {});
        done("UpdateRuntimeConfig", "", t, res)
    }

    async fn status(
        &self,
        r: Request<StatusRequest>,
    ) -> std::result::Result<Response<StatusResponse>, Status> {
        Ok(Response::new(runtime_info::status(
            &self.crust,
            r.into_inner().verbose,
        )))
    }

    async fn checkpoint_container(
        &self,
        _r: Request<CheckpointContainerRequest>,
    ) -> std::result::Result<Response<CheckpointContainerResponse>, Status> {
        later("CheckpointContainer")
    }

    type GetContainerEventsStream = std::pin::Pin<
        Box<
            dyn tokio_stream::Stream<Item = std::result::Result<ContainerEventResponse, Status>>
                + Send,
        >,
    >;

    async fn get_container_events(
        &self,
        _r: Request<GetEventsRequest>,
    ) -> std::result::Result<Response<Self::GetContainerEventsStream>, Status> {
        let sub = self.crust.events.subscribe();
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        tokio::spawn(forward_events(sub, tx));
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    async fn list_metric_descriptors(
        &self,
        _r: Request<ListMetricDescriptorsRequest>,
    ) -> std::result::Result<Response<ListMetricDescriptorsResponse>, Status> {
        let descriptors = metrics::descriptors();
        done(
            "ListMetricDescriptors",
            "",
            Instant::now(),
            Ok(ListMetricDescriptorsResponse { descriptors }),
        )
    }

    async fn list_pod_sandbox_metrics(
        &self,
        _r: Request<ListPodSandboxMetricsRequest>,
    ) -> std::result::Result<Response<ListPodSandboxMetricsResponse>, Status> {
        let t = Instant::now();
        let res = metrics::list(self.crust.clone())
            .await
            .map(|pod_metrics| ListPodSandboxMetricsResponse { pod_metrics });
        done("ListPodSandboxMetrics", "", t, res)
    }

    async fn runtime_config(
        &self,
        _r: Request<RuntimeConfigRequest>,
    ) -> std::result::Result<Response<RuntimeConfigResponse>, Status> {
        Ok(Response::new(runtime_info::runtime_config(&self.crust)))
    }
}

/// Feeds one GetContainerEvents client from the daemon's broadcast of events, until the
/// client goes away. A client that missed events must not go on as if it had not: when
/// it falls behind the broadcast's backlog, its stream ends with RESOURCE_EXHAUSTED, and
/// the client, subscribing again, looks at everything (the kubelet relists; the
/// crustlet wakes every worker).
async fn forward_events(
    mut sub: tokio::sync::broadcast::Receiver<ContainerEventResponse>,
    tx: tokio::sync::mpsc::Sender<std::result::Result<ContainerEventResponse, Status>>,
) {
    loop {
        match sub.recv().await {
            Ok(ev) => {
                if tx.send(Ok(ev)).await.is_err() {
                    return; // the client went away
                }
            }
            Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                tracing::warn!(missed = n, "a GetContainerEvents client fell behind");
                let msg = format!("the event stream fell {n} events behind; subscribe again");
                let _ = tx.send(Err(Status::resource_exhausted(msg))).await;
                return;
            }
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        }
    }
}

#[cfg(test)]
mod event_stream_tests {
    use super::*;

    fn event(id: &str) -> ContainerEventResponse {
        ContainerEventResponse {
            container_id: id.into(),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn a_client_that_fell_behind_gets_resource_exhausted_and_its_stream_ends() {
        let (out, sub) = tokio::sync::broadcast::channel(4);
        let (tx, mut rx) = tokio::sync::mpsc::channel(64);
        out.send(event("first")).unwrap();
        let task = tokio::spawn(forward_events(sub, tx));
        assert_eq!(rx.recv().await.unwrap().unwrap().container_id, "first");
        // The client keeps up: every event reaches it, in order.
        for i in 0..3 {
            out.send(event(&i.to_string())).unwrap();
            assert_eq!(
                rx.recv().await.unwrap().unwrap().container_id,
                i.to_string()
            );
        }
        // Its forwarder cannot hand events on (the client stopped reading and its
        // buffer is full), and the broadcast goes past its backlog of 4.
        let (tx, mut slow) = tokio::sync::mpsc::channel(1);
        let sub = out.subscribe();
        let task2 = tokio::spawn(forward_events(sub, tx));
        for i in 0..10 {
            out.send(event(&format!("burst-{i}"))).unwrap();
            tokio::task::yield_now().await;
        }
        let mut got = vec![];
        let drain = async {
            while let Some(item) = slow.recv().await {
                got.push(item);
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(10), drain)
            .await
            .expect("the lagging client's stream ends");
        let last = got.pop().unwrap().unwrap_err();
        assert_eq!(last.code(), tonic::Code::ResourceExhausted, "{last:?}");
        assert!(
            got.iter().all(|e| e.is_ok()),
            "only events before the error"
        );
        assert!(got.len() < 10, "events were missed: {}", got.len());
        task2.await.unwrap();
        // The first client, which kept up, got the burst whole and still gets events.
        for i in 0..10 {
            let ev = rx.recv().await.unwrap().unwrap();
            assert_eq!(ev.container_id, format!("burst-{i}"));
        }
        out.send(event("after")).unwrap();
        assert_eq!(rx.recv().await.unwrap().unwrap().container_id, "after");
        drop(out);
        task.await.unwrap();
        assert!(
            rx.recv().await.is_none(),
            "the stream ends with the daemon's broadcast"
        );
    }
}
