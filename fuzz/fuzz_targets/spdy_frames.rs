//! SPDY/3.1 frames as a client of the streaming server (exec, attach, port-forward)
//! sends them after the upgrade: the whole input is the client's side of the
//! connection, then it hangs up. Every stream the session accepts is read to its end.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fuzz_target!(|data: &[u8]| {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let data = data.to_vec();
    rt.block_on(async move {
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        let peer = tokio::spawn(async move {
            let mut sink = vec![0u8; 16 * 1024];
            let (mut rd, mut wr) = tokio::io::split(&mut client);
            let write = async {
                let _ = wr.write_all(&data).await;
                let _ = wr.shutdown().await;
            };
            let read = async { while matches!(rd.read(&mut sink).await, Ok(n) if n > 0) {} };
            tokio::join!(write, read);
        });
        let mut session = streaming::spdy::Session::server(server);
        let served = async {
            while let Some(mut stream) = session.accept().await {
                let _ = stream.header(":path");
                let _ = stream.reply();
                tokio::spawn(async move { while stream.read().await.is_some() {} });
            }
            session.closed().await;
        };
        tokio::time::timeout(Duration::from_secs(10), served)
            .await
            .expect("the session did not end after the peer hung up");
        drop(session);
        peer.abort();
    });
});
