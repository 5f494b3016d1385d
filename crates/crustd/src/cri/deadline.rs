//! The client's deadline (the `grpc-timeout` header) answered with DEADLINE_EXCEEDED,
//! as gRPC servers in Go (containerd, CRI-O) answer it and as the CRI conformance
//! suite checks ("public image should timeout if requested" pulls with a 1 ms
//! deadline and wants DeadlineExceeded).
//!
//! tonic's server enforces the same header itself, in a layer outside every layer a
//! program can add, and answers CANCELLED ("Timeout expired"). A client that keeps
//! its own timer (grpc-go's, the kubelet's) sees DEADLINE_EXCEEDED only when that
//! timer wins the race; a client that leaves the deadline to the server (tonic's)
//! always sees CANCELLED. This layer sits inside tonic's and gives up
//! [`MARGIN`] earlier: tonic's layer polls the call before its own timer, so this
//! answer is the one that goes out. Either way the handler's future is dropped when
//! the deadline passes, as before.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tonic::codegen::http::{HeaderMap, Request, Response};

/// How much earlier than tonic's own timeout this one fires: far more than the time
/// between the two layers' calls (microseconds; more in an emulated VM), so its timer
/// is due first on tokio's millisecond wheel. The deadline is taken in `call`, when
/// tonic's timer has just been set, not when the future is first polled: that can come
/// later than tonic's own deadline on a slow machine (the VM suite saw CANCELLED).
pub const MARGIN: Duration = Duration::from_millis(5);

/// The `grpc-timeout` header's duration: 1 to 8 ASCII digits and a unit (`H`, `M`,
/// `S`, `m`, `u`, `n`), as the gRPC HTTP/2 protocol defines it; `None` when the
/// header is absent or malformed (tonic ignores a malformed one too).
pub fn grpc_timeout(headers: &HeaderMap) -> Option<Duration> {
    let v = headers.get("grpc-timeout")?.to_str().ok()?;
    if v.len() < 2 || v.len() > 9 {
        return None;
    }
    let (digits, unit) = v.split_at(v.len() - 1);
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// The layer: `Server::builder().layer(DeadlineLayer)`.
#[derive(Clone, Copy, Debug, Default)]
pub struct DeadlineLayer;

impl<S> tower::Layer<S> for DeadlineLayer {
    type Service = Deadline<S>;
    fn layer(&self, inner: S) -> Deadline<S> {
        Deadline { inner }
    }
}

/// Wraps the service of every RPC (see the module).
#[derive(Clone, Debug)]
pub struct Deadline<S> {
    inner: S,
}

impl<S, ReqBody, ResBody> tower::Service<Request<ReqBody>> for Deadline<S>
where
    S: tower::Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Future: Send + 'static,
    S::Error: 'static,
    ResBody: Default + 'static,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<ResBody>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let timeout = grpc_timeout(req.headers());
        let due = timeout.map(|t| tokio::time::Instant::now() + t.saturating_sub(MARGIN));
        let path = req.uri().path().to_string();
        let call = self.inner.call(req);
        Box::pin(async move {
            let (Some(timeout), Some(due)) = (timeout, due) else {
                return call.await;
            };
            match tokio::time::timeout_at(due, call).await {
                Ok(res) => res,
                Err(_) => {
                    tracing::debug!(rpc = %path, ?timeout, "the client's deadline passed");
                    Ok(tonic::Status::deadline_exceeded(format!(
                        "the client's deadline ({timeout:?}) passed"
                    ))
                    .into_http())
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::{Layer, Service, ServiceExt};

    fn headers(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("grpc-timeout", v.parse().unwrap());
        h
    }

    #[test]
    fn parses_every_unit_and_refuses_malformed_values() {
        for (v, want) in [
            ("2H", Duration::from_secs(7200)),
            ("3M", Duration::from_secs(180)),
            ("10S", Duration::from_secs(10)),
            ("1m", Duration::from_millis(1)),
            ("1999843u", Duration::from_micros(1_999_843)),
            ("99999999n", Duration::from_nanos(99_999_999)),
        ] {
            assert_eq!(grpc_timeout(&headers(v)), Some(want), "{v}");
        }
        for v in ["", "m", "5", "5x", "-5m", "123456789m", "1.5S", " 5m"] {
            let h = if v.is_empty() {
                HeaderMap::new()
            } else {
                headers(v)
            };
            assert_eq!(grpc_timeout(&h), None, "{v:?}");
        }
    }

    /// A request carrying the client's `grpc-timeout`.
    fn with_timeout(timeout: &str) -> Request<String> {
        let mut req = Request::new(String::new());
        req.headers_mut()
            .insert("grpc-timeout", timeout.parse().unwrap());
        req
    }

    /// A handler slower than the deadline: the call ends with DEADLINE_EXCEEDED in the
    /// response's headers (a trailers-only gRPC response), soon after the deadline.
    #[tokio::test]
    async fn a_call_past_its_deadline_answers_deadline_exceeded() {
        let slow = tower::service_fn(|_req: Request<String>| async {
            tokio::time::sleep(Duration::from_secs(30)).await;
            Ok::<_, std::convert::Infallible>(Response::new(String::from("late")))
        });
        let mut svc = DeadlineLayer.layer(slow);
        let req = with_timeout("20m");
        let start = std::time::Instant::now();
        let res = svc.ready().await.unwrap().call(req).await.unwrap();
        assert!(start.elapsed() < Duration::from_secs(5));
        let status = tonic::Status::from_header_map(res.headers()).expect("a grpc-status");
        assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
    }

    /// The deadline runs from the call, not from the first poll of its future: polled
    /// late (a loaded or emulated machine), the call is already past it, and answers at
    /// once, before tonic's own timer (set at the call) can answer CANCELLED.
    #[tokio::test]
    async fn the_deadline_runs_from_the_call_not_the_first_poll() {
        let slow = tower::service_fn(|_req: Request<String>| async {
            tokio::time::sleep(Duration::from_secs(30)).await;
            Ok::<_, std::convert::Infallible>(Response::new(String::from("late")))
        });
        let mut svc = DeadlineLayer.layer(slow);
        let req = with_timeout("50m");
        let fut = svc.ready().await.unwrap().call(req);
        tokio::time::sleep(Duration::from_millis(150)).await;
        let mut fut = std::pin::pin!(fut);
        let first = std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx))).await;
        let Poll::Ready(res) = first else {
            panic!("the call was not over at its first poll, 100 ms past its deadline");
        };
        let status = tonic::Status::from_header_map(res.unwrap().headers()).expect("a grpc-status");
        assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
    }

    /// In time, or without a deadline, the handler's own answer goes out.
    #[tokio::test]
    async fn a_call_in_time_or_without_deadline_is_untouched() {
        let quick = tower::service_fn(|_req: Request<String>| async {
            Ok::<_, std::convert::Infallible>(Response::new(String::from("done")))
        });
        let mut svc = DeadlineLayer.layer(quick);
        for timeout in [Some("10S"), None] {
            let mut req = Request::new(String::new());
            if let Some(t) = timeout {
                req.headers_mut().insert("grpc-timeout", t.parse().unwrap());
            }
            let res = svc.ready().await.unwrap().call(req).await.unwrap();
            assert_eq!(res.body(), "done", "{timeout:?}");
        }
    }
}
