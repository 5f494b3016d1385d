//! What the `:authority` fix costs per request, in one run on this machine:
//! - the transcoder alone on a kubelet-shaped request (HEADERS as grpc-go writes them
//!   with its HPACK table warm, plus the DATA frame): passed through (an authority the
//!   server takes, as crictl and tonic send) and written anew (the socket path);
//! - a unary call's round trip over a unix socket to a tonic server (ImageStatus on a
//!   stub ImageService), served straight and through [`AuthorityFix`], rounds
//!   alternating.
//!
//! `cargo bench -p cri-api --bench authority`

use cri_api::authority::{AuthorityFix, Transcoder};
use cri_api::*;
use std::time::{Duration, Instant};
use tonic::{Request, Response, Status};

/// A grpc-go client's first and second request blocks (see the authority tests): the
/// second indexes what the first added, as every later request does.
const FIRST: &str = "8386449962cb6a49a92afdc2bedb6a49a92ee2d9dcc42b1c4b620c7abf418f62cb6a60965a84b04b2d425741c9d75f8b1d75d0620d263d4c4d65647a8b9acac8b4c7602bb6f2ecff4082497f864d833505b11f40899acac8b24d494f6a7f860befbef34cdb";
const LATER: &str = "8386449862cb6a49a92afdc2bedb6a49a92ee2d9dcc42b1b9234da8fc3c2c1c0bf";
/// The same requests with `localhost` as the authority.
const FIRST_LOCALHOST: &str = "8386449962cb6a49a92afdc2bedb6a49a92ee2d9dcc42b1c4b620c7abf4186a0e41d139d095f8b1d75d0620d263d4c4d65647a8b9acac8b4c7602bb6f2ecff4082497f864d833505b11f40899acac8b24d494f6a7f860befbef34cdb";

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    f.extend_from_slice(&[kind, flags]);
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// Nanoseconds per request through a transcoder that has seen `first` already.
fn transcode(first: &[u8], later: &[u8], rewriting: bool) -> f64 {
    let mut t = Transcoder::default();
    let mut out = Vec::with_capacity(1 << 16);
    let mut conn = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    conn.extend(frame(1, 4, 1, first));
    t.feed(&conn, &mut out).unwrap();
    assert_eq!(t.rewriting(), rewriting);
    let n = 200_000u32;
    let reqs: Vec<Vec<u8>> = (0..64u32)
        .map(|i| {
            let mut r = frame(1, 4, 3 + 2 * i, later);
            r.extend(frame(
                0,
                1,
                3 + 2 * i,
                &[0, 0, 0, 0, 4, 0x0a, 0x02, b'v', b'1'],
            ));
            r
        })
        .collect();
    let start = Instant::now();
    for i in 0..n {
        out.clear();
        t.feed(&reqs[(i % 64) as usize], &mut out).unwrap();
    }
    start.elapsed().as_nanos() as f64 / n as f64
}

#[derive(Clone)]
struct Stub;

#[tonic::async_trait]
impl ImageService for Stub {
    async fn list_images(
        &self,
        _: Request<ListImagesRequest>,
    ) -> Result<Response<ListImagesResponse>, Status> {
        Ok(Response::new(Default::default()))
    }
    async fn image_status(
        &self,
        _: Request<ImageStatusRequest>,
    ) -> Result<Response<ImageStatusResponse>, Status> {
        Ok(Response::new(Default::default()))
    }
    async fn pull_image(
        &self,
        _: Request<PullImageRequest>,
    ) -> Result<Response<PullImageResponse>, Status> {
        Ok(Response::new(Default::default()))
    }
    async fn remove_image(
        &self,
        _: Request<RemoveImageRequest>,
    ) -> Result<Response<RemoveImageResponse>, Status> {
        Ok(Response::new(Default::default()))
    }
    async fn image_fs_info(
        &self,
        _: Request<ImageFsInfoRequest>,
    ) -> Result<Response<ImageFsInfoResponse>, Status> {
        Ok(Response::new(Default::default()))
    }
}

async fn serve(path: std::path::PathBuf, fix: bool) {
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
    let server = tonic::transport::Server::builder().add_service(ImageServiceServer::new(Stub));
    if fix {
        let incoming = tokio_stream::StreamExt::map(incoming, |c| c.map(AuthorityFix::new));
        server.serve_with_incoming(incoming).await.unwrap();
    } else {
        server.serve_with_incoming(incoming).await.unwrap();
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let pass = transcode(&hex(FIRST_LOCALHOST), &hex(LATER), false);
    let rewrite = transcode(&hex(FIRST), &hex(LATER), true);
    println!("transcoder per request: passed through {pass:.0} ns, written anew {rewrite:.0} ns");

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dir = std::env::temp_dir().join(format!("crust-authority-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (plain, fixed) = (dir.join("plain.sock"), dir.join("fixed.sock"));
        tokio::spawn(serve(plain.clone(), false));
        tokio::spawn(serve(fixed.clone(), true));
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut clients = Vec::new();
        for p in [&plain, &fixed] {
            clients.push(ImageServiceClient::new(connect_unix(p).await.unwrap()));
        }
        let (mut times, rounds, per) = ([Vec::new(), Vec::new()], 40, 500);
        for round in 0..rounds {
            for k in 0..2 {
                // Alternate which side goes first.
                let side = (k + round) % 2;
                let c = &mut clients[side];
                let start = Instant::now();
                for _ in 0..per {
                    c.image_status(ImageStatusRequest::default()).await.unwrap();
                }
                if round >= 4 {
                    times[side].push(start.elapsed() / per);
                }
            }
        }
        let [p, f] = times.map(median);
        println!(
            "unary round trip over a unix socket: straight {:.1} µs, through AuthorityFix {:.1} µs (ratio {:.3})",
            p.as_nanos() as f64 / 1000.0,
            f.as_nanos() as f64 / 1000.0,
            f.as_nanos() as f64 / p.as_nanos() as f64
        );
        std::fs::remove_dir_all(&dir).ok();
    });
}
